"""Real runs of pytorch-synthetic: the suite's CLI, the real stack, real horovodrun/Gloo workers."""

import pytest
from conftest import records_in, tiny, write

from suite.inputs.host_gpus import host_gpus
from suite.records.schema import validate

TINY = tiny("pytorch-synthetic")



@pytest.mark.parametrize("workers", [1, 2])
def test_horovod_run_writes_a_valid_record(suite_cli, pytorch_stack, workers):
    result = suite_cli("run", "--gpus-per-node", str(workers), case_args=TINY)
    assert result.returncode == 0, result.stdout + result.stderr
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "ok" and record["reason"] is None
    world = record["world"]
    assert (world["nodes"], world["devices"], world["hosts"], world["slots"]) == (
        1, workers, ["localhost"], {"localhost": workers})
    assert (world["device_type"], world["cluster"]) == ("cuda" if host_gpus() else "cpu", "localhost")
    tp = record["metrics"]["throughput"]
    assert len(tp["samples"]) == 3 and all(s > 0 for s in tp["samples"])
    assert tp["per_device"] == pytest.approx(tp["mean"] / workers)
    assert tp["ci95"] is not None and tp["ci95_basis"] == "iterations"
    cfg = record["config"]
    assert (cfg["batch_per_device"], cfg["global_batch"], cfg["image_size"]) == (4, 4 * workers, 32)
    assert cfg["reported_by_case"]["parameters"] == 25_557_032
    assert cfg["reported_by_case"]["lr"] == pytest.approx(0.01 * workers)
    assert record["execution"]["controller"] == "gloo"
    prov = record["provenance"]
    assert prov["stack_lock_sha256"] == pytorch_stack.stack.lock_sha256
    assert prov["versions"]["torch"].startswith("2.13.0") and prov["versions"]["horovod"] == "0.28.1"
    assert prov["host_info"] and all(info["cpu_model"] for info in prov["host_info"].values())
    assert "record: " in result.stdout and "img/s per device" in result.stdout
    assert "iteration 3/3" in result.stdout  # live progress from rank 0


def test_repetitions_are_separate_launches(suite_cli, pytorch_stack):
    result = suite_cli("run", "--repeat", "2", case_args=TINY)
    assert result.returncode == 0, result.stdout + result.stderr
    [record] = records_in(suite_cli.results)
    tp = record["metrics"]["throughput"]
    assert tp["ci95_basis"] == "repetitions" and tp["n"] == 2 and len(tp["samples"]) == 6
    assert [r["index"] for r in record["repetitions"]] == [0, 1]
    assert len({r["run_dir"] for r in record["repetitions"]}) == 2


def test_failed_launch_leaves_a_record_saying_why(suite_cli, pytorch_stack, tmp_path):
    # The second host does not exist: horovodrun cannot reach it over ssh and the run must fail cleanly.
    hostfile = write(tmp_path / "hosts", "localhost slots=1\nno-such-host.invalid slots=1\n")
    refused = suite_cli("run", "--nodes", "2", "--hostfile", str(hostfile), case_args=TINY)
    assert refused.returncode == 2 and "SCHEDULER=ssh" in refused.stderr  # the local scheduler cannot reach it
    result = suite_cli("run", "--nodes", "2", "--hostfile", str(hostfile), "--scheduler", "ssh", "--timeout", "300",
                       case_args=TINY)
    assert result.returncode == 1
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "failed"
    assert record["reason"].startswith("repetition 0: horovodrun on localhost exited with")
    assert record["world"]["hosts"] == ["localhost", "no-such-host.invalid"]
    assert "FAILED" in result.stderr


def test_report_includes_a_real_run(suite_cli, pytorch_stack, tmp_path):
    import csv
    import subprocess
    import sys

    from conftest import ROOT

    assert suite_cli("run", "--gpus-per-node", "2", case_args=TINY).returncode == 0
    [record] = records_in(suite_cli.results)
    out = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "suite", "report", "--results-dir", str(suite_cli.results),
                    "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert [r["run_id"] for r in rows] == [record["run_id"]]
    assert float(rows[0]["throughput"]) == pytest.approx(record["metrics"]["throughput"]["mean"])
    assert record["run_id"] in (out / "case-pytorch-synthetic.html").read_text()

"""Sweeps over node counts with repetitions: every combination launched, one record each, speedup table; a
sweep resumed where a point has no ok record."""

import json

import pytest
from conftest import records_in, tiny, write
from support.fixture_records import make_record

from suite.analysis.sweeps import summarize_sweep

TINY = tiny("pytorch-synthetic", num_iters=2)


def test_sweep_over_nodes_with_repetitions(suite_cli, pytorch_stack, tmp_path):
    # Two names of this machine: horovodrun treats both as local hosts, so no ssh is needed.
    hostfile = write(tmp_path / "two-local", "localhost slots=1\n127.0.0.1 slots=1\n")
    result = suite_cli("run", "--nodes", "2,1", "--repeat", "2", "--hostfile", str(hostfile), case_args=TINY)
    assert result.returncode == 0, result.stdout + result.stderr
    records = records_in(suite_cli.results)
    assert sorted(r["world"]["nodes"] for r in records) == [1, 2]
    assert len({r["sweep_id"] for r in records}) == 1 and records[0]["sweep_id"]
    assert sum(len(r["repetitions"]) for r in records) == 4  # 4 separate launches
    assert all(len({rep["run_dir"] for rep in r["repetitions"]}) == 2 for r in records)
    sweeps = suite_cli.results.parent / "sweeps"
    [summary_file] = [path for path in sweeps.glob("*.json") if not path.name.endswith(".plan.json")]
    assert (sweeps / summary_file.name.replace(".json", ".plan.json")).is_file()  # its plan, written beside it
    summary = json.loads(summary_file.read_text())
    assert [row["devices"] for row in summary["rows"]] == [1, 2]  # smallest first
    assert summary["baseline"]["devices"] == 1 and summary["rows"][0]["speedup"] == pytest.approx(1.0)
    two = summary["rows"][1]
    assert two["speedup"] == pytest.approx(two["throughput"] / summary["rows"][0]["throughput"])
    assert two["efficiency_pct"] == pytest.approx(100 * two["speedup"] / 2)
    assert "speedup" in result.stdout and summary["sweep_id"] in result.stdout



def test_a_resume_runs_again_only_the_point_without_an_ok_record(suite_cli, pytorch_stack):
    result = suite_cli("run", "--gpus-per-node", "1,2", case_args=TINY)
    assert result.returncode == 0, result.stdout + result.stderr
    one, two = sorted(records_in(suite_cli.results), key=lambda r: r["world"]["devices"])
    sweep_id = one["sweep_id"]
    (suite_cli.results / f"{two['run_id']}.json").unlink()  # as if the job had ended before its record
    result = suite_cli("resume", sweep_id)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (f"sweep {sweep_id}: 1 of 2 points to run again, 1 node(s) x 2 device(s) (its record {two['run_id']} is "
            "not in the results folder); kept: 1 node(s) x 1 device(s)") in result.stdout
    kept, new = sorted(records_in(suite_cli.results), key=lambda r: r["world"]["devices"])
    assert kept == one and new["run_id"] != two["run_id"] and new["sweep_id"] == sweep_id and new["status"] == "ok"
    table = json.loads((suite_cli.results.parent / "sweeps" / f"{sweep_id}.json").read_text())
    assert [row["run_id"] for row in table["rows"]] == [one["run_id"], new["run_id"]]
    assert table["baseline"]["run_id"] == one["run_id"] and table["resumes"][0]["points"] == [[1, 2]]
    again = suite_cli("resume", sweep_id)
    assert again.returncode == 2 and again.stderr == (f"error: sweep {sweep_id}: nothing to resume, all 2 points have "
                                                      "an ok record (1 node(s) x 1 device(s), 1 node(s) x 2 "
                                                      "device(s))\n")

def test_failed_point_is_kept_and_baseline_is_smallest_success(tmp_path):
    ok1 = make_record(tmp_path / "r", tmp_path / "runs", devices=2, per_device=(50,))
    ok2 = make_record(tmp_path / "r", tmp_path / "runs", devices=4, per_device=(40,))
    failed = {**ok1, "status": "failed", "reason": "worker died", "world": {**ok1["world"], "devices": 1, "nodes": 1},
              "metrics": {**ok1["metrics"],
                          "throughput": {**ok1["metrics"]["throughput"], "mean": None, "per_device": None}}}
    summary = summarize_sweep("s", [(failed, "f.json"), (ok1, "a.json"), (ok2, "b.json")], None)
    assert summary["baseline"]["devices"] == 2
    rows = summary["rows"]
    assert rows[0]["status"] == "failed" and rows[0]["speedup"] is None and rows[0]["reason"] == "worker died"
    assert rows[2]["speedup"] == pytest.approx(160 / 100, rel=0.02)
    assert rows[2]["efficiency_pct"] == pytest.approx(80, rel=0.02)


def test_explicit_baseline(tmp_path):
    base = make_record(tmp_path / "r", tmp_path / "runs", devices=1, per_device=(100,))
    point = make_record(tmp_path / "r", tmp_path / "runs", devices=4, per_device=(50,))
    from suite.analysis.sweeps import load_baseline

    baseline = load_baseline(str(tmp_path / "r" / f"{base['run_id']}.json"))
    summary = summarize_sweep("s", [(point, "p.json")], baseline)
    assert summary["baseline"]["run_id"] == base["run_id"]
    assert summary["rows"][0]["speedup"] == pytest.approx(2.0, rel=0.02)

"""Sweeps over node counts with repetitions: every combination launched, one record each, speedup table."""

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
    [summary_file] = (suite_cli.results.parent / "sweeps").glob("*.json")
    summary = json.loads(summary_file.read_text())
    assert [row["devices"] for row in summary["rows"]] == [1, 2]  # smallest first
    assert summary["baseline"]["devices"] == 1 and summary["rows"][0]["speedup"] == pytest.approx(1.0)
    two = summary["rows"][1]
    assert two["speedup"] == pytest.approx(two["throughput"] / summary["rows"][0]["throughput"])
    assert two["efficiency_pct"] == pytest.approx(100 * two["speedup"] / 2)
    assert "speedup" in result.stdout and summary["sweep_id"] in result.stdout


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

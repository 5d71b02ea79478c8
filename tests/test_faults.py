"""Faults during a real run: a worker dies, or the runner is told to stop. The whole job must end
within the bound, leave no process of the run behind (checked by the run's own pids) and leave a
failed record that says why."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, records_in, tiny
from suite.schema import validate

pytestmark = pytest.mark.integration
LONG = tiny("pytorch-synthetic", num_iters=500)
BOUND_S = 60


def start_run(tmp_path: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "suite", "run", "--results-dir", str(tmp_path / "results"),
               "--runs-dir", str(tmp_path / "runs"), *args, "--", *LONG]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_ranks(tmp_path: Path, ranks: int, timeout: float = 300) -> dict[int, int]:
    """rank -> pid, once every rank has finished a timed iteration."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = {}
        for path in tmp_path.glob("runs/*/rep-0/ranks/rank-*.jsonl"):
            events = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
            if any(e["event"] == "iteration" for e in events):
                pids[events[0]["rank"]] = events[0]["pid"]
        if len(pids) == ranks:
            return pids
        time.sleep(0.5)
    raise AssertionError("the run did not reach its timed iterations")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def descendants(pid: int) -> set[int]:
    """Every process whose parent chain leads to pid (read from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def failed_record_after(runner: subprocess.Popen, family, tmp_path: Path) -> dict:
    """Waits for the runner after a fault: it must end within the bound, with exit 1, nothing of the
    run left alive (`family`: the run's pids, or a function listing what is left of it), and one
    valid failed record."""
    fault_at = time.monotonic()
    output, _ = runner.communicate(timeout=BOUND_S + 30)
    assert time.monotonic() - fault_at < BOUND_S
    assert runner.returncode == 1, output
    time.sleep(1)
    left = family() if callable(family) else [p for p in family if alive(p)]
    assert left == []
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "failed"
    return record


def test_a_dying_worker_ends_the_job(tmp_path, pytorch_stack):
    runner = start_run(tmp_path, "--gpus-per-node", "2")
    pids = wait_for_ranks(tmp_path, 2)
    family = descendants(runner.pid)
    assert set(pids.values()) <= family
    os.kill(pids[1], signal.SIGKILL)
    record = failed_record_after(runner, family, tmp_path)
    assert "horovodrun on localhost exited with" in record["reason"]
    assert Path(record["repetitions"][0]["run_dir"], "logs", "horovodrun.log").exists()  # kept for failed runs


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_runner_cleans_up(tmp_path, pytorch_stack, sig):
    runner = start_run(tmp_path, "--gpus-per-node", "2")
    pids = wait_for_ranks(tmp_path, 2)
    family = descendants(runner.pid)
    # Positive control: the ranks that must be gone afterwards are alive and part of the run now.
    assert set(pids.values()) <= family and all(alive(pid) for pid in pids.values())
    runner.send_signal(sig)
    record = failed_record_after(runner, family, tmp_path)
    assert record["reason"].startswith("interrupted")


def environ_of(pid: int) -> dict:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_a_dying_parameter_server_ends_the_job(tmp_path):
    from suite.stacks import ensure_installed, load_stack

    ensure_installed(load_stack("mxnet"))
    command = [sys.executable, "-m", "suite", "run", "--case", "mxnet-imagenet", "--nodes", "2", "--hostfile",
               "hostfiles/loopback", "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs"),
               "--", *tiny("mxnet-imagenet", benchmark=True, kv_store="dist_sync", num_batches=100000)]
    runner = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_ranks(tmp_path, 2)
    family = descendants(runner.pid)
    servers = {pid: environ_of(pid) for pid in family if environ_of(pid).get("DMLC_ROLE") == "server"}
    assert len(servers) == 2
    # Process listings come in no set order: name the server killed from its own environment.
    victim, env = min(servers.items(), key=lambda item: int(item[1]["DMLC_TASK_ID"]))
    name = f"server-{int(env['DMLC_TASK_ID']) - int(env['DMLC_NUM_WORKER'])}"
    os.kill(victim, signal.SIGKILL)
    record = failed_record_after(runner, family, tmp_path)
    assert record["reason"].startswith(f"repetition 0: {name} on {env['DMLC_NODE_HOST']} was killed by signal 9 (SIGKILL)")

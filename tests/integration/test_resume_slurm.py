"""A sweep on the two SLURM nodes (tests/support/cluster_fixtures.py slurm_two_nodes) whose batch jobs SLURM
ends, one at its time limit and one by scancel: each failed record carries SLURM's state and says it in one
line, and `suite resume` runs exactly those two points again, its table holding the old records and the new."""

import json
import os
import subprocess
import sys
import time

from conftest import ROOT, records_in, tiny

TINY = tiny("pytorch-synthetic", num_iters=2)


def suite(tmp_path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "suite", *args, "--results-dir", str(tmp_path / "results"),
                             "--runs-dir", str(tmp_path / "runs"), *(["--", *TINY] if args[0] == "run" else [])],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def jobs() -> list[tuple[str, int, str]]:
    listed = subprocess.run(["squeue", "--noheader", "--format=%i %D %T"], capture_output=True, text=True, timeout=60)
    return [(i, int(n), state) for i, n, state in (line.split() for line in listed.stdout.splitlines())]


def test_points_whose_jobs_slurm_ended_are_recorded_so_and_resumed(slurm_two_nodes, pytorch_stack, tmp_path):
    started = time.monotonic()
    # The sweep's jobs get SLURM's shortest time limit (sbatch reads SBATCH_TIMELIMIT over the script's --time);
    # the one-node job's script waits before its runner (bash reads BASH_ENV first), so its limit ends it.
    hold = tmp_path / "hold.sh"
    hold.write_text(f'[ "$SLURM_JOB_NUM_NODES" = 1 ] && mkdir {tmp_path / "held"} 2>/dev/null && sleep 300\n')
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sweep = suite(tmp_path, {**env, "SBATCH_TIMELIMIT": "1", "BASH_ENV": str(hold)}, "run", "--case",
                  "pytorch-synthetic", "--nodes", "1,2", "--scheduler", "slurm", "--timeout", "400")
    cancelled = None
    while sweep.poll() is None and time.monotonic() - started < 400:
        running = [i for i, nodes, state in jobs() if nodes == 2 and state == "RUNNING"]
        if running and cancelled is None:
            time.sleep(3)  # its runner under way
            cancelled = running[0]
            subprocess.run(["scancel", cancelled], check=True, timeout=60)
        time.sleep(1)
    out = sweep.communicate(timeout=60)[0]
    assert sweep.returncode == 1 and cancelled, out
    one, two = sorted(records_in(tmp_path / "results"), key=lambda r: r["world"]["nodes"])
    sweep_id = one["sweep_id"]
    assert (one["status"], two["status"]) == ("failed", "failed") and two["sweep_id"] == sweep_id
    cut, killed = one["execution"]["slurm"], two["execution"]["slurm"]
    assert (cut["state"], cut["reason"], cut["time_limit"]) == ("TIMEOUT", "TimeLimit", "00:01:00")
    assert (killed["state"], killed["job_id"]) == ("CANCELLED", cancelled)
    said = f"SLURM job {cut['job_id']} ended TIMEOUT (time limit 1 min): resume reruns this point"
    assert one["reason"].startswith(said) and said in out
    assert two["reason"].startswith(f"SLURM job {cancelled} ended CANCELLED: resume reruns this point"), two["reason"]
    swept_s = time.monotonic() - started

    resumed = suite(tmp_path, env, "resume", sweep_id)
    out = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, out
    assert (f"sweep {sweep_id}: 2 of 2 points to run again, 1 node(s) x 1 device(s) (TIMEOUT: {one['run_id']}); "
            f"2 node(s) x 2 device(s) (CANCELLED: {two['run_id']})") in out
    records = records_in(tmp_path / "results")
    new = sorted((r for r in records if r["status"] == "ok"), key=lambda r: r["world"]["nodes"])
    assert len(records) == 4 and [r["world"]["nodes"] for r in new] == [1, 2]
    assert all(r["sweep_id"] == sweep_id and r["execution"]["slurm"]["state"] == "COMPLETED" for r in new)
    sweeps = tmp_path / "sweeps"
    plan = json.loads((sweeps / f"{sweep_id}.plan.json").read_text())
    assert [[e["run_id"] for e in p["records"]] for p in plan["points"]] == [
        [one["run_id"], new[0]["run_id"]], [two["run_id"], new[1]["run_id"]]]
    assert plan["resumes"][0]["points"] == [[1, 1], [2, 2]]
    table = json.loads((sweeps / f"{sweep_id}.json").read_text())
    assert {row["run_id"] for row in table["rows"]} >= {new[0]["run_id"], new[1]["run_id"]}
    print(f"sweep {swept_s:.0f} s, resume {time.monotonic() - started - swept_s:.0f} s")

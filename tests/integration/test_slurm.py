"""The slurm scheduler: node lists, job scripts from cluster profiles, and real batch jobs and job
steps on a one-node SLURM cluster started for the session (slurmctld + slurmd + munged,
tests/support/cluster_fixtures.py) with the real stacks."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT, installed_stack, records_in, tiny, tiny_tf_cifar_in_memory
from support.cluster_fixtures import alive, processes_with_env
from support.gpus import fake_nvidia_smi

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import Cluster, load_cluster
from suite.execution.plugins import BatchJob
from suite.execution.request import RunRequest, to_argv
from suite.inputs.hostfiles import Host, World
from suite.records.schema import validate
from suite.schedulers import slurm

PY = sys.executable
TORCH_TINY = tiny("pytorch-synthetic")
TF_TINY = tiny_tf_cifar_in_memory()
SLURM = ("--scheduler", "slurm", "--timeout", "300")


# --- node lists and job scripts (no SLURM needed) ---------------------------------------------------

@pytest.mark.parametrize("nodelist, hosts", [
    ("node[01-04]", ["node01", "node02", "node03", "node04"]),
    ("gpu[1,3-5],login1", ["gpu1", "gpu3", "gpu4", "gpu5", "login1"]),
    ("jwb[0001-0002,0010]", ["jwb0001", "jwb0002", "jwb0010"]),
    ("p9r1n16", ["p9r1n16"]),
])
def test_nodelist_expansion(nodelist, hosts):
    assert slurm.expand_nodelist(nodelist) == hosts


def test_bad_nodelist_and_counts_are_named():
    with pytest.raises(UsageError, match=r"cannot expand the SLURM node list 'node\[1-'"):
        slurm.expand_nodelist("node[1-")
    assert slurm.expand_counts("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(UsageError, match="per-node count '2x3'"):
        slurm.expand_counts("2x3")


def test_allocation_hosts_take_gpus_or_tasks_per_node(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-02],gpu5")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "4(x2),2")
    monkeypatch.delenv("SLURM_GPUS_ON_NODE", raising=False)
    hosts, source, _ = slurm.hosts(1)
    assert hosts == [Host("node01", 4), Host("node02", 4), Host("gpu5", 2)]
    assert source == "SLURM_JOB_NODELIST=node[01-02],gpu5"
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "8")
    assert [h.slots for h in slurm.hosts(1)[0]] == [8, 8, 8]
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    assert slurm.hosts(2)[:2] == ([Host("slurm-node-1", 1), Host("slurm-node-2", 1)], "sbatch")


def fake_point(cluster: Cluster | None, nodes: int, per_node: int, case_args=(), timeout_s=600.0, repeat=1) -> BatchJob:
    world = World(tuple(Host(f"slurm-node-{i + 1}", per_node) for i in range(nodes)), "sbatch")
    runs = Path("/shared/runs")
    req = RunRequest(nodes=str(nodes), gpus_per_node=str(per_node), repeat=str(repeat), timeout=f"{timeout_s:.0f}",
                     stall="1800", runtime="apptainer", scheduler="slurm", data_dir=Path("/shared/data"), runs_dir=runs,
                     results_dir=runs / "R1" / "record", run_id="R1", cluster=cluster.name if cluster else None,
                     case_args=list(case_args))
    argv = (sys.executable, "-m", "suite", *to_argv(req))
    return BatchJob("R1", "pytorch-synthetic", world, argv, timeout_s, 1800.0, repeat, runs / "R1", cluster)


def test_job_script_from_a_cluster_profile():
    hostile = "x'; touch /tmp/pwned; echo $(id) `id`"
    script = slurm.job_script(fake_point(load_cluster("cte-power"), nodes=2, per_node=2,
                                          case_args=["--batch-size", "64", "--tag", hostile]))
    directives = re.findall(r"^#SBATCH (.*)$", script, re.M)
    assert directives == ["--job-name=hpcdl-pytorch-synthetic", "--nodes=2", "--ntasks-per-node=2", "--time=00:30:00",
                          "--output=job-%j.out", "--cpus-per-task=40", "--gres=gpu:2", "--partition=main"]
    assert "\nmodule load gcc/8.3.0 cuda/10.2 cudnn/7.6.4 " in script
    assert f"\ncd {shlex.quote(str(paths.ROOT))}\n" in script
    [exec_line] = [line for line in script.splitlines() if line.startswith("exec ")]
    argv = shlex.split(exec_line)[1:]  # as bash reads it: every value comes back whole
    assert argv[:4] == [PY, "-m", "suite", "run"]
    assert argv[argv.index("--nodes") + 1] == "2" and argv[argv.index("--gpus-per-node") + 1] == "2"
    assert argv[argv.index("--run-id") + 1] == "R1" and argv[argv.index("--cluster") + 1] == "cte-power"
    assert argv[argv.index("--results-dir") + 1] == "/shared/runs/R1/record"
    assert argv[argv.index("--") + 1:] == ["--batch-size", "64", "--tag", hostile]


def test_job_script_without_a_profile_asks_for_what_the_run_needs():
    script = slurm.job_script(fake_point(None, nodes=1, per_node=1, timeout_s=300, repeat=2))
    directives = re.findall(r"^#SBATCH (.*)$", script, re.M)
    assert "--time=00:20:00" in directives  # 2 x 300 s + 10 min margin
    assert not any(d.startswith(("--gres", "--partition", "--account")) for d in directives)
    assert "module load" not in script


@pytest.mark.parametrize("gres, wanted", [("gpu:4", "gpu:2"), ("gpu:a100:4", "gpu:a100:2"), ("gpu", "gpu:2"),
                                          ("nvme:1", "nvme:1")])
def test_gres_takes_the_runs_devices_per_node(gres, wanted):
    assert slurm.gres({"gres": gres}, 2) == wanted


@pytest.mark.parametrize("table, message", [
    ({"partition": "gpu main"}, "partition must be one word"),
    ({"account": "a'b"}, "account must be one word"),
    ({"time_limit": "30 minutes"}, "time_limit must be one word"),
    ({"time_limit": "1:2:3:4"}, "time_limit must be a SLURM time"),
    ({"cpus_per_task": 0}, "cpus_per_task must be a positive integer"),
    ({"modules": ["gcc\nrm -rf ~"]}, "modules must be a list of module names"),
    ({"extra_directives": ["--mem=0\n#SBATCH --uid=0"]}, "extra_directives must be a list of sbatch options"),
])
def test_profile_values_that_cannot_go_into_a_job_script_are_refused(table, message):
    with pytest.raises(UsageError, match=message):
        slurm.settings(Cluster("c", Path("c.toml"), plugins={"slurm": table}))


def test_bad_slurm_settings_are_refused_in_one_line_before_launch(tmp_path, monkeypatch, capsys):
    from suite import cli

    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    (tmp_path / "site.toml").write_text('scheduler = "slurm"\n[slurm]\npartition = "gpu; rm -rf ~"\n')
    code = cli.main(["run", "--cluster", "site", "--runs-dir", str(tmp_path / "runs"), "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "[slurm] partition must be one word" in err
    assert not (tmp_path / "runs").exists()


def test_dry_run_prints_the_job_script(suite_cli, pytorch_stack):
    result = suite_cli("run", "--cluster", "cte-power", "--runtime", "local", "--nodes", "2", "--gpus-per-node", "2",
                       "--dry-run", case_args=TORCH_TINY)
    assert result.returncode == 0, result.stderr
    # Under SLURM, Horovod's ranks are srun tasks with their rendezvous server: no horovodrun, no ssh.
    assert all(f"process rank-{r} on slurm-node-{r // 2 + 1}\n" in result.stdout for r in range(4))
    assert "process rendezvous on slurm-node-1\n" in result.stdout and "horovodrun" not in result.stdout
    assert "#SBATCH --nodes=2" in result.stdout and "#SBATCH --gres=gpu:2" in result.stdout
    assert "submitted as: cd " in result.stdout and "sbatch --parsable job.sbatch" in result.stdout
    # How each process starts inside the job: its srun step on its node, as a dry run inside an allocation shows.
    steps = result.stdout.split("inside the job, its runner starts each process as a job step")[1]
    for rank in range(4):
        line = next(line for line in steps.splitlines() if line.startswith(f"  rank-{rank}: srun --overlap "))
        assert f"--nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist=slurm-node-{rank // 2 + 1} " in line
        assert re.search(rf"--job-name=hpcdl-[0-9a-f]{{6}}-rank-{rank} ", line) and "train.py" in line
    assert not suite_cli.runs.exists() and not suite_cli.results.exists()


# --- a real SLURM cluster -----------------------------------------------------------------------------

def job_processes(job_id: str) -> list[int]:
    """The live processes of job `job_id` of the cluster SLURM_CONF names. Each test cluster numbers its jobs
    from 1, and another xdist worker's cluster may run a job of the same number at the same time."""
    return [pid for pid in processes_with_env(f"SLURM_JOB_ID={job_id}", f"SLURM_CONF={os.environ['SLURM_CONF']}")
            if alive(pid)]


def check_slurm_record(record: dict, node: str) -> dict:
    validate(record)
    assert record["status"] == "ok", record["reason"]
    assert record["world"]["hosts"] == [node] and record["world"]["hostfile"] == f"SLURM_JOB_NODELIST={node}"
    job = record["execution"]["slurm"]
    assert job["job_id"].isdigit() and job["nodelist"] == node and job["state"] == "COMPLETED"
    assert re.fullmatch(r"\d+:\d\d:\d\d", job["elapsed"]) and job["exit_code"] == "0:0"
    assert Path(job["script"]).read_text().startswith("#!/bin/bash")
    assert record["execution"]["scheduler"] == "slurm"
    return job


def test_sbatch_pytorch_synthetic_on_one_node(suite_cli, slurm_cluster, pytorch_stack, tmp_path):
    # The data folder's name is hostile: it travels through the job script and srun's environment.
    data_dir = tmp_path / "d'; touch PWNED; $(touch PWNED2) `touch PWNED3`"
    result = suite_cli("run", *SLURM, "--data-dir", str(data_dir), case_args=TORCH_TINY)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    job = check_slurm_record(record, slurm_cluster.node)
    assert f"slurm job {job['job_id']}: RUNNING on {slurm_cluster.node}" in result.stdout
    assert "iteration 3/3" in result.stdout  # the job's output, shown while it runs
    assert record["metrics"]["throughput"]["n"] == 3
    [horovodrun] = record["repetitions"][0]["processes"]
    assert horovodrun["env"]["SUITE_DATA_DIR"] == str(data_dir)
    assert not list(ROOT.glob("PWNED*")) and not list(tmp_path.rglob("PWNED*"))
    assert job_processes(job["job_id"]) == []


def test_sbatch_tf_cifar_on_one_node(suite_cli, slurm_cluster, tmp_path):
    installed_stack("tensorflow")
    result = suite_cli("run", "--case", "tf-cifar", *SLURM, case_args=TF_TINY)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    check_slurm_record(record, slurm_cluster.node)
    assert record["execution"]["strategy"] == "MirroredStrategy"
    assert [e["index"] for e in record["metrics"]["epochs"]] == [0, 1]


def test_stopping_the_runner_cancels_the_job(slurm_cluster, pytorch_stack, tmp_path):
    from support.faults import alive, failed_record_after, start_run, wait_for_ranks
    from test_faults import LONG

    runner = start_run(tmp_path, *SLURM, "--gpus-per-node", "2", case_args=LONG)
    pids = wait_for_ranks(tmp_path, 2)
    [script] = tmp_path.glob("runs/*/job.sbatch")
    [job_id] = [p.stem.removeprefix("job-") for p in script.parent.glob("job-*.out")]
    assert set(pids.values()) <= set(job_processes(job_id)) and all(alive(p) for p in pids.values())
    runner.send_signal(signal.SIGTERM)
    record = failed_record_after(runner, tmp_path, leftovers=lambda: job_processes(job_id))
    assert record["reason"].startswith("interrupted")
    assert record["execution"]["slurm"]["job_id"] == job_id and record["execution"]["slurm"]["state"] == "CANCELLED"
    assert record["world"]["hosts"] == [slurm_cluster.node]


def test_sigint_to_the_batch_step_ends_the_runner_in_the_job(slurm_cluster, pytorch_stack, tmp_path):
    """`scancel --batch --signal=INT`: the runner the job script execs gets SIGINT (however slurmstepd started
    it), ends its steps and writes a record saying interrupted, which the runner that follows the job takes."""
    from support.faults import alive, failed_record_after, start_run, wait_for_ranks
    from test_faults import LONG

    runner = start_run(tmp_path, *SLURM, "--gpus-per-node", "2", case_args=LONG)
    pids = wait_for_ranks(tmp_path, 2)
    [script] = tmp_path.glob("runs/*/job.sbatch")
    [job_id] = [p.stem.removeprefix("job-") for p in script.parent.glob("job-*.out")]
    assert set(pids.values()) <= set(job_processes(job_id)) and all(alive(p) for p in pids.values())
    subprocess.run(["scancel", "--batch", "--signal=INT", job_id], check=True, capture_output=True, timeout=60)
    record = failed_record_after(runner, tmp_path, leftovers=lambda: job_processes(job_id))
    assert record["reason"].startswith("interrupted"), record["reason"]
    assert record["execution"]["slurm"]["job_id"] == job_id and record["world"]["hosts"] == [slurm_cluster.node]


DRIVER = """
    import json, sys, time
    from pathlib import Path
    from suite.execution.plan import Plan, Process
    from suite.schedulers import slurm

    folder, node, value = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    echo = "import json, os, sys; print(json.dumps([os.environ['V'], sys.argv[1:]]), flush=True)"
    sleeper = ("import os, subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; "
               "time.sleep(600)'], start_new_session=True); print(os.getpid(), c.pid, flush=True); time.sleep(600)")
    plan = Plan(ranks=1,
                processes=(Process("echo", node, [sys.executable, "-c", echo, value], {"V": value}, str(folder)),))
    [echoed] = slurm.execute(plan, folder / "echo-logs", 60)
    plan = Plan(ranks=2, processes=(
        Process("sleeper", node, [sys.executable, "-c", sleeper], {}, str(folder)),
        Process("crasher", node, [sys.executable, "-c", "import time; time.sleep(3); raise SystemExit(3)"], {},
                str(folder))))
    started = time.monotonic()
    sleeper, crasher = slurm.execute(plan, folder / "logs", 300)
    print(json.dumps({"echo": [echoed.returncode, (folder / "echo-logs" / "echo.log").read_text()],
                      "sleeper": [sleeper.reason, sleeper.tail], "crasher": [crasher.returncode, crasher.reason],
                      "ended_after_s": time.monotonic() - started}))
"""


def test_job_steps_inside_an_allocation(slurm_cluster, tmp_path):
    value = f"x'; touch {tmp_path}/pwned; $(id) `id` \\ $HOME"
    done = subprocess.run(["salloc", "--nodes=1", "--time=5", PY, "-c", textwrap.dedent(DRIVER), str(tmp_path),
                           slurm_cluster.node, value], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ended_after_s"] < 60  # the crash at 3 s ended the job's steps (salloc's own wait not counted)
    assert out["echo"] == [0, json.dumps([value, [value]]) + "\n"]
    assert out["crasher"] == [3, None] and out["sleeper"][0] == "ended because crasher failed"
    time.sleep(0.5)
    assert not [int(pid) for pid in out["sleeper"][1][0].split() if alive(int(pid))]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.skipif(os.environ.get("SUITE_TEST_ON_GPUS") == "1", reason="the tests were asked to use the GPUs")
def test_job_steps_the_tests_start_see_no_gpu(slurm_cluster, tmp_path, monkeypatch):
    """As the tests' local and ssh processes: a step on a node whose nvidia-smi lists two GPUs counts
    none, since the step takes the tests' CUDA_VISIBLE_DEVICES= (conftest), and so runs the cpu paths."""
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path / 'fake', 2)}{os.pathsep}{os.environ['PATH']}")
    node = slurm_cluster.node
    code = ("from suite.schedulers import slurm; from suite.inputs.host_gpus import PROBE, count_from_probe; "
            f"out = slurm.run_on_hosts([{node!r}], PROBE, None)[{node!r}]; "
            "print(count_from_probe(out), 'CUDA_VISIBLE_DEVICES=' in out.splitlines(), out.count('GPU '))")
    done = subprocess.run(["salloc", "--nodes=1", "--time=5", PY, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split()[-3:] == ["0", "True", "2"], done.stdout  # two listed, none usable


def test_inside_an_allocation_the_hosts_come_from_the_node_list(slurm_cluster, pytorch_stack, tmp_path):
    done = subprocess.run(["salloc", "--nodes=1", "--ntasks-per-node=2", "--time=5", PY, "-m", "suite", "run",
                           "--scheduler", "slurm", "--dry-run", "--runs-dir", str(tmp_path / "runs"), "--",
                           *TORCH_TINY], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    node = slurm_cluster.node
    assert f"from SLURM_JOB_NODELIST={node}" in done.stdout and f"-H {node}:2" in done.stdout
    assert f"horovodrun: srun --overlap --nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist={node}" in done.stdout
    assert not (tmp_path / "runs").exists()


def test_doctor_checks_the_slurm_commands(slurm_cluster):
    done = subprocess.run([PY, "-m", "suite", "doctor", "--cluster", "cte-power", "--case", "pytorch-synthetic"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 1  # an example profile: no partition "main" here
    assert lines[0] == "cluster cte-power: scheduler slurm, runtime apptainer (an example profile: adapt it first)"
    assert any(line.startswith("ok: sbatch (") for line in lines)
    assert any(line.startswith("ok: srun (") for line in lines)
    assert "missing: SLURM partition main: " in done.stdout
    # What this machine has: apptainer (or singularity) where it is installed, else a missing line.
    from suite.runtimes.apptainer import found_program

    have = found_program()
    assert any(line.startswith("ok: apptainer ") and line.endswith(f" ({have})") if have
               else line.startswith("missing: apptainer") for line in lines)
    assert lines[1].startswith("network links of this machine: ")  # facts, then the checks
    assert lines[2].startswith("NCCL's files on this machine: ")
    assert all(line.startswith(("ok: ", "missing: ")) for line in lines[3:])


def test_a_job_that_writes_no_record_leaves_a_failed_one(slurm_cluster, tmp_path):
    # In-process, with a profile whose module cannot be loaded here: the job fails before `suite run`.
    from dataclasses import replace

    from suite.execution.plan import StackEnv
    from suite.execution.run import batch_job, check, run_context, taken_over_record

    req = RunRequest(scheduler="slurm", timeout="300", results_dir=tmp_path / "results", runs_dir=tmp_path / "runs")
    site = Cluster("site", Path("site.toml"), plugins={"slurm": {"modules": ["no-such/1.0"]}})
    checked = replace(check(req), cluster_profile=site)
    stack_env = StackEnv("local", "/nowhere/bin",
                         provenance={"stack": "pytorch-horovod", "stack_lock_sha256": "0" * 64})
    ctx = run_context(req, checked, checked.worlds[0], None)
    record = taken_over_record(ctx, slurm.take_over(batch_job(req, checked, ctx)), stack_env.provenance, "slurm")
    validate(record)
    job = record["execution"]["slurm"]
    assert job["state"] == "FAILED" and job["exit_code"] == "1:0" and job["nodelist"] == slurm_cluster.node
    assert record["status"] == "failed" and f"slurm job {job['job_id']} ended FAILED (exit code 1:0) without a record" \
        in record["reason"]
    assert "module load no-such/1.0 failed" in record["reason"]
    assert record["world"]["hosts"] == [slurm_cluster.node]

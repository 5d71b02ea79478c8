"""pytorch-ddp: the torchrun and ranks launchers' plans, and real DistributedDataParallel runs of the
case (Gloo on this machine's CPUs) through the suite's CLI: 2 workers under each launcher, one worker
training the bare model compiled, 2 hosts
over ssh, the imagefolder input and its sampler, and a dying worker ending the job."""

import json
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, installed_stack, records_in, small_jpeg_tree, tiny
from support.cluster_fixtures import LOOPBACK_HOSTS, processes_with_env
from support.faults import descendants, failed_record_after, start_run, wait_for_ranks
from support.processes import alive

from suite.execution.plan import Launch, StackEnv
from suite.inputs.hostfiles import Host, World
from suite.launchers import ranks, torchrun
from suite.records.schema import validate
from suite.schedulers import ssh

TINY = tiny("pytorch-ddp")
CASE = ("--case", "pytorch-ddp")
DDP_FLAGS = ("--bucket-cap-mb", "10", "--static-graph", "--gradient-as-bucket-view")
OPTIONS = {"backend": "auto", "bucket-cap-mb": 25.0, "static-graph": False, "gradient-as-bucket-view": False}


@pytest.fixture(scope="session")
def ddp_stack():
    """The real pytorch stack (torch's CPU wheel, numpy, Pillow), installed once."""
    return installed_stack("pytorch")


@pytest.fixture(scope="module")
def jpeg_tree(tmp_path_factory, ddp_stack) -> Path:
    """`make data CASE=pytorch-ddp SYNTHETIC=1`, small."""
    return small_jpeg_tree("pytorch-ddp", tmp_path_factory.mktemp("ddp-data"))


def launch(hosts: list[Host], **options) -> Launch:
    world = World(tuple(hosts), "test")
    return Launch("cases/pytorch-ddp/train.py", ["--num-iters", "2"], world, StackEnv("local", "/stack/bin"),
                  "/runs/RUN/rep-0", "/data", {**OPTIONS, **options})


# --- plans ----------------------------------------------------------------------------------------

def test_torchrun_plans_one_agent_per_node_meeting_at_the_first_host():
    plan = torchrun.plan(launch([Host("node1", 4), Host("node2", 2)]))
    first, second = (p.argv for p in plan.processes)
    assert [p.host for p in plan.processes] == ["node1", "node2"] and plan.ranks == 6
    assert first[:3] == ["/stack/bin/torchrun", "--nnodes", "2"]
    endpoint = first[first.index("--rdzv-endpoint") + 1]
    assert endpoint.startswith("node1:") and second[second.index("--rdzv-endpoint") + 1] == endpoint
    assert [a[a.index("--nproc-per-node") + 1] for a in (first, second)] == ["4", "2"]
    assert [a[a.index("--rdzv-conf") + 1] for a in (first, second)] == ["is_host=1", "is_host=0"]
    assert first[first.index("--rdzv-id") + 1] == "RUN-rep-0" and "--max-restarts" in first
    assert {a[a.index("--log-dir") + 1] for a in (first, second)} == {"/runs/RUN/rep-0/torchrun"}
    assert first[-3:] == ["cases/pytorch-ddp/train.py", "--num-iters", "2"]
    assert plan.details["launcher"] == "torchrun" and plan.details["ddp"]["bucket_cap_mb"] == 25.0


@pytest.mark.parametrize("workers, site, environ, given", [(2, {}, {}, "1"), (1, {}, {}, None),
                                                           (2, {"OMP_NUM_THREADS": "4"}, {}, "4"),
                                                           (2, {}, {"OMP_NUM_THREADS": "8"}, None)],
                         ids=["two workers", "one worker", "the profile's", "the runner's"])
def test_torchrun_gets_the_thread_count_it_would_set_itself_and_no_other(workers, site, environ, given, monkeypatch):
    """OMP_NUM_THREADS=1 with two or more workers where nothing names it (torchrun's own, without its warning);
    a cluster profile's [env] value or the runner's environment (which the scheduler passes on) wins."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    plan = torchrun.plan(replace(launch([Host("node1", workers)]), site_env=site))
    assert plan.processes[0].env.get("OMP_NUM_THREADS") == given


def test_ranks_plans_one_process_per_device_with_torchs_environment():
    plan = ranks.plan(launch([Host("node1", 2), Host("node2", 2)], **{"static-graph": True}))
    envs = [p.env for p in plan.processes]
    assert [p.name for p in plan.processes] == ["rank-0", "rank-1", "rank-2", "rank-3"]
    assert [p.host for p in plan.processes] == ["node1", "node1", "node2", "node2"]
    assert [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"]) for e in envs] == [
        ("0", "0", "0"), ("1", "1", "0"), ("2", "0", "1"), ("3", "1", "1")]
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {
        ("4", "2", "node1", envs[0]["MASTER_PORT"])}
    assert plan.processes[0].argv[0] == "/stack/bin/python" and plan.details["ddp"]["static_graph"] is True


def test_workers_on_loopback_hosts_share_the_machines_cores():
    plan = ranks.plan(launch([Host(h, 1) for h in LOOPBACK_HOSTS]))
    assert [p.env["SUITE_PROCESSES_ON_HOST"] for p in plan.processes] == ["2", "2"]


def test_imagefolder_without_data_is_refused_before_launch(suite_cli, tmp_path):
    result = suite_cli("run", *CASE, "--data-dir", str(tmp_path), case_args=("--data", "imagefolder"))
    assert result.returncode == 2 and "data missing" in result.stderr and "imagefolder/train" in result.stderr
    assert not suite_cli.runs.exists()


# --- real runs ------------------------------------------------------------------------------------

def checked_record(result, suite_cli) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "ok" and record["reason"] is None
    return record


@pytest.mark.parametrize("launcher", ["torchrun", "ranks"])
def test_two_ddp_workers_on_this_machine(suite_cli, ddp_stack, launcher):
    result = suite_cli("run", *CASE, "--gpus-per-node", "2", case_args=(*TINY, "--launcher", launcher, *DDP_FLAGS))
    record = checked_record(result, suite_cli)
    world, reported = record["world"], record["config"]["reported_by_case"]
    assert (world["nodes"], world["devices"], world["device_type"]) == (1, 2, "cpu")
    assert (reported["backend"], reported["launcher"], record["execution"]["launcher"]) == ("gloo", launcher, launcher)
    assert reported["ddp"] == {"bucket_cap_mb": 10.0, "static_graph": True, "gradient_as_bucket_view": True}
    assert record["execution"]["ddp"] == reported["ddp"]
    assert reported["ddp_wrapped"] is True and reported["notes"] == [] and reported["optimizer_impl"] == "foreach"
    assert reported["lr"] == pytest.approx(0.02) and reported["parameters"] == 25_557_032
    assert record["config"]["data"] == "synthetic" and record["config"]["global_batch"] == 8
    tp = record["metrics"]["throughput"]
    assert tp["n"] == 3 and all(s > 0 for s in tp["samples"])
    names = [p["name"] for p in record["repetitions"][0]["processes"]]
    assert names == (["torchrun-0"] if launcher == "torchrun" else ["rank-0", "rank-1"])
    assert "OMP_NUM_THREADS" not in result.stdout + result.stderr  # torchrun's warning: given its value beforehand
    assert record["provenance"]["versions"]["torch"].startswith("2.13.0")
    assert "horovod" not in ddp_stack.info["packages"]


def test_one_worker_trains_the_bare_model_compiled_in_the_mode_asked_and_says_so(suite_cli, ddp_stack):
    """A world of one: no DistributedDataParallel (nothing to exchange), which the record and the summary say;
    --compile-mode and --optimizer-impl reach torch (CUDA graphs need a GPU: on a CPU the mode compiles
    without them) and the record names them."""
    result = suite_cli("run", *CASE, case_args=(*TINY, "--model", "tiny-cnn", "--compile", "--compile-mode",
                                                "reduce-overhead", "--optimizer-impl", "fused"))
    record = checked_record(result, suite_cli)
    reported = record["config"]["reported_by_case"]
    assert reported["ddp_wrapped"] is False and reported["notes"][0].startswith("world size 1: nothing to exchange")
    assert (reported["compile"], reported["compile_mode"], reported["optimizer_impl"]) == (True, "reduce-overhead",
                                                                                          "fused")
    assert record["metrics"]["results"][0]["compile_seconds"] > 0
    assert "settings: compiled (mode reduce-overhead), optimizer fused" in result.stdout
    assert "note: world size 1: nothing to exchange" in result.stdout


@pytest.mark.parametrize("launcher", ["torchrun", "ranks"])
def test_two_ddp_workers_on_two_ssh_hosts(suite_cli, ddp_stack, loopback_sshd, launcher):
    before = loopback_sshd.sessions()
    result = suite_cli("run", *CASE, "--cluster", "loopback-ssh", "--nodes", "2", "--timeout", "300",
                       case_args=(*TINY, "--launcher", launcher))
    record = checked_record(result, suite_cli)
    assert record["world"]["hosts"] == list(LOOPBACK_HOSTS) and record["execution"]["scheduler"] == "ssh"
    assert record["world"]["devices"] == 2 and record["config"]["reported_by_case"]["backend"] == "gloo"
    assert record["execution"]["launcher"] == launcher
    assert [p["host"] for p in record["repetitions"][0]["processes"]] == list(LOOPBACK_HOSTS)
    logs = Path(record["repetitions"][0]["run_dir"]) / "logs"
    time.sleep(0.5)
    assert [pid for pid in processes_with_env(f"{ssh.JOB_MARKER}={logs.resolve()}") if alive(pid)] == []
    opened = {host: count - before[host] for host, count in loopback_sshd.sessions().items()}
    assert opened["127.0.0.2"] >= 1 and opened["127.0.0.3"] >= 1


def test_imagefolder_trains_epochs_on_the_generated_jpegs(suite_cli, ddp_stack, jpeg_tree):
    result = suite_cli("run", *CASE, "--gpus-per-node", "2", "--data-dir", str(jpeg_tree),
                       case_args=(*TINY, "--data", "imagefolder"))
    record = checked_record(result, suite_cli)
    reported = record["config"]["reported_by_case"]
    assert record["config"]["data"] == "imagefolder-synthetic" and reported["classes"] == 3
    assert reported["data_path"] == str((jpeg_tree / "imagefolder" / "train").resolve())
    assert reported["images_per_rank_per_epoch"] == 12  # 24 images over 2 ranks, batches of 4
    epochs = record["metrics"]["epochs"]
    assert [e["index"] for e in epochs] == [0, 1] and all(e["images"] == 24 for e in epochs)
    assert record["metrics"]["throughput"]["n"] == 1  # the first epoch is not counted
    assert record["metrics"]["timed_images"] == 24 and "first epoch: not counted" in result.stdout


SAMPLER_CHECK = """
import json, sys
sys.path[:0] = [".", "cases/pytorch-ddp"]
from pipeline import make_loader
root, shares = sys.argv[1], []
for rank in range(2):
    loader, sampler = make_loader(root, 32, 4, rank, 2, workers=1, pin=False)
    sampler.set_epoch(1)
    shares.append(list(sampler))
    images, labels = next(iter(loader))
files = [path for path, _ in loader.dataset.samples]
json.dump({"shares": shares, "files": len(files), "shape": list(images.shape), "dtype": str(images.dtype)}, sys.stdout)
"""


def test_the_sampler_gives_each_rank_distinct_images(ddp_stack, jpeg_tree):
    done = subprocess.run([str(ddp_stack.python), "-c", SAMPLER_CHECK, str(jpeg_tree / "imagefolder" / "train")],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=300)
    out = json.loads(done.stdout)
    first, second = out["shares"]
    assert len(first) == len(second) == 12 and not set(first) & set(second)
    assert set(first) | set(second) == set(range(out["files"])) and out["files"] == 24
    assert out["shape"] == [4, 3, 32, 32] and out["dtype"] == "torch.uint8"


@pytest.mark.parametrize("launcher", ["torchrun", "ranks"])
def test_a_dying_ddp_worker_ends_the_job(tmp_path, ddp_stack, launcher):
    runner = start_run(tmp_path, *CASE, "--gpus-per-node", "2",
                       case_args=(*tiny("pytorch-ddp", num_iters=500), "--launcher", launcher))
    pids = wait_for_ranks(tmp_path, 2)
    family = descendants(runner.pid)
    assert set(pids.values()) <= family and alive(pids[1])  # positive control
    os.kill(pids[1], signal.SIGKILL)
    record = failed_record_after(runner, tmp_path, family)
    expected = ("torchrun-0 on localhost exited with 1" if launcher == "torchrun"
                else "rank-1 on localhost was killed by signal 9 (SIGKILL)")
    assert record["reason"].startswith(f"repetition 0: {expected}"), record["reason"]
    if launcher == "torchrun":  # the agent's folders are the run's, not left in /tmp
        assert list(tmp_path.glob("runs/*/rep-0/torchrun/*-rep-0_*/attempt_0"))


def test_a_dying_worker_on_one_host_ends_the_torchrun_job_on_both(tmp_path, ddp_stack, loopback_sshd):
    runner = start_run(tmp_path, *CASE, "--cluster", "loopback-ssh", "--nodes", "2",
                       case_args=tiny("pytorch-ddp", num_iters=500))
    pids = wait_for_ranks(tmp_path, 2)
    [logs] = tmp_path.glob("runs/*/rep-0/logs")
    marker = f"{ssh.JOB_MARKER}={logs.resolve()}"
    assert set(pids.values()) <= set(processes_with_env(marker))  # the agents' workers carry the job marker
    assert alive(pids[1])
    os.kill(pids[1], signal.SIGKILL)
    record = failed_record_after(
        runner, tmp_path, leftovers=lambda: [p for p in processes_with_env(marker) + list(pids.values()) if alive(p)])
    assert record["reason"].startswith("repetition 0: torchrun-1 on 127.0.0.3 exited with 1"), record["reason"]

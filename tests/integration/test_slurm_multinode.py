"""Every case across nodes without ssh: on a real SLURM cluster of two nodes with their own addresses
and host names (network namespaces of this machine, tests/support/cluster_fixtures.py slurm_two_nodes), each
case as a batch job submitted from outside (sbatch) and inside an allocation (salloc), every process
an srun step; and the loopback hostfile that tries several nodes on one machine as local processes.
An `ssh` on PATH that only records being called shows that nothing used ssh."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, install_stacks_of, records_in, tiny, tiny_tf_cifar_in_memory
from support.cluster_fixtures import NODE_NAMES

from suite.records.schema import validate

PY = sys.executable
N1, N2 = NODE_NAMES
# Run id -> (case, case argv, the plan's processes by host).
RUNS = {
    "horovod": ("pytorch-synthetic", tiny("pytorch-synthetic"), {"rank-0": N1, "rank-1": N2}),
    "pslite": ("mxnet-imagenet", tiny("mxnet-imagenet"),
               {"worker-0": N1, "worker-1": N2, "server-0": N1, "server-1": N2, "scheduler": N1}),
    "tf-multiworker": ("tf-cifar", tiny_tf_cifar_in_memory(), {"worker-0": N1, "worker-1": N2}),
    "ddp-torchrun": ("pytorch-ddp", tiny("pytorch-ddp", launcher="torchrun"), {"torchrun-0": N1, "torchrun-1": N2}),
    "ddp-ranks": ("pytorch-ddp", tiny("pytorch-ddp", launcher="ranks"), {"rank-0": N1, "rank-1": N2}),
    "gpt-fsdp-ranks": ("pytorch-gpt", tiny("pytorch-gpt", parallel="fsdp", launcher="ranks"),
                       {"rank-0": N1, "rank-1": N2}),
    # jax.distributed.initialize over the nodes (the coordinator on the first), Gloo between the CPU processes
    "jax-gpt-fsdp": ("jax-gpt", tiny("jax-gpt", parallel="fsdp"), {"rank-0": N1, "rank-1": N2}),
    # the scheduler is tested, not the model: ResNet-18 compiles in half ResNet-50's time (test_jax_resnet.py runs 50)
    "jax-resnet": ("jax-resnet", tiny("jax-resnet", model="resnet18"), {"rank-0": N1, "rank-1": N2}),
}


@pytest.fixture
def no_ssh(tmp_path, monkeypatch) -> Path:
    """An `ssh` first on PATH that writes down each call and fails: the file it writes must stay absent."""
    folder, calls = tmp_path / "no-ssh", tmp_path / "ssh-calls"
    folder.mkdir()
    (folder / "ssh").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit 255\n")
    (folder / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # several processes share this machine's few cores
    return calls


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> Path:
    """A small generated set of mxnet-imagenet in a data folder, as `make data SYNTHETIC=1` writes."""
    data = tmp_path_factory.mktemp("data")
    install_stacks_of(case for case, _, _ in RUNS.values())  # made here, not in a timed job
    # tf-cifar and the JAX cases train on generated batches here: mxnet-imagenet's RecordIO files are the data read
    subprocess.run([PY, "-m", "suite", "data", "--case", "mxnet-imagenet", "--synthetic", "--data-dir", str(data), "--",
                    "--classes", "2", "--train-per-class", "8", "--val-per-class", "2", "--num-thread", "1"],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    return data


def run_suite(how: str, case: str, case_args, data: Path, tmp_path: Path, *extra: str, nodes: int = 2):
    """`suite run` (SLURM: a batch job it submits, or inside an allocation from salloc)."""
    command = [PY, "-m", "suite", "run", "--case", case, "--nodes", str(nodes), "--timeout", "400", "--data-dir",
               str(data), "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs"), *extra,
               "--", *case_args]
    if how == "salloc":
        command = ["salloc", "--nodes=2", "--ntasks-per-node=1", "--time=15", *command]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)


# Every launcher in a batch job the runner submits; inside an allocation made by salloc, the runner
# starts its job steps the same way (srun in the allocation it is in), shown with ps-lite's five processes.
EVERY_LAUNCHER = [(name, "sbatch") for name in RUNS] + [("pslite", "salloc")]


@pytest.mark.parametrize("name, how", EVERY_LAUNCHER, ids=[f"{name}-{how}" for name, how in EVERY_LAUNCHER])
def test_every_case_on_two_slurm_nodes_without_ssh(slurm_two_nodes, datasets, no_ssh, tmp_path, name, how):
    case, case_args, placed = RUNS[name]
    done = run_suite(how, case, case_args, datasets, tmp_path, "--scheduler", "slurm")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "ok", record["reason"]
    assert record["world"]["hosts"] == [N1, N2]
    # Each rank ran on its node: the host names the ranks saw are the nodes' own.
    assert sorted(record["provenance"]["host_info"]) == [N1, N2]
    processes = record["repetitions"][0]["processes"]
    assert {p["name"]: p["host"] for p in processes} == placed
    assert {p["launch"] for p in processes} == {"srun"}
    # Where each process really ran, as it said itself (not how it was meant to start): every rank,
    # ps-lite server and scheduler, torchrun agent's workers, and Horovod's rendezvous server.
    helpers = {"rendezvous": N1} if name == "horovod" else {}
    assert record["repetitions"][0]["ran_on"] == {p: [host] for p, host in {**placed, **helpers}.items()}
    # before it, the interconnect check: the stack's own exchange across the two nodes, as srun steps too
    check = record["metrics"]["interconnect"]
    assert check["status"] == "ok" and (check["nodes"], check["ranks"]) == (2, 2), check
    if case.startswith("jax-"):  # the processes joined at the first node's coordinator
        assert record["execution"]["coordinator"].startswith(f"{N1}:"), record["execution"]
        assert record["config"]["reported_by_case"]["processes"] == 2
    job = record["execution"]["slurm"]
    assert job["job_id"].isdigit() and job["nodelist"] == "hpcdl-n[1-2]" and job["inside_allocation"] is True
    if how == "sbatch":  # the batch job the runner submitted and followed
        assert job["state"] == "COMPLETED" and job["exit_code"] == "0:0"
    assert not no_ssh.exists(), no_ssh.read_text()


# --- several nodes on one machine: the loopback hostfile --------------------------------------------

def test_nodes_beyond_the_hostfile_name_the_loopback_hostfile(suite_cli):
    result = suite_cli("run", "--case", "mxnet-imagenet", "--nodes", "4")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "NODES=4 but hostfile" in result.stderr and "HOSTFILE=hostfiles/loopback4" in result.stderr


def test_missing_data_names_the_synthetic_set(suite_cli, tmp_path):
    result = suite_cli("run", "--case", "mxnet-imagenet", "--nodes", "4", "--hostfile", "hostfiles/loopback4",
                       "--data-dir", str(tmp_path / "empty"))
    assert result.returncode == 2 and "make data CASE=mxnet-imagenet" in result.stderr
    assert "SYNTHETIC=1" in result.stderr


def loopback_run(case, case_args, data, tmp_path, nodes):
    done = run_suite("here", case, case_args, data, tmp_path, "--hostfile", "hostfiles/loopback4", nodes=nodes)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "ok", record["reason"]
    assert record["world"]["hosts"] == [f"127.0.0.{i}" for i in range(1, nodes + 1)]
    return record["repetitions"][0]["processes"]


def test_mxnet_imagenet_on_four_loopback_hosts(datasets, no_ssh, tmp_path):
    processes = loopback_run("mxnet-imagenet", tiny("mxnet-imagenet"), datasets, tmp_path, 4)
    roles = [p["env"]["DMLC_ROLE"] for p in processes]
    assert roles.count("worker") == 4 and roles.count("server") == 4 and roles.count("scheduler") == 1
    assert {p["launch"] for p in processes} == {"local"} and not no_ssh.exists()


def test_horovod_on_loopback_hosts_runs_local_ranks_without_ssh(pytorch_stack, no_ssh, tmp_path):
    processes = loopback_run("pytorch-synthetic", tiny("pytorch-synthetic"), tmp_path, tmp_path, 2)
    assert [(p["name"], p["host"], p["launch"]) for p in processes] == [("rank-0", "127.0.0.1", "local"),
                                                                      ("rank-1", "127.0.0.2", "local")]
    assert not no_ssh.exists()


def test_gpus_and_interfaces_of_each_node_are_read_by_a_step_there_and_checked_before_launch(slurm_two_nodes, tmp_path,
                                                                                             monkeypatch):
    """A fake nvidia-smi on PATH (srun passes PATH on) that names the node it runs on: the probe is a
    step on each node, and asking for more devices than they have is refused before anything starts; so is
    an NCCL_SOCKET_IFNAME that one node's interfaces (its network namespace's) do not match."""
    fake = tmp_path / "fake-gpus"
    fake.mkdir()
    (fake / "nvidia-smi").write_text('#!/bin/sh\nfor i in 0 1 2; do echo "GPU $i: Fake GPU on $(hostname)"; done\n')
    (fake / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    code = ("from suite.schedulers import slurm; from suite.inputs.host_gpus import PROBE, count_from_probe; "
            f"out = slurm.run_on_hosts({list(NODE_NAMES)!r}, PROBE, None); "
            "print(repr({h: (count_from_probe(o), o.splitlines()[0]) for h, o in out.items()}))")
    done = subprocess.run(["salloc", "--nodes=2", "--ntasks-per-node=1", "--time=5", PY, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    found = eval(done.stdout.strip().splitlines()[-1])  # the script's own repr
    assert found == {node: (3, f"GPU 0: Fake GPU on {node}") for node in NODE_NAMES}
    run = ["salloc", "--nodes=2", "--ntasks-per-node=1", "--time=5", PY, "-m", "suite", "run", "--case", "pytorch-ddp",
           "--nodes", "2", "--gpus-per-node", "4", "--scheduler", "slurm",
           "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
    inside = f"hpcdl{slurm_two_nodes.net.token}p"  # each node's own end of its link: p1 on the first, p2 on the second
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", inside)  # a prefix both nodes match, this machine does not
    refused = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"error: GPUS_PER_NODE=4 but host {NODE_NAMES[0]} has 3 GPU(s)" in refused.stderr
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", f"={inside}1")  # the first node's interface alone
    refused = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"\nerror: NCCL_SOCKET_IFNAME=={inside}1 (the run's environment): host {NODE_NAMES[1]} has no interface " \
           f"it matches (its interfaces: {inside}2, lo)" in refused.stderr, refused.stderr
    assert not (tmp_path / "results").exists()


def test_a_batch_job_checks_its_nodes_interfaces_when_it_starts_and_its_record_says_why(slurm_two_nodes, pytorch_stack,
                                                                                      tmp_path, monkeypatch):
    """Submitted from outside an allocation (its nodes not known yet), the job's own run probes them and stops
    before launch; the run that submitted it writes a failed record with the job's line."""
    inside = f"hpcdl{slurm_two_nodes.net.token}p"
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", f"={inside}1")
    done = subprocess.run([PY, "-m", "suite", "run", "--case", "pytorch-ddp", "--nodes", "2", "--scheduler", "slurm",
                           "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs"), "--",
                           *tiny("pytorch-ddp")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "failed" and "without a record" in record["reason"], record["reason"]
    assert f"error: NCCL_SOCKET_IFNAME=={inside}1 (the run's environment): host {NODE_NAMES[1]} has no interface " \
           "it matches" in record["reason"], record["reason"]
    assert record["repetitions"] == [] and record["execution"]["slurm"]["exit_code"] == "2:0"  # refused: nothing ran

"""RUNTIME=apptainer across hosts, unprivileged as at HPC centres: pytorch-ddp's ranks in the pytorch
SIF (tests/support/apptainer_fixtures.py) as srun steps running `apptainer exec` on the tests' two SLURM
nodes (a batch job the runner submits; each rank on its own node, in that node's network namespace),
and on two hosts over ssh (each rank started by sshd on its loopback address)."""

import pytest
from conftest import records_in, tiny
from support.cluster_fixtures import LOOPBACK_HOSTS, NODE_NAMES

from suite.records.schema import validate

DDP = tiny("pytorch-ddp", launcher="ranks")


def run_in_sif(here, *where: str) -> dict:
    """pytorch-ddp, one rank per node, in the SIF; the run's one record, checked and ok."""
    out = here.writable_folder("across")
    done = here.suite("run", "--case", "pytorch-ddp", "--runtime", "apptainer", "--flavour", "cpu", "--nodes", "2",
                      "--gpus-per-node", "1", "--timeout", "400", "--no-precheck",
                      "--results-dir", str(out / "results"), "--runs-dir", str(out / "runs"), *where, "--", *DDP,
                      env=here.env(OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    [record] = records_in(out / "results")
    validate(record)
    assert record["status"] == "ok", record.get("reason")
    return record


def check_in_sif(record: dict, here, sif: dict, hosts, launch: str) -> None:
    prov, rep = record["provenance"], record["repetitions"][0]
    assert (prov["runtime"], prov["image_sha256"]) == ("apptainer", sif["image_sha256"])
    assert prov["runtime_version"] == sif["tool_version"]
    assert record["world"]["hosts"] == list(hosts) and record["world"]["devices"] == 2
    assert [(p["name"], p["host"], p["launch"]) for p in rep["processes"]] == [
        ("rank-0", hosts[0], launch), ("rank-1", hosts[1], launch)]
    for process in rep["processes"]:
        argv = process["argv"]
        assert argv[argv.index(here.program):][:2] == [here.program, "exec"]
        assert str(here.images / "pytorch-cpu.sif") in argv
    assert record["metrics"]["throughput"]["n"] >= 1 and record["metrics"]["throughput"]["mean"] > 0


@pytest.mark.usefixtures("slurm_two_nodes")
def test_ranks_in_the_sif_as_srun_steps_on_two_slurm_nodes(apptainer_here, pytorch_sif):
    record = run_in_sif(apptainer_here, "--scheduler", "slurm")
    check_in_sif(record, apptainer_here, pytorch_sif, NODE_NAMES, "srun")
    # each rank said where it ran: the node's own host name, seen from inside its container
    assert record["repetitions"][0]["ran_on"] == {"rank-0": [NODE_NAMES[0]], "rank-1": [NODE_NAMES[1]]}
    job = record["execution"]["slurm"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == "0:0" and job["nodelist"] == "hpcdl-n[1-2]"


def test_ranks_in_the_sif_on_two_hosts_over_ssh(apptainer_here, pytorch_sif, loopback_sshd):
    before = loopback_sshd.sessions()
    record = run_in_sif(apptainer_here, "--cluster", "loopback-ssh")
    check_in_sif(record, apptainer_here, pytorch_sif, LOOPBACK_HOSTS, "ssh")
    opened = {host: count - before[host] for host, count in loopback_sshd.sessions().items()}
    assert all(opened[host] >= 1 for host in LOOPBACK_HOSTS), opened

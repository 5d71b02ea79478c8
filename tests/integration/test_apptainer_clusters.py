"""RUNTIME=apptainer across hosts, unprivileged as at HPC centres: every case's processes in its stack's
SIF (tests/support/apptainer_fixtures.py: pytorch's built from its definition, the others made from their
Docker images), as srun steps running `apptainer exec` on the tests' two SLURM nodes (a batch job the
runner submits; each node's processes in that node's network namespace), and on two hosts over ssh
(each started by sshd on its loopback address)."""

import pytest
from conftest import records_in, tiny
from support.apptainer_fixtures import DOCKER_SIF_CASES
from support.cluster_fixtures import LOOPBACK_HOSTS, NODE_NAMES
from support.docker_fixtures import OTHER_CASES
from support.pairwise import across

from suite.records.schema import validate

DDP = tiny("pytorch-ddp", launcher="ranks")
WHERE = {  # how the runner is told, the hosts, how each process is started
    "slurm": (("--scheduler", "slurm"), NODE_NAMES, "srun"),
    "ssh": (("--cluster", "loopback-ssh"), LOOPBACK_HOSTS, "ssh"),
}


def run_in_sif(here, case: str, case_args, *where: str, **env: str) -> dict:
    """The case on two nodes, one device each, in its SIF; the run's one record, checked and ok."""
    out = here.writable_folder("across")
    env = here.env(OMP_NUM_THREADS="1", **env)
    done = here.suite("run", "--case", case, "--runtime", "apptainer", "--flavour", "cpu", "--nodes", "2",
                      "--gpus-per-node", "1", "--timeout", "400", "--no-precheck",
                      "--results-dir", str(out / "results"), "--runs-dir", str(out / "runs"), *where, "--",
                      *case_args, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    [record] = records_in(out / "results")
    validate(record)
    assert record["status"] == "ok", record.get("reason")
    return record


def check_in_sif(record: dict, here, image, meta: dict, hosts, launch: str) -> None:
    """The record names the SIF and its runtime, and every process ran `apptainer exec IMAGE` on a node of
    hosts through launch (srun, ssh), every host having some."""
    prov, rep = record["provenance"], record["repetitions"][0]
    assert (prov["runtime"], prov["image"], prov["image_sha256"]) == ("apptainer", str(image), meta["image_sha256"])
    assert prov["runtime_version"] == meta["tool_version"]
    assert record["world"]["hosts"] == list(hosts) and record["world"]["devices"] == 2
    assert {p["host"] for p in rep["processes"]} == set(hosts)
    for process in rep["processes"]:
        argv = process["argv"]
        assert process["launch"] == launch, process
        assert argv[argv.index(here.program):][:2] == [here.program, "exec"] and str(image) in argv, argv
    assert record["metrics"]["throughput"]["n"] >= 1 and record["metrics"]["throughput"]["mean"] > 0


@pytest.mark.usefixtures("slurm_two_nodes")
def test_ranks_in_the_sif_as_srun_steps_on_two_slurm_nodes(apptainer_here, pytorch_sif):
    record = run_in_sif(apptainer_here, "pytorch-ddp", DDP, "--scheduler", "slurm")
    check_in_sif(record, apptainer_here, apptainer_here.images / "pytorch-cpu.sif", pytorch_sif, NODE_NAMES, "srun")
    assert [p["name"] for p in record["repetitions"][0]["processes"]] == ["rank-0", "rank-1"]
    # each rank said where it ran: the node's own host name, seen from inside its container
    assert record["repetitions"][0]["ran_on"] == {"rank-0": [NODE_NAMES[0]], "rank-1": [NODE_NAMES[1]]}
    job = record["execution"]["slurm"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == "0:0" and job["nodelist"] == "hpcdl-n[1-2]"


def test_ranks_in_the_sif_on_two_hosts_over_ssh(apptainer_here, pytorch_sif, loopback_sshd):
    before = loopback_sshd.sessions()
    record = run_in_sif(apptainer_here, "pytorch-ddp", DDP, "--cluster", "loopback-ssh")
    check_in_sif(record, apptainer_here, apptainer_here.images / "pytorch-cpu.sif", pytorch_sif, LOOPBACK_HOSTS,
                 "ssh")
    opened = {host: count - before[host] for host, count in loopback_sshd.sessions().items()}
    assert all(opened[host] >= 1 for host in LOOPBACK_HOSTS), opened


# Each launcher across two hosts in its image: the cases of the SIFs made from Docker images, and
# pytorch-gpt's FSDP ranks in the pytorch SIF; those of tests/support/pairwise.py in `make test`, the rest
# in `make test-all`.
@pytest.mark.parametrize("case, where", across("apptainer", [*DOCKER_SIF_CASES, "pytorch-gpt"]))
def test_every_case_across_two_hosts_in_its_sif(apptainer_here, pytorch_sif, docker_sifs, request, case, where):
    """Horovod, ps-lite, MultiWorkerMirroredStrategy, jax.distributed and torch.distributed's FSDP, each
    process in its stack's SIF."""
    request.getfixturevalue("slurm_two_nodes" if where == "slurm" else "loopback_sshd")
    argv, hosts, launch = WHERE[where]
    if case == "pytorch-gpt":
        (stack, case_args), folder, meta = OTHER_CASES[case], apptainer_here.images, pytorch_sif
    else:
        (folder, metas), (stack, case_args) = docker_sifs, DOCKER_SIF_CASES[case]
        meta = metas[stack]
    # The image's Horovod has MPI (Debian's Open MPI), which srun --mpi=pmix starts; here slurmstepd runs as
    # root and the tests' apptainer as another user, who cannot reach root's PMIx server: Gloo ranks
    # (HOROVOD_CONTROLLER), as a site whose srun cannot start the image's MPI runs them.
    gloo = {"HOROVOD_CONTROLLER": "gloo"} if case == "pytorch-synthetic" else {}
    record = run_in_sif(apptainer_here, case, case_args, *argv, SUITE_IMAGE_DIR=str(folder), **gloo)
    check_in_sif(record, apptainer_here, folder / f"{stack}-cpu.sif", meta, hosts, launch)
    assert record["provenance"].get("image_source") == meta.get("built_from")
    if gloo:
        assert record["execution"]["controller"] == "gloo"

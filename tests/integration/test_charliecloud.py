"""RUNTIME=charliecloud with Debian's Charliecloud 0.31: every stack's cpu image made from the Docker image
the session's engine built (tests/support/docker_fixtures.py: export of its filesystem, ch-convert to a
directory); pytorch-ddp with two ranks run through ch-run on this machine as root and as an unprivileged
user, as srun steps on the tests' two SLURM nodes and on two hosts over ssh; every other case in its stack's
image with two ranks on this machine, as srun steps and over ssh; the check-site row and rerun."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import MEASURED, ROOT, records_in, tiny
from support.cluster_fixtures import LOOPBACK_HOSTS, NODE_NAMES, ensure_installed
from support.docker_fixtures import CPU_STACKS, OTHER_CASES
from support.image_runs import check_site_then_rerun, ok_record, suite
from support.pairwise import across, on_this_machine

from suite.execution import plugins
from suite.records.schema import validate
from suite.stacks import images
from suite.stacks.recipes import load_stack

PY = sys.executable
NOBODY = 65534
FRESH = "pytorch"  # its image converted every session: the one pytorch-ddp's runs across hosts use
DDP = tiny("pytorch-ddp", launcher="ranks")


@pytest.fixture(scope="module")
def ch_images(cpu_images):
    """Every stack's cpu image as a Charliecloud directory; stack name -> the metadata the build wrote.
    pytorch's is converted every session, into a folder every user can read (the session's temporary
    folders are root's alone); the others are kept between sessions while their Docker image is the same
    (in the cache, as the SIFs are), each linked into that folder."""
    ensure_installed(("ch-run", "ch-convert"), "Charliecloud (Debian's charliecloud-runtime, charliecloud-builders)")
    folder = Path(tempfile.mkdtemp(prefix="hpcdl-ch-", dir="/tmp"))
    folder.chmod(0o755)
    kept = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hpc-dl-bench" / "charliecloud"
    metas = {stack: kept_image(kept, stack, cpu_images[stack]) for stack in CPU_STACKS if stack != FRESH}
    for stack, meta in metas.items():
        (folder / f"{stack}-cpu.ch").symlink_to(meta["image"])
    metas[FRESH] = convert(folder, FRESH)
    yield folder, metas
    shutil.rmtree(folder, ignore_errors=True)


def kept_image(kept: Path, stack: str, docker_meta: dict) -> dict:
    """The stack's image in the cache, converted again where its Docker image changed."""
    meta_file = kept / f"{stack}-cpu.ch.json"
    if meta_file.exists():
        meta = json.loads(meta_file.read_text())
        if meta["docker_image_sha256"] == docker_meta["image_sha256"] and Path(meta["image"], "bin").exists():
            return meta
    kept.mkdir(parents=True, exist_ok=True)
    return convert(kept, stack)


def convert(folder: Path, stack: str) -> dict:
    """`make containers TOOL=charliecloud`'s build of the stack's cpu image into folder, from the Docker image."""
    shutil.copy(Path(os.environ["SUITE_IMAGE_DIR"]) / f"{stack}-cpu.docker.json", folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SUITE_IMAGE_DIR", str(folder))
        started, said = time.monotonic(), []
        fl = images.load_flavour(load_stack(stack), "cpu")
        meta = plugins.load("runtimes", "charliecloud").build_image(fl, images.BuildInputs("debian"), said.append)
    MEASURED.append(f"charliecloud: {stack}'s cpu image from the Docker image in {time.monotonic() - started:.0f} s "
                    f"({said[-1].removeprefix('containers: ')})")
    return meta


@pytest.fixture(scope="module")
def ch_image(ch_images):
    """The pytorch stack's: the folder of the images and its metadata."""
    folder, metas = ch_images
    return folder, metas["pytorch"]


def test_the_image_is_the_docker_images_filesystem(ch_image, cpu_images):
    folder, meta = ch_image
    image = folder / "pytorch-cpu.ch"
    assert meta["image"] == str(image) and meta["docker_image_sha256"] == cpu_images["pytorch"]["image_sha256"]
    assert meta["lock_sha256"] == images.load_flavour(load_stack("pytorch"), "cpu").lock_sha256
    assert json.loads(Path(f"{image}.json").read_text())["image_sha256"] == meta["image_sha256"]
    assert (image / "opt/stack/bin/python").exists()
    assert "PATH=/opt/stack/bin:$PATH" in (image / "ch/environment").read_text()


def run_ddp(folder: Path, out: Path, as_nobody: bool) -> subprocess.CompletedProcess:
    env = ch_env(folder)
    python, prefix = [PY], []
    if as_nobody:
        # The runner's own Python lives under /root (mode 0700 here): run it with Debian's python3 of the same
        # version over the runner's packages; the ranks use the image's Python inside ch-run.
        env.update(HOME=str(out), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=next(str(p) for p in (ROOT / ".venv/lib").glob("python3*/site-packages")))
        python = ["/usr/bin/python3"]
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    argv = [*prefix, *python, "-m", "suite", "run", "--case", "pytorch-ddp", "--runtime", "charliecloud",
            "--gpus-per-node", "2", "--runs-dir", str(out / "runs"), "--results-dir", str(out / "results"), "--", *DDP]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("who", ["root", "unprivileged"])
def test_ddp_ranks_train_in_the_image(ch_image, who):
    folder, meta = ch_image
    if who == "unprivileged":
        same = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True, check=False).stdout.strip()
        if not shutil.which("setpriv") or same != str(sys.version_info[:2]):
            pytest.skip("needs setpriv and Debian's python3 of the runner's version")
    out = Path(tempfile.mkdtemp(prefix="hpcdl-ch-run-", dir="/tmp"))
    if who == "unprivileged":
        os.chown(out, NOBODY, NOBODY)
    try:
        result = run_ddp(folder, out, who == "unprivileged")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        [record] = records_in(out / "results")
        validate(record)
        assert record["status"] == "ok", record["reason"]
        prov = record["provenance"]
        assert prov["runtime"] == "charliecloud" and prov["image_sha256"] == meta["image_sha256"]
        ranks = record["repetitions"][0]["processes"]
        assert len(ranks) == 2
        for rank in ranks:
            assert rank["argv"][:3] == [shutil.which("ch-run"), "--set-env", "--set-env=HOME=/tmp"]
            assert str(folder / "pytorch-cpu.ch") in rank["argv"]
            assert rank["argv"][rank["argv"].index("--") + 1] == "/opt/stack/bin/python"
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_across(folder: Path, tmp_path: Path, *where: str, case: str = "pytorch-ddp", case_args=DDP,
               **extra: str) -> dict:
    """The case with one rank on each of two nodes, every rank in the image; the run's record, ok."""
    done = suite({**ch_env(folder), **extra}, "run", "--case", case, "--runtime", "charliecloud", "--nodes", "2",
                 "--gpus-per-node", "1", "--timeout", "300", "--no-precheck", "--runs-dir", str(tmp_path / "runs"),
                 "--results-dir", str(tmp_path / "results"), *where, "--", *case_args)
    return ok_record(done, tmp_path / "results")


def ch_env(folder: Path) -> dict:
    """The environment of a suite command run with the images of folder (USER unset: the runtime sets it, as
    ch-run needs it)."""
    env = {k: v for k, v in os.environ.items() if k != "USER"}
    return {**env, "SUITE_IMAGE_DIR": str(folder), "OMP_NUM_THREADS": "1"}


def test_ddp_ranks_as_srun_steps_on_two_slurm_nodes_in_the_image(ch_image, slurm_two_nodes, tmp_path):
    """A batch job on the tests' two SLURM nodes whose runner starts each rank as an srun step running ch-run."""
    folder, meta = ch_image
    record = run_across(folder, tmp_path, "--scheduler", "slurm")
    assert record["execution"]["slurm"]["state"] == "COMPLETED"
    assert record["provenance"]["image_sha256"] == meta["image_sha256"]
    rep = record["repetitions"][0]
    assert [(p["host"], p["launch"]) for p in rep["processes"]] == [(NODE_NAMES[0], "srun"), (NODE_NAMES[1], "srun")]
    assert rep["ran_on"] == {"rank-0": [NODE_NAMES[0]], "rank-1": [NODE_NAMES[1]]}
    assert all(p["argv"][0] == shutil.which("ch-run") for p in rep["processes"])


def test_ddp_ranks_on_two_hosts_over_ssh_in_the_image(ch_image, loopback_sshd, tmp_path):
    folder, meta = ch_image
    before = loopback_sshd.sessions()
    record = run_across(folder, tmp_path, "--cluster", "loopback-ssh")
    assert record["provenance"]["image_sha256"] == meta["image_sha256"]
    rep = record["repetitions"][0]
    assert [(p["host"], p["launch"]) for p in rep["processes"]] == [(h, "ssh") for h in LOOPBACK_HOSTS]
    assert all(p["argv"][0] == shutil.which("ch-run") for p in rep["processes"])
    opened = {host: count - before[host] for host, count in loopback_sshd.sessions().items()}
    assert all(opened[host] >= 1 for host in LOOPBACK_HOSTS), opened


# Every other case across two hosts in its stack's image (those of tests/support/pairwise.py in `make test`, the
# rest in `make test-all`): Horovod's ranks Gloo's (see test_apptainer_clusters.py)
@pytest.mark.parametrize("case, where", across("charliecloud", OTHER_CASES))
def test_every_case_across_two_hosts_in_its_stacks_image(ch_images, request, tmp_path, case, where):
    request.getfixturevalue("slurm_two_nodes" if where == "slurm" else "loopback_sshd")
    folder, metas = ch_images
    stack, case_args = OTHER_CASES[case]
    gloo = {"HOROVOD_CONTROLLER": "gloo"} if case == "pytorch-synthetic" else {}
    record = run_across(folder, tmp_path, *(("--scheduler", "slurm") if where == "slurm" else
                                            ("--cluster", "loopback-ssh")), case=case, case_args=case_args, **gloo)
    assert record["provenance"]["image_sha256"] == metas[stack]["image_sha256"]
    hosts, launch = (NODE_NAMES, "srun") if where == "slurm" else (LOOPBACK_HOSTS, "ssh")
    processes = record["repetitions"][0]["processes"]
    assert {p["host"] for p in processes} == set(hosts) and {p["launch"] for p in processes} == {launch}, processes
    assert all(shutil.which("ch-run") in p["argv"] and metas[stack]["image"] in p["argv"] for p in processes)


# in `make test` the cases that cross no hosts in this runtime's image (tests/support/pairwise.py)
@pytest.mark.parametrize("case", on_this_machine("charliecloud", OTHER_CASES))
def test_the_case_trains_in_its_stacks_image(ch_images, case, tmp_path):
    """Each case, two ranks on this machine, every process through ch-run in its stack's image."""
    folder, metas = ch_images
    stack, case_args = OTHER_CASES[case]
    done = suite(ch_env(folder), "run", "--case", case, "--runtime", "charliecloud", "--gpus-per-node", "2",
                 "--runs-dir", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results"), "--", *case_args)
    record = ok_record(done, tmp_path / "results")
    prov = record["provenance"]
    assert (prov["runtime"], prov["stack"]) == ("charliecloud", stack)
    assert prov["image_sha256"] == metas[stack]["image_sha256"]
    assert record["world"]["devices"] == 2 and record["metrics"]["throughput"]["mean"] > 0
    image = metas[stack]["image"]
    for process in record["repetitions"][0]["processes"]:
        assert process["argv"][0] == shutil.which("ch-run") and image in process["argv"], process["argv"]


def test_check_site_runs_the_charliecloud_path_and_rerun_uses_the_same_image(ch_image, tmp_path):
    """`make check-site`'s charliecloud row runs (ok) and writes a record; `suite rerun` of it runs in the same
    image, and refuses, naming both digests, where the image folder holds another conversion."""
    folder, meta = ch_image
    converted = tmp_path / "converted"
    converted.mkdir()
    subprocess.run(["cp", "-al", meta["image"], str(converted / "pytorch-cpu.ch")], check=True)
    (converted / "pytorch-cpu.ch.json").write_text(json.dumps({**meta, "image_sha256": "ab" * 32}))
    check_site_then_rerun(
        ch_env(folder), tmp_path, "charliecloud", meta["image_sha256"], shutil.which("ch-run"),
        {"SUITE_IMAGE_DIR": str(converted)},
        f"drift: image: sha256 {meta['image_sha256'][:12]} in the record, abababababab here "
        f"({converted / 'pytorch-cpu.ch'}, runtime charliecloud)")

"""RUNTIME=charliecloud with Debian's Charliecloud 0.31: the pytorch stack's image made from the Docker
image the session's engine built (tests/support/docker_fixtures.py: export of its filesystem, ch-convert
to a directory), and pytorch-ddp with two ranks run through ch-run: on this machine as root and as an
unprivileged user, as srun steps on the tests' two SLURM nodes, and on two hosts over ssh."""

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

from suite.execution import plugins
from suite.records.schema import validate
from suite.stacks import images
from suite.stacks.locks import load_stack

PY = sys.executable
NOBODY = 65534
DDP = tiny("pytorch-ddp", launcher="ranks")


@pytest.fixture(scope="module")
def ch_image(cpu_images):
    """The pytorch cpu image as a Charliecloud directory, in a folder every user can read (the
    session's temporary folders are root's alone)."""
    ensure_installed(("ch-run", "ch-convert"), "Charliecloud (Debian's charliecloud-runtime, charliecloud-builders)")
    folder = Path(tempfile.mkdtemp(prefix="hpcdl-ch-", dir="/tmp"))
    folder.chmod(0o755)
    shutil.copy(Path(os.environ["SUITE_IMAGE_DIR"]) / "pytorch-cpu.docker.json", folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SUITE_IMAGE_DIR", str(folder))
        started = time.monotonic()
        said = []
        fl = images.load_flavour(load_stack("pytorch"), "cpu")
        meta = plugins.load("runtimes", "charliecloud").build_image(fl, images.BuildInputs("debian"), said.append)
        took = time.monotonic() - started
        MEASURED.append(f"charliecloud: pytorch's cpu image from the Docker image in {took:.0f} s "
                        f"({said[-1].removeprefix('containers: ')})")
        yield folder, meta
    shutil.rmtree(folder, ignore_errors=True)


def test_the_image_is_the_docker_images_filesystem(ch_image, cpu_images):
    folder, meta = ch_image
    image = folder / "pytorch-cpu.ch"
    assert meta["image"] == str(image) and meta["docker_image_sha256"] == cpu_images["pytorch"]["image_sha256"]
    assert meta["lock_sha256"] == images.load_flavour(load_stack("pytorch"), "cpu").lock_sha256
    assert json.loads(Path(f"{image}.json").read_text())["image_sha256"] == meta["image_sha256"]
    assert (image / "opt/stack/bin/python").exists()
    assert "PATH=/opt/stack/bin:$PATH" in (image / "ch/environment").read_text()


def run_ddp(folder: Path, out: Path, as_nobody: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "USER"}  # ch-run needs it: the runtime sets it
    env.update(SUITE_IMAGE_DIR=str(folder), OMP_NUM_THREADS="1")
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


def run_across(folder: Path, tmp_path: Path, *where: str) -> dict:
    """pytorch-ddp with one rank on each of two nodes, every rank in the image; the run's record, ok."""
    env = {k: v for k, v in os.environ.items() if k != "USER"}
    env.update(SUITE_IMAGE_DIR=str(folder), OMP_NUM_THREADS="1")
    argv = [PY, "-m", "suite", "run", "--case", "pytorch-ddp", "--runtime", "charliecloud", "--nodes", "2",
            "--gpus-per-node", "1", "--timeout", "300", "--no-precheck", "--runs-dir", str(tmp_path / "runs"),
            "--results-dir", str(tmp_path / "results"), *where, "--", *DDP]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "ok", record["reason"]
    return record


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

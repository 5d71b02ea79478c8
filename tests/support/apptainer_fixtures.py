"""Apptainer for the tests, run unprivileged as at HPC centres, the pytorch stack's cpu SIF built from its
definition (kept between sessions while its inputs are the same), and the other stacks' cpu SIFs made from
the Docker images the session's engine built (BASE=docker; kept between sessions while those images are
the same).

Where this machine has `apptainer` on PATH, that one is used. Else tools/apptainer-tree.sh makes (once;
cached under $XDG_CACHE_HOME/hpc-dl-bench/apptainer, remade only when its package list changes) a
Debian root filesystem holding Apptainer and an `apptainer` command that runs it as an unprivileged
user (hpcdl-apptainer, uid 2751) in a mount namespace of its own, with this host's folders at their
own paths. That command is put on PATH only for the suite commands these tests run (`env`), not for
the whole session: other tests check what a host without Apptainer says.

Files a container writes belong to that user, so the tests' folders for images, runs and results are
made writable for it (a folder under /tmp, mode 0777, and the suite run with umask 0): pytest's own
tmp_path is root's alone. When the command cannot be made (no root, no mmdebstrap, no mirror) the
fixture skips saying why, or fails under CI=true. SUITE_TEST_APPTAINER_IMAGES=<folder> takes the
pytorch SIF and its metadata from a folder built before instead of building it (trying tests by hand)."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import MEASURED, component_unavailable

from support.docker_fixtures import IMAGE_CASES, link_or_copy

ROOT = Path(__file__).resolve().parents[2]
TREE_SCRIPT = ROOT / "tools" / "apptainer-tree.sh"
TREE_UID = "2751"  # tools/apptainer-tree.sh's user
STACK = "pytorch"
DOCKER_SIF_STACKS = ("tensorflow", "mxnet", "pytorch-horovod", "jax")  # pytorch's SIF is built from its .def
DOCKER_SIF_CASES = IMAGE_CASES  # the cases run in those SIFs
FRESH_SIF = "mxnet"  # the smallest: made from its Docker image every session, the others kept between sessions
# The tests' builds squash with zstd at its fastest level: Apptainer's default (gzip) takes minutes for
# a GB stack on two cores; squashfuse and the kernel read both.
BUILD_OPTIONS = "--fakeroot --mksquashfs-args '-comp zstd -Xcompression-level 1'"


class Apptainer:
    """The apptainer command the tests use, and a world-writable folder for what its containers write."""

    def __init__(self, bin_dir: Path, folder: Path):
        self.bin_dir, self.folder = bin_dir, folder
        self.program = str(bin_dir / "apptainer")
        self.images = folder / "images"

    def env(self, **extra: str) -> dict:
        """The environment of a suite command run with this apptainer and image folder."""
        # the test tree binds this checkout even where it lies under a folder of its own system (/root)
        binds = f"{os.environ.get('APPTAINER_TREE_BINDS', '')} {ROOT}".strip()
        return {**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}",
                "APPTAINER_TREE_BINDS": binds,
                "SUITE_IMAGE_DIR": str(self.images), "SUITE_FLOPS_CACHE": str(self.folder / "flops.json"),
                "SUITE_APPTAINER_BUILD_OPTIONS": BUILD_OPTIONS, **extra}

    def suite(self, *args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
        """`python -m suite ARGS` with umask 0 (folders it makes are writable for the container's user)."""
        return subprocess.run([sys.executable, "-m", "suite", *args], cwd=ROOT, capture_output=True, text=True,
                              env=env or self.env(), timeout=timeout, preexec_fn=lambda: os.umask(0))

    def writable_folder(self, name: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.folder))
        path.chmod(0o777)
        return path


def apptainer_bin() -> Path:
    """The folder of the `apptainer` command: this machine's own, else the test tree's."""
    own = shutil.which("apptainer")
    if own:
        return Path(own).parent
    if os.geteuid() != 0:
        component_unavailable("Apptainer", "not on PATH, and its test tree (tools/apptainer-tree.sh) needs root")
    if not shutil.which("mmdebstrap"):
        component_unavailable("Apptainer", "not on PATH, and its test tree needs mmdebstrap "
                              "(tools/install-test-deps.sh)")
    started = time.monotonic()
    try:
        done = subprocess.run([str(TREE_SCRIPT)], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        component_unavailable("Apptainer", "tools/apptainer-tree.sh ran for more than 900 s")
    if done.returncode != 0:
        component_unavailable("Apptainer", "tools/apptainer-tree.sh failed: "
                              + " | ".join(done.stderr.strip().splitlines()[-3:]))
    if "made in" in done.stderr:
        MEASURED.append(f"apptainer: its test tree made in {time.monotonic() - started:.0f} s")
    return Path(done.stdout.strip().splitlines()[-1])


def refuse_a_private_checkout(here: Apptainer) -> None:
    """The test tree runs Apptainer as an unprivileged user, who must read this checkout (bound at its
    path); a checkout below a private folder (root's home) is named, not failed on inside every test."""
    tree = Path(here.program).read_text().split('"')[3]
    seen = subprocess.run([str(here.bin_dir / "apptainer-tree-enter.sh"), tree, TREE_UID, "/", "/bin/sh", "-c",
                           f"test -r {ROOT}/suite/__init__.py"], env=here.env(), capture_output=True, timeout=60)
    if seen.returncode != 0:
        component_unavailable("Apptainer", f"the checkout {ROOT} cannot be read by the test tree's "
                              f"unprivileged user (uid {TREE_UID}): a folder above it is private; "
                              "clone it below a readable folder (/tmp, /srv, /work)")


@pytest.fixture(scope="session")
def apptainer_here():
    """The session's Apptainer and its folder (removed at the end)."""
    folder = Path(tempfile.mkdtemp(prefix="hpcdl-apptainer-", dir="/tmp"))
    folder.chmod(0o777)
    (folder / "images").mkdir(mode=0o777)
    (folder / "images").chmod(0o777)
    try:
        here = Apptainer(apptainer_bin(), folder)
        if here.program != shutil.which("apptainer"):
            refuse_a_private_checkout(here)
        yield here
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pytorch_sif(apptainer_here):
    """The pytorch stack's cpu SIF, built by the suite's own command from containers/pytorch/cpu.def on
    a Debian base SIF made here (what `make containers TOOL=apptainer BASE=debian STACK=pytorch` runs);
    the metadata the build wrote beside it."""
    import json

    reuse = os.environ.get("SUITE_TEST_APPTAINER_IMAGES")  # trying the tests by hand: a folder built before
    if reuse:
        for made in Path(reuse).glob(f"{STACK}-cpu.sif*"):
            os.link(made, apptainer_here.images / made.name)
        return json.loads((apptainer_here.images / f"{STACK}-cpu.sif.json").read_text())
    # The Debian base SIF (made by the build when missing) is kept between sessions, as the Docker
    # engine's layers are: under the cache, named by its spec; copied into the session's image folder.
    kept = base_cache()
    bases = apptainer_here.images / "bases"
    if kept.is_dir():
        shutil.copytree(kept, bases, dirs_exist_ok=True)
    # The SIF too, as the engine's layers are: the suite keeps one built from the very same inputs
    # (definition, stack folder, base, options, Apptainer) and builds anew when any of them changed.
    kept_sif = kept.parent / "definition-sifs"
    link_all(kept_sif.glob(f"{STACK}-cpu.sif*"), apptainer_here.images)
    started = time.monotonic()
    build = apptainer_here.suite("containers", "build", "--tool", "apptainer", "--base", "debian", "--stack", STACK,
                                 "--flavour", "cpu", timeout=2400)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    how = "kept: built before from the same inputs" if "before: kept" in build.stdout else "built from its definition"
    MEASURED.append(f"apptainer: the {STACK} cpu SIF {how} in {time.monotonic() - started:.0f} s")
    MEASURED.extend("apptainer: " + line.removeprefix("containers: ") for line in build.stdout.splitlines()
                    if " built in " in line or "made in " in line)
    kept.mkdir(parents=True, exist_ok=True)
    for made in bases.glob("debian-*.sif*"):
        if not (kept / made.name).exists():
            shutil.copy2(made, kept / made.name)
    kept_sif.mkdir(exist_ok=True)
    link_all(apptainer_here.images.glob(f"{STACK}-cpu.sif*"), kept_sif)
    return json.loads((apptainer_here.images / f"{STACK}-cpu.sif.json").read_text())


@pytest.fixture(scope="session")
def docker_sifs(apptainer_here, cpu_images):
    """The cpu SIFs of DOCKER_SIF_STACKS, made by the suite's own command from the Docker images of the
    session's engine (what `make containers TOOL=apptainer BASE=docker STACK=...` runs), in an image folder
    of their own (the pytorch SIF's folder must lack them: test_apptainer.py's doctor test); the folder
    and stack -> the metadata each build wrote. The SIFs are kept between sessions, as the engine's layers
    are, and the suite keeps one made from the same Docker image; FRESH_SIF's is made anew every session,
    so the conversion itself always runs."""
    import json

    folder = apptainer_here.writable_folder("docker-sifs")
    env = apptainer_here.env(SUITE_IMAGE_DIR=str(folder))
    kept = base_cache().parent / "docker-sifs"
    for stack in DOCKER_SIF_STACKS:
        if stack != FRESH_SIF:
            link_all(kept.glob(f"{stack}-cpu.sif*"), folder)
        started = time.monotonic()
        build = apptainer_here.suite("containers", "build", "--tool", "apptainer", "--base", "docker", "--stack",
                                     stack, "--flavour", "cpu", env=env, timeout=1200)
        assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
        said = [line.split(" (", 1)[-1] for line in build.stdout.splitlines() if "docker save" in line]
        MEASURED.append(f"apptainer: the {stack} cpu SIF from its Docker image in {time.monotonic() - started:.0f} s "
                        f"({''.join(said) or 'made before: kept)'}")
    kept.mkdir(parents=True, exist_ok=True)
    link_all((made for stack in DOCKER_SIF_STACKS if stack != FRESH_SIF for made in folder.glob(f"{stack}-cpu.sif*")),
             kept)
    return folder, {stack: json.loads((folder / f"{stack}-cpu.sif.json").read_text()) for stack in DOCKER_SIF_STACKS}


def link_all(files, folder: Path) -> None:
    """Hard links of files in folder, replacing those of the same name (copies across filesystems)."""
    for made in files:
        target = folder / made.name
        target.unlink(missing_ok=True)
        link_or_copy(made, target)


def base_cache() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "hpc-dl-bench" / "apptainer" / "bases"

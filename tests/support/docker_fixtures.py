"""A real Docker engine for the tests, and the stacks' cpu images built in it once per session.

The engine is Debian's dockerd (docker.io), started by the session as root with its own socket and
run folder under /tmp and no iptables or bridge (containers use the host network, as the docker
runtime runs them). Its data root is kept under $XDG_CACHE_HOME/hpc-dl-bench/dockerd, so a later
session reuses the layers of an earlier one, but only by one session at a time (a lock file): a
session that finds it in use gets a data root of its own, removed at its end. A fresh machine builds
from nothing. No registry is reachable
here, so the images are built on the Debian base the suite makes from Debian's packages
(BASE=debian, mmdebstrap). At the end every container of the engine is removed, the images that a
rebuild left without a tag are pruned (else each change of a lock or the base kept gigabytes), and
dockerd stopped.
When it cannot start (no root, no package) the fixture skips saying why, or fails under CI=true.
`cd tests && ../.venv/bin/python -m support.docker_fixtures` starts the same engine and prints its
DOCKER_HOST, for trying things by hand."""

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import MEASURED, component_unavailable, tiny, tiny_tf_cifar_in_memory

from support.cluster_fixtures import ensure_installed, root_prefix, stop_group, wait_for

ROOT = Path(__file__).resolve().parents[2]
DOCKERD = os.environ.get("SUITE_TEST_DOCKERD", "/usr/sbin/dockerd")
CPU_STACKS = ("jax", "mxnet", "pytorch", "pytorch-horovod", "tensorflow")
# The cases the other container runtimes run in images made from these (beside pytorch-ddp, which each runtime's
# own tests run) -> their stack and [tiny] options, reading no data: one case for each stack and launcher, so that
# every launcher starts its processes in every image runtime. jax-resnet would add no pair: it starts as jax-gpt
# does (jaxdist, the jax image), and its own runs are the local runtime's (on the SLURM nodes, over ssh, its data)
IMAGE_CASES = {
    "tf-cifar": ("tensorflow", tiny_tf_cifar_in_memory()),
    "mxnet-imagenet": ("mxnet", tiny("mxnet-imagenet", benchmark=True)),
    "pytorch-synthetic": ("pytorch-horovod", tiny("pytorch-synthetic")),
    "jax-gpt": ("jax", tiny("jax-gpt")),
}
# ... and with pytorch-gpt (FSDP ranks), every case but pytorch-ddp
OTHER_CASES = {**IMAGE_CASES, "pytorch-gpt": ("pytorch", tiny("pytorch-gpt", parallel="fsdp", launcher="ranks"))}


def data_root() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "hpc-dl-bench" / "dockerd"


@contextlib.contextmanager
def engine_data_root(run_dir: Path):
    """The shared data root while this session holds its lock; else one of its own in run_dir."""
    shared = data_root()
    shared.mkdir(parents=True, exist_ok=True)
    with open(shared.with_name("dockerd.lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another session's engine uses it
            yield run_dir / "data-root"
            return
        yield shared


def start_dockerd(run_dir: Path, root: Path) -> tuple[subprocess.Popen, str]:
    """dockerd with its own socket, pid file and exec root in run_dir and its data in root; returns it
    and its DOCKER_HOST."""
    host = f"unix://{run_dir}/docker.sock"
    log = open(run_dir / "dockerd.log", "wb")
    popen = subprocess.Popen([DOCKERD, "--iptables=false", "--ip6tables=false", "--bridge=none",
                              "--data-root", str(root), "--exec-root", str(run_dir / "exec"),
                              "--pidfile", str(run_dir / "dockerd.pid"), "--host", host],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=daemon_env())
    import docker

    def answers():
        if popen.poll() is not None:
            raise RuntimeError(f"dockerd exited with {popen.returncode}: "
                               + (run_dir / "dockerd.log").read_text()[-600:])
        try:
            return docker.DockerClient(base_url=host, timeout=5).ping()
        except Exception:  # any kind: not answering yet
            return False

    wait_for(answers, 60, "dockerd to answer")
    return popen, host


def daemon_env() -> dict:
    """The session's environment less what marks processes of another fixture's cluster (SLURM_CONF: the SLURM
    fixtures end every process whose environment holds theirs, and the engine may start while one is up)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def stop_dockerd(popen: subprocess.Popen, host: str, run_dir: Path) -> None:
    """Every container of the engine removed and its untagged images pruned, then dockerd stopped; an
    engine that ended before its time is a failure, with its log's end."""
    import docker

    try:
        if popen.poll() is not None:
            raise RuntimeError(f"dockerd ended during the session (exit {popen.returncode}): "
                               + (run_dir / "dockerd.log").read_text(errors="replace")[-800:])
        client = docker.DockerClient(base_url=host, timeout=120)
        for container in client.containers.list(all=True):
            container.remove(force=True)
        client.images.prune(filters={"dangling": True})
    finally:
        stop_group(popen, grace=30)


def remove_run_dir(run_dir: Path) -> None:
    """The engine's run folder, with what dockerd left mounted in it (its network namespace file)."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mounted in sorted((m for m in mounts if m.startswith(f"{run_dir}/")), reverse=True):
        subprocess.run(["umount", "--lazy", mounted], capture_output=True)
    shutil.rmtree(run_dir, ignore_errors=True)


def require_engine() -> None:
    if root_prefix() != []:
        component_unavailable("Docker engine", "dockerd must run as root here (rootless Docker is not set up)")
    ensure_installed((DOCKERD, "mmdebstrap"), "Docker engine")


@pytest.fixture(scope="session")
def docker_engine():
    """The session's engine; DOCKER_HOST points the suite (and the Docker SDK) at it."""
    require_engine()
    run_dir = Path(tempfile.mkdtemp(prefix="hpcdl-dockerd-", dir="/tmp"))  # a socket path must be short
    with engine_data_root(run_dir) as root:
        try:
            popen, host = start_dockerd(run_dir, root)
        except RuntimeError as exc:
            component_unavailable("Docker engine", str(exc))
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DOCKER_HOST", host)
            try:
                yield host
            finally:
                stop_dockerd(popen, host, run_dir)
                remove_run_dir(run_dir)


@pytest.fixture(scope="session")
def cpu_images(docker_engine, tmp_path_factory):
    """Every stack's cpu image, built on the Debian base by the suite's own command (what `make
    containers TOOL=docker BASE=debian` runs); stack name -> the metadata the build wrote."""
    image_dir = tmp_path_factory.mktemp("images")
    kept = kept_wheels()
    if kept.is_dir():  # where the build would have filled it (test_docker_images.py serves it again)
        (image_dir / "wheels").symlink_to(kept)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SUITE_IMAGE_DIR", str(image_dir))
        started = time.monotonic()
        # two at a time: a build waits on one core much of its time (pip, apt, the package index)
        build = subprocess.run([sys.executable, "-m", "suite", "containers", "build", "--tool", "docker",
                                "--base", "debian", "--flavour", "cpu", "--jobs", "2",
                                *(["--wheels", str(kept)] if kept.is_dir() else [])],
                               cwd=ROOT, capture_output=True, text=True, timeout=2400)
        assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
        MEASURED.append(f"docker: the cpu images of {', '.join(CPU_STACKS)} built in "
                        f"{time.monotonic() - started:.0f} s (" + ("from the wheel folder an earlier session filled"
                                                                  if kept.is_dir() else "wheel folder filled") + ")")
        if not kept.is_dir():
            keep_wheels(image_dir / "wheels", kept)
        MEASURED.extend(line.removeprefix("containers: ") for line in build.stdout.splitlines()
                        if " built in " in line or "Debian base" in line)
        metas = {stack: json.loads((image_dir / f"{stack}-cpu.docker.json").read_text()) for stack in CPU_STACKS}
        yield metas


def kept_wheels() -> Path:
    """Where the cpu images' wheel folder is kept between sessions, named by their locks' digest (the folder
    `make wheels` or a build fills is a function of them). A session that finds it builds from it (WHEELS,
    as a site without a package index does); the others fill one (the pytorch SIF's build fills its own
    every session: tests/support/apptainer_fixtures.py)."""
    from suite.stacks.recipes import described_flavours

    digest = hashlib.sha256()
    for fl in described_flavours():
        if fl.name == "cpu" and fl.stack.name in CPU_STACKS:
            for lock, _ in fl.locks():
                digest.update(f"{fl.id} {lock.name} ".encode() + hashlib.sha256(lock.read_bytes()).digest())
    return data_root().with_name("test-wheels") / digest.hexdigest()[:16]


def keep_wheels(filled: Path, kept: Path) -> None:
    """The session's filled wheel folder kept (whole, or not at all) in place of those of other locks."""
    shutil.rmtree(kept.parent, ignore_errors=True)
    partial = kept.with_name(kept.name + ".partial")
    shutil.copytree(filled, partial, copy_function=link_or_copy)
    partial.rename(kept)


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)


def main() -> int:
    require_engine_here = root_prefix() == [] and Path(DOCKERD).exists()
    if not require_engine_here:
        print(f"needs root and {DOCKERD}", file=sys.stderr)
        return 1
    run_dir = Path(tempfile.mkdtemp(prefix="hpcdl-dockerd-", dir="/tmp"))
    with engine_data_root(run_dir) as root:
        popen, host = start_dockerd(run_dir, root)
        print(f"export DOCKER_HOST={host}   # Ctrl-C stops it")
        try:
            popen.wait()
        except KeyboardInterrupt:
            stop_dockerd(popen, host, run_dir)
        finally:
            remove_run_dir(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

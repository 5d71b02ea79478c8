"""RUNTIME=podman (rootless Podman, or NERSC's podman-hpc), rendered: the line each process gets in a
dry run (the same Docker image, the folders at their own paths, GPUs through CDI or podman-hpc's --gpu),
and its refusals before launch. Podman itself is not run by these tests."""

import json
import os
import re
import shlex

import pytest

from suite import cli
from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import Cluster
from suite.execution.plan import StackEnv, StackRequest
from suite.runtimes import podman
from suite.stacks import images
from suite.stacks.recipes import load_stack

STACK = load_stack("pytorch")
PACKAGES = {"torch": "2.7.0", "numpy": "2.1.0", "pillow": "11.0.0"}


def docker_meta(folder, flavour: str, **changed) -> None:
    """The metadata the Docker build writes beside its images."""
    fl = images.load_flavour(STACK, flavour)
    path = folder / f"pytorch-{flavour}.docker.json"
    meta = images.write_image_meta(path, fl, f"hpc-dl-bench-pytorch:{flavour}-x", "d0" * 32, "docker", {}, PACKAGES,
                                   {"kind": "debian"})
    path.write_text(json.dumps({**meta, **changed}))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Profiles from tmp_path, the Docker build's metadata of pytorch's cpu and cuda images, no podman."""
    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    monkeypatch.setenv("SUITE_IMAGE_DIR", str(tmp_path / "images"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no podman, even where the tests installed it
    monkeypatch.delenv("SUITE_IMAGE", raising=False)
    (tmp_path / "images").mkdir()
    (tmp_path / "localhost").write_text("localhost slots=2\n")
    for flavour in ("cpu", "cuda"):
        docker_meta(tmp_path / "images", flavour)
    return tmp_path


def processes(out: str) -> list[list[str]]:
    return [shlex.split(line.split("argv: ", 1)[1]) for line in out.splitlines() if line.startswith("  argv: ")]


@pytest.mark.parametrize("command, flavour, gpu", [
    ("podman", "cpu", []), ("podman", "cuda", ["--device=nvidia.com/gpu=all"]),
    ("podman-hpc", "cuda", ["--gpu", "--mpi"]),
])
def test_each_process_runs_in_the_docker_image(site, capsys, command, flavour, gpu):
    (site / "site.toml").write_text(f'hostfile = "localhost"\nruntime = "podman"\n[podman]\ncommand = "{command}"\n'
                                    'mpi = true\n')
    code = cli.main(["run", "--cluster", "site", "--case", "pytorch-ddp", "--flavour", flavour, "--dry-run",
                     "--runs-dir", str(site / "runs"), "--results-dir", str(site / "r"), "--", "--launcher", "ranks"])
    out = capsys.readouterr().out
    assert code == 0 and f"warning: on this machine: no {command} on PATH" in out, out[-2000:]
    argvs = processes(out)
    assert len(argvs) == 2, out[-2000:]
    for argv in argvs:
        assert argv[:3] == [command, "run", "--rm"] and "--network=host" in argv and "--ipc=host" in argv
        assert ("--userns=keep-id" in argv) == (command == "podman" and os.geteuid() != 0)
        assert f"--volume={paths.ROOT}:{paths.ROOT}" in argv and f"--workdir={site / 'runs'}" in argv
        assert [a for a in argv if a in ("--device=nvidia.com/gpu=all", "--gpu", "--mpi")] == gpu
        assert any(re.fullmatch(r"--label=org\.hpc-dl-bench\.session=[0-9a-f]{16}", a) for a in argv)
        image = argv.index(f"hpc-dl-bench-pytorch:{flavour}-x")
        assert argv[image + 1] == "/opt/stack/bin/python" and argv[image + 2].endswith("cases/pytorch-ddp/train.py")
    assert not (site / "r").exists()


def test_a_real_run_without_podman_is_refused_with_the_install_hint(site):
    with pytest.raises(UsageError, match="RUNTIME=podman needs podman on PATH .*apt-get install podman"):
        podman.prepare(StackRequest(STACK, "cpu", gpus=0), lambda m: None)
    assert podman.doctor_lines(None, ["pytorch"], "cpu")[0].startswith("missing: podman on PATH (runtime podman; ")


@pytest.mark.parametrize("stored", ["", "sha256:" + "d0" * 32, "sha256:" + "e1" * 32])
def test_the_image_in_podmans_storage_must_be_the_docker_builds(site, stored):
    """A fake podman whose `image inspect` prints `stored` (nothing: no such image, exit 1)."""
    (site / "bin").mkdir()
    fake = site / "bin" / "podman"
    fake.write_text(f"#!/bin/sh\n[ -n '{stored}' ] || exit 1\necho '{stored}'\n")
    fake.chmod(0o755)
    want = StackRequest(STACK, "cpu", gpus=0, binds=[str(site / "runs")])
    if not stored:
        with pytest.raises(UsageError, match="no image hpc-dl-bench-pytorch:cpu-x in this user's storage: docker save "
                                             r"hpc-dl-bench-pytorch:cpu-x \| podman load"):
            podman.prepare(want, lambda m: None)
    elif stored.endswith("d0"):
        assert podman.prepare(want, lambda m: None).provenance["image_sha256"] == "d0" * 32
    else:
        with pytest.raises(UsageError, match="image hpc-dl-bench-pytorch:cpu-x is e1e1e1e1e1e1, not the Docker build's "
                                             "d0d0d0d0d0d0: load it again"):
            podman.prepare(want, lambda m: None)


def test_a_missing_image_or_one_of_another_lock_is_refused(site):
    want = StackRequest(STACK, "cpu", gpus=0, install=False)
    (site / "images" / "pytorch-cpu.docker.json").unlink()
    with pytest.raises(UsageError, match="no image metadata at .*pytorch-cpu.docker.json .*TOOL=docker, then podman"):
        podman.prepare(want, lambda m: None)
    docker_meta(site / "images", "cpu", lock_sha256="0" * 64)
    with pytest.raises(UsageError, match="built from another lock than the checkout's"):
        podman.prepare(want, lambda m: None)


@pytest.mark.parametrize("table, said", [({"command": "docker"}, "command must be one of podman, podman-hpc"),
                                         ({"options": ["-v /:/host"]}, "options must be `podman run` options")])
def test_bad_podman_settings_are_refused(site, table, said):
    with pytest.raises(UsageError, match=said):
        podman.settings(Cluster("c", site / "c.toml", plugins={"podman": table}))


def test_cleanup_without_podman_does_nothing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    env = StackEnv("podman", "/opt/stack/bin", prefix=("podman", "run", "--label=org.hpc-dl-bench.session=ab"))
    podman.cleanup(env, lambda m: pytest.fail(m))
    assert os.environ["PATH"] == "/nonexistent"


@pytest.mark.parametrize("uid, command, keep_id", [(1000, "podman", True), (0, "podman", False),
                                                   (1000, "podman-hpc", False)])
def test_only_rootless_podman_maps_the_user_into_the_container(monkeypatch, uid, command, keep_id):
    monkeypatch.setattr(podman.os, "geteuid", lambda: uid)  # root's podman refuses keep-id
    prefix = podman.run_prefix(command, {"command": command, "mpi": False, "options": []}, "img", [], "/r", False, "s")
    assert ("--userns=keep-id" in prefix) == keep_id


def test_the_container_gets_the_variables_that_steer_frameworks_not_the_hosts_environment():
    spec = {"command": "podman", "mpi": False, "options": []}
    prefix = podman.run_prefix("podman", spec, "img", [], "/r", False, "s")
    assert "--env-host" not in prefix
    envs = {a.removeprefix("--env=") for a in prefix if a.startswith("--env=")}
    # the launchers' rendezvous (torchrun's, jaxdist's), thread and allocator settings; nothing else by name
    assert {"RANK", "MASTER_ADDR", "JAX_*", "XLA_*", "OMP_*", "TF_CONFIG", "LD_PRELOAD", "HOME=/tmp"} <= envs
    assert not any(e in envs for e in ("*", "TF_*", "HOME", "USER", "AWS_*"))

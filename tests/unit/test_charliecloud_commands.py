"""RUNTIME=charliecloud without Charliecloud or an image: the argv it gives each process, its refusals
before launch (naming what is missing and how to get it), its doctor lines and its place among the
image tools. tests/integration/test_charliecloud.py builds the image and runs pytorch-ddp through ch-run."""

import json
import os
from pathlib import Path

import pytest

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import image_builds
from suite.execution.clusters import Cluster
from suite.execution.plan import StackRequest
from suite.runtimes import charliecloud
from suite.stacks import images
from suite.stacks.recipes import load_stack

STACK = load_stack("pytorch")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A `ch-run` on PATH (never run here), an image folder, no $USER."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ch-run").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "ch-run").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SUITE_IMAGE_DIR", str(tmp_path / "images"))
    for name in ("SUITE_IMAGE", "SUITE_CH_RUN", "USER"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def built(folder: Path, stack=STACK, lock_sha256: str | None = None) -> Path:
    """An image directory and the metadata `make containers TOOL=charliecloud` writes beside it."""
    image = folder / "images" / f"{stack.name}-cpu.ch"
    (image / "bin").mkdir(parents=True)
    fl = images.load_flavour(stack, "cpu")
    meta = images.write_image_meta(Path(f"{image}.json"), fl, str(image), "c4" * 32, "charliecloud", {},
                                   {"torch": "2.7.0"}, {"kind": "debian"})
    if lock_sha256:
        Path(f"{image}.json").write_text(json.dumps({**meta, "lock_sha256": lock_sha256}))
    return image


def test_each_program_runs_through_ch_run_with_the_folders_bound(host):
    image = built(host)
    runs = host / "runs"
    runs.mkdir()
    env = charliecloud.prepare(StackRequest(STACK, "cpu", binds=(str(runs),), gpus=0), lambda m: None)
    argv = env.argv("python", "train.py")
    assert argv[:3] == [str(host / "bin" / "ch-run"), "--set-env", "--set-env=HOME=/tmp"]
    assert f"--bind={paths.ROOT}:{paths.ROOT}" in argv and f"--bind={runs}:{runs}" in argv
    assert argv[-5:] == [f"--cd={runs}", str(image), "--", "/opt/stack/bin/python", "train.py"]
    assert env.env["USER"]  # ch-run refuses to start without it
    assert env.provenance["runtime"] == "charliecloud" and env.provenance["image_sha256"] == "c4" * 32
    # the mount point ch-run binds onto is made in the image, except under /tmp, which ch-run shares with the
    # host (a checkout under /tmp, as CI's fresh clone is, needs none)
    point = image / str(paths.ROOT).lstrip("/")
    assert point.is_dir() is not paths.ROOT.is_relative_to("/tmp"), point
    assert not (image / str(runs).lstrip("/")).exists()  # tmp_path: under /tmp


def test_without_ch_run_the_run_is_refused_with_the_install_hint(host, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError, match="RUNTIME=charliecloud needs ch-run on PATH .*apt-get install charliecloud"):
        charliecloud.prepare(StackRequest(STACK, "cpu", gpus=0), lambda m: None)
    lines = charliecloud.doctor_lines(None, ["pytorch"], "cpu")
    assert lines[0].startswith("missing: ch-run on PATH") and "charliecloud-runtime" in lines[0]
    assert lines[-1].startswith("missing: image ") and "TOOL=charliecloud" in lines[-1]


def test_missing_other_and_stale_images_are_refused(host, monkeypatch):
    want = StackRequest(STACK, "cpu", gpus=0)
    with pytest.raises(UsageError, match="no cpu Charliecloud image of stack pytorch .*TOOL=charliecloud"):
        charliecloud.prepare(want, lambda m: None)
    built(host, lock_sha256="0" * 64)
    with pytest.raises(UsageError, match="built from another lock than the checkout's"):
        charliecloud.prepare(want, lambda m: None)
    other = built(host / "other", stack=load_stack("tensorflow"))
    monkeypatch.setenv("SUITE_IMAGE", str(other))
    with pytest.raises(UsageError, match="holds stack 'tensorflow', not pytorch"):
        charliecloud.prepare(want, lambda m: None)


def test_a_bind_of_a_missing_folder_is_refused(host):
    built(host)
    cluster = Cluster("c", host / "c.toml", plugins={"charliecloud": {"binds": ["/no/such/folder:/data"]}})
    with pytest.raises(UsageError, match=r"\[charliecloud\] binds: /no/such/folder does not exist"):
        charliecloud.prepare(StackRequest(STACK, "cpu", gpus=0, profile=cluster), lambda m: None)


def test_charliecloud_is_an_image_tool_that_converts_the_docker_image():
    tools = [rt.name for rt in image_builds.image_runtimes()]
    assert tools.index("charliecloud") > tools.index("docker")  # TOOL=auto tries it last
    fl = images.load_flavour(STACK, "cpu")
    assert all(not r.path.name.endswith(".ch") for r in image_builds.recipes(fl))  # no recipe of its own

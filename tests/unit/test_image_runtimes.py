"""The skeleton the image runtimes share (suite/runtimes/_image.py): the worked example of docs/plugins.md, a
runtime of one short module, runs as written; the five image runtimes define only their own parts (their
prepare is the skeleton's, none builds a StackEnv or the provenance itself); the provenance is the shared
function's, the base's package list left in the image's metadata."""

import ast
import json
import os
import re
from pathlib import Path

import pytest

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import plugins
from suite.execution.plan import StackRequest
from suite.runtimes import _image, pyxis
from suite.stacks import images
from suite.stacks.recipes import load_stack

STACK = load_stack("pytorch")
IMAGE_RUNTIMES = {"apptainer": "apptainer/__init__.py", "charliecloud": "charliecloud.py", "docker": "docker.py",
                  "podman": "podman.py", "pyxis": "pyxis.py"}
BASE = {"kind": "debian", "ref": "hpc-dl-bench-base:debian", "packages": {"libc6": "2.36-9"}}


def worked_example() -> str:
    """The module docs/plugins.md shows, as its one ```python block after the section's title."""
    text = (paths.ROOT / "docs" / "plugins.md").read_text().split("## An image runtime", 1)[1]
    [block] = re.findall(r"```python\n(.*?)```", text.split("\n## ", 1)[0], re.S)
    return block


def image(folder: Path, stack=STACK, flavour="cpu", **changed) -> Path:
    """A squashfs file and the metadata `python -m suite.runtimes.pyxis import` writes beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    sqsh = folder / f"{stack.name}-{flavour}.sqsh"
    sqsh.write_bytes(b"hsqs not really")
    meta = images.write_image_meta(Path(f"{sqsh}.json"), images.load_flavour(stack, flavour), str(sqsh), "5e" * 32,
                                   "enroot", {"built": True}, {"torch": "2.7.0"}, BASE)
    Path(f"{sqsh}.json").write_text(json.dumps({**meta, **changed}))
    return sqsh


@pytest.fixture
def enroot(tmp_path, monkeypatch):
    """The worked example as a site's runtime file, an `enroot` on PATH, images in tmp_path/images."""
    folder = tmp_path / "runtimes"
    folder.mkdir()
    (folder / "enroot.py").write_text(worked_example())
    monkeypatch.setitem(plugins.EXTRA_PATHS, "runtimes", [str(folder)])
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "enroot").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "enroot").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SUITE_IMAGE_DIR", str(tmp_path / "images"))
    for name in ("SUITE_IMAGE", "SUITE_ALLOW_STALE_IMAGE"):
        monkeypatch.delenv(name, raising=False)
    return plugins.load("runtimes", "enroot")


def test_the_worked_example_is_a_runtime_of_one_short_module(enroot, tmp_path):
    assert len(worked_example().splitlines()) <= 50 and "enroot" in plugins.available("runtimes")
    sqsh = image(tmp_path / "images")
    runs = tmp_path / "runs"
    runs.mkdir()
    said = []
    env = enroot.prepare(StackRequest(STACK, "cpu", binds=(str(runs),), gpus=0), said.append)
    argv = env.argv("python", "train.py")
    assert argv[:2] == [str(tmp_path / "bin" / "enroot"), "start"]
    assert argv[argv.index(f"{paths.ROOT}:{paths.ROOT}") - 1] == "--mount" and f"{runs}:{runs}" in argv
    assert argv[argv.index("PYTHONPATH") - 1] == "--env" and env.env == {"PYTHONPATH": str(paths.ROOT)}
    assert argv[-3:] == [str(sqsh), "/opt/stack/bin/python", "train.py"] and env.facts == {"built": True}
    assert said == [f"stack pytorch: enroot image {sqsh} (cpu, sha256:{'5e' * 6})"]
    meta = json.loads(Path(f"{sqsh}.json").read_text())
    assert env.provenance == images.image_provenance(meta, "enroot", str(sqsh))
    assert env.provenance["image_base"] == {"kind": "debian", "ref": "hpc-dl-bench-base:debian"}


def test_the_worked_example_refuses_as_every_image_runtime_does(enroot, tmp_path, monkeypatch):
    want = StackRequest(STACK, "cpu", gpus=0)
    with pytest.raises(UsageError, match=r"^no cpu image of stack pytorch at .*pytorch-cpu\.sqsh: python -m "
                                         r"suite\.runtimes\.pyxis import --stack pytorch --flavour cpu$"):
        enroot.prepare(want, lambda m: None)
    image(tmp_path / "images", lock_sha256="0" * 64)
    with pytest.raises(UsageError, match="built from another lock than the checkout's"):
        enroot.prepare(want, lambda m: None)
    other = image(tmp_path / "other", stack=load_stack("tensorflow"))
    monkeypatch.setenv("SUITE_IMAGE", str(other))
    with pytest.raises(UsageError, match=rf"^image {re.escape(str(other))} holds stack 'tensorflow', not pytorch$"):
        enroot.prepare(want, lambda m: None)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError, match="RUNTIME=enroot needs enroot on PATH"):
        enroot.prepare(want, lambda m: None)


def calls(tree: ast.AST) -> set[str]:
    """The names a module calls (f() and x.f() alike)."""
    return {node.func.id if isinstance(node.func, ast.Name) else node.func.attr for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))}


@pytest.mark.parametrize("name", sorted(IMAGE_RUNTIMES))
def test_each_image_runtime_defines_only_its_own_parts(name):
    assert plugins.load("runtimes", name).prepare.__func__ is _image.ImageRuntime.prepare  # the skeleton's
    tree = ast.parse((paths.ROOT / "suite" / "runtimes" / IMAGE_RUNTIMES[name]).read_text())
    [own] = [n for n in tree.body if isinstance(n, ast.ClassDef) and "ImageRuntime" in map(ast.unparse, n.bases)]
    hooks = {n.name for n in own.body if isinstance(n, ast.FunctionDef)}
    assert {"locate", "command"} <= hooks <= {"start", "locate", "read_meta", "command"}
    # the stack's checks and the record's provenance are the skeleton's (doctor_lines may check an image too)
    assert not {"pick_flavour", "read_image_meta", "refuse_stale_image"} & calls(own)
    assert not {"StackEnv", "image_provenance"} & calls(tree)


def test_the_check_finds_a_prepare_of_its_own():
    """The check itself, on what pyxis and docker once did: a prepare that writes the provenance by hand."""
    tree = ast.parse("def prepare(want, log):\n    images.refuse_stale_image(want.stack, 'cpu', None, log)\n"
                     "    return StackEnv('x', '/b', provenance={'stack': want.stack.name})\n")
    assert {"StackEnv", "refuse_stale_image"} <= calls(tree)


def test_pyxis_records_the_shared_provenance_and_its_container(tmp_path, monkeypatch):
    """pyxis once wrote its provenance by hand, the image's base with its whole package list."""
    monkeypatch.setenv("SUITE_IMAGE_DIR", str(tmp_path / "images"))
    monkeypatch.delenv("SUITE_IMAGE", raising=False)
    sqsh = image(tmp_path / "images", stack=load_stack("pytorch-horovod"))
    env = pyxis.prepare(StackRequest(load_stack("pytorch-horovod"), "cpu", scheduler="slurm", install=False),
                        lambda m: None)
    meta = json.loads(Path(f"{sqsh}.json").read_text())
    container = env.provenance.pop("container")
    assert env.provenance == images.image_provenance(meta, "pyxis", str(sqsh))
    assert "packages" not in env.provenance["image_base"] and container["interface"] == "pyxis"

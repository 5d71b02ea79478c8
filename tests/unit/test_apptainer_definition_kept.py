"""A definition's build is kept when a whole SIF built before from the very same inputs is there: the
inputs' digest moves with each of them, and not with what changes between identical builds (where the
base made here lies, the wheel folder's URL). tests/integration/test_apptainer.py builds for real."""

import json
import shutil
from dataclasses import replace

import pytest

from suite.instack.file_digest import file_digest
from suite.runtimes.apptainer import definition
from suite.runtimes.apptainer.sif import SIF_MAGIC, meta_path
from suite.stacks.recipes import load_flavour, load_stack

BASE = {"kind": "debian", "ref": "/tmp/a/bases/debian.sif", "image_sha256": "ab" * 32}


@pytest.fixture
def flavour(tmp_path, monkeypatch):
    """The pytorch stack's cpu flavour, in a copy of its folder the test may change."""
    real = load_flavour(load_stack("pytorch"), "cpu")
    folder = tmp_path / "pytorch"
    shutil.copytree(real.stack.dir, folder)
    monkeypatch.setattr(definition, "runtime_version", lambda tool: "1.4.5")
    return replace(real, stack=replace(real.stack, dir=folder))


def digest(fl, base=BASE, rendered="Bootstrap: docker\n"):
    return definition.inputs_sha256(fl, rendered, base, "apptainer")


def test_the_digest_moves_with_every_input_and_not_with_where_the_base_lies(flavour, monkeypatch):
    first = digest(flavour)
    assert digest(flavour, {**BASE, "ref": "/tmp/b/bases/debian.sif"}) == first
    assert digest(flavour, {**BASE, "image_sha256": "cd" * 32}) != first
    assert digest(flavour, rendered="Bootstrap: docker\n# changed\n") != first
    (flavour.stack.dir / "patches").mkdir(exist_ok=True)
    (flavour.stack.dir / "patches" / "new.patch").write_text("--- a\n")
    changed_folder = digest(flavour)
    assert changed_folder != first
    monkeypatch.setenv("SUITE_APPTAINER_BUILD_OPTIONS", "--fakeroot --mksquashfs-args '-comp gzip'")
    assert digest(flavour) != changed_folder
    monkeypatch.setattr(definition, "runtime_version", lambda tool: "1.5.0")
    assert digest(flavour) not in (changed_folder, first)


def built(folder, made_from, size=4096):
    image = folder / "pytorch-cpu.sif"
    image.write_bytes(b"#!/usr/bin/env run-singularity\n\0" + SIF_MAGIC + b"\0" * (size - 41))
    meta = {"stack": "pytorch", "image_bytes": size, "image_sha256": file_digest(image), "built_from": made_from}
    meta_path(image).write_text(json.dumps(meta))
    return image, meta


def test_only_a_whole_sif_of_the_same_inputs_is_kept(tmp_path):
    made_from = {"definition": "containers/pytorch/cpu.def", "inputs_sha256": "ef" * 32}
    image, meta = built(tmp_path, made_from)
    assert definition.made_before(image, made_from) == meta
    assert definition.made_before(image, {**made_from, "inputs_sha256": "01" * 32}) is None
    assert definition.made_before(tmp_path / "none.sif", made_from) is None
    with open(image, "r+b") as f:  # the same size, other bytes: replaced since
        f.seek(100)
        f.write(b"x")
    assert definition.made_before(image, made_from) is None
    image, _ = built(tmp_path, {"docker_image_sha256": "ab" * 32})  # made from a Docker image
    assert definition.made_before(image, made_from) is None

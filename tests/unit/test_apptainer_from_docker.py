"""BASE=docker's parts that need no engine: when a SIF made before from a Docker image is kept, and the base
read from the Docker image's labels (tests/integration/test_apptainer_stacks.py makes the SIFs for real)."""

import json
from types import SimpleNamespace

from suite.runtimes import apptainer
from suite.runtimes.apptainer import from_docker
from suite.runtimes.apptainer.sif import SIF_MAGIC
from suite.stacks import images

DOCKER_ID = "ab" * 32


def sif(folder, size: int = 4096, built_from: str = DOCKER_ID, image_bytes: int | None = None):
    image = folder / "jax-cpu.sif"
    image.write_bytes(b"#!/usr/bin/env run-singularity\n\0" + SIF_MAGIC + b"\0" * (size - 41))
    meta = {"stack": "jax", "image_bytes": size if image_bytes is None else image_bytes,
            "built_from": {"docker_image": "hpc-dl-bench-jax:cpu-x-debian", "docker_image_sha256": built_from}}
    apptainer.meta_path(image).write_text(json.dumps(meta))
    return image, meta


def test_a_whole_sif_of_the_same_docker_image_is_kept(tmp_path):
    image, meta = sif(tmp_path)
    assert from_docker.made_before(image, SimpleNamespace(id=f"sha256:{DOCKER_ID}")) == meta


def test_a_sif_of_another_docker_image_a_cut_one_or_none_is_made_again(tmp_path):
    source = SimpleNamespace(id=f"sha256:{DOCKER_ID}")
    assert from_docker.made_before(tmp_path / "none.sif", source) is None
    image, _ = sif(tmp_path, built_from="cd" * 32)
    assert from_docker.made_before(image, source) is None
    image, _ = sif(tmp_path, image_bytes=8192)  # cut short
    assert from_docker.made_before(image, source) is None
    image.write_bytes(b"\0" * 4096)  # no SIF
    assert from_docker.made_before(image, source) is None


def test_the_base_is_read_from_the_docker_images_labels():
    labels = {"org.hpc-dl-bench.base_ref": "hpc-dl-bench-base:debian-bookworm-1",
              "org.hpc-dl-bench.base.kind": "debian", "org.hpc-dl-bench.base.tar_sha256": "ef" * 32,
              "org.hpc-dl-bench.base.spec": "x", "org.hpc-dl-bench.stack": "jax"}
    assert images.base_from_labels(labels) == {"kind": "debian", "ref": "hpc-dl-bench-base:debian-bookworm-1",
                                             "tar_sha256": "ef" * 32}
    assert images.base_from_labels({}) == {"kind": "pinned", "ref": None}

"""Every case in its stack's SIF: the cpu SIFs of tensorflow, mxnet, pytorch-horovod and jax made from the
Docker images the session's engine built (`make containers TOOL=apptainer BASE=docker`, once per session:
tests/support/apptainer_fixtures.py), each remaining case run in its SIF unprivileged on one node with two
devices, and a Docker image that is not there refused before anything is built. (pytorch's SIF is built
from its definition, and pytorch-ddp and pytorch-gpt run in it: test_apptainer.py.)"""

import json
import os
import subprocess
import sys

import pytest
from conftest import records_in
from support.apptainer_fixtures import DOCKER_SIF_CASES as CASES
from support.pairwise import on_this_machine

from suite.base import paths
from suite.instack.file_digest import file_digest
from suite.records.schema import validate
from suite.stacks.recipes import load_flavour, load_stack


def test_each_sif_holds_its_docker_image_and_is_described_like_a_built_one(apptainer_here, docker_sifs):
    import docker

    folder, metas = docker_sifs
    engine = docker.from_env(timeout=60)
    for stack, meta in metas.items():
        fl, image = load_flavour(load_stack(stack), "cpu"), folder / f"{stack}-cpu.sif"
        assert (meta["stack"], meta["flavour"], meta["tool"]) == (stack, "cpu", "apptainer")
        assert (meta["lock"], meta["lock_sha256"]) == (fl.lock, fl.lock_sha256)
        assert meta["image_sha256"] == file_digest(image) and meta["image_bytes"] == image.stat().st_size
        assert (folder / f"{stack}-cpu.sif.sha256").read_text().split()[0] == meta["image_sha256"]
        source = engine.images.get(meta["built_from"]["docker_image"])
        assert source.id == f"sha256:{meta['built_from']['docker_image_sha256']}"
        assert source.labels["org.hpc-dl-bench.lock_sha256"] == fl.lock_sha256
        assert meta["base"]["kind"] == "debian" and meta["system_packages"]["python3"].startswith("3.11")
        assert meta["packages"] and meta["tool_version"]
        said = (folder / f"{stack}-cpu.sif.build.log").read_text()
        assert "Running the image's test" in said and fl.smoke.split(";")[0] in said  # the test ran in the SIF


def test_a_sif_made_from_the_same_docker_image_is_kept(apptainer_here, docker_sifs):
    folder, metas = docker_sifs
    again = apptainer_here.suite("containers", "build", "--tool", "apptainer", "--base", "docker", "--stack", "jax",
                                 "--flavour", "cpu", env=apptainer_here.env(SUITE_IMAGE_DIR=str(folder)), timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "was made from the Docker image hpc-dl-bench-jax:cpu-" in again.stdout and "before: kept" in again.stdout
    assert json.loads((folder / "jax-cpu.sif.json").read_text()) == metas["jax"]


# in `make test` the cases that cross no hosts in this runtime's image (tests/support/pairwise.py)
@pytest.mark.parametrize("case", on_this_machine("apptainer", CASES))
def test_the_case_trains_in_its_sif_unprivileged(apptainer_here, docker_sifs, case):
    folder, metas = docker_sifs
    stack, case_args = CASES[case]
    out = apptainer_here.writable_folder(case)
    env = apptainer_here.env(SUITE_IMAGE_DIR=str(folder))
    done = apptainer_here.suite("run", "--case", case, "--runtime", "apptainer", "--flavour", "cpu",
                                "--gpus-per-node", "2", "--results-dir", str(out / "results"), "--runs-dir",
                                str(out / "runs"), "--", *case_args, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = records_in(out / "results")
    validate(record)
    assert record["status"] == "ok", record.get("reason")
    prov, meta = record["provenance"], metas[stack]
    assert (prov["runtime"], prov["image"], prov["image_sha256"], prov["runtime_version"]) == \
        ("apptainer", str(folder / f"{stack}-cpu.sif"), meta["image_sha256"], meta["tool_version"])
    assert prov["image_source"] == meta["built_from"] and prov["stack"] == stack
    assert record["world"]["devices"] == 2 and record["metrics"]["throughput"]["mean"] > 0
    for process in record["repetitions"][0]["processes"]:
        assert process["argv"][:2] == [apptainer_here.program, "exec"], process["argv"]


def test_a_missing_docker_image_is_refused_naming_the_make_line(docker_engine, tmp_path):
    """No cuda Docker image is built in the tests: asking for its SIF names the line that builds it."""
    env = {"SUITE_IMAGE_DIR": str(tmp_path / "images")}
    done = subprocess.run([sys.executable, "-m", "suite", "containers", "build", "--tool", "apptainer", "--base",
                           "docker", "--stack", "tensorflow", "--flavour", "cuda"], cwd=paths.ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    lock = load_flavour(load_stack("tensorflow"), "cuda").lock_sha256
    assert line == (f"error: no Docker image of tensorflow/cuda (lock {lock[:12]}) in the engine to make the SIF "
                    "from: build it with `make containers STACK=tensorflow FLAVOUR=cuda TOOL=docker`")
    assert not (tmp_path / "images").exists()

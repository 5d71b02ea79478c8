"""RUNTIME=pyxis on the tests' real SLURM (tests/support/cluster_fixtures.py), which has no pyxis or
enroot (they are in no package repository reachable here): an `srun` first on PATH
(tests/support/pyxis_spec.py srun-shim) checks every line against the written specification of pyxis's
options, writes it down, strips the container options and runs the real srun with the rest. The
"image" is the stack's local environment, named by its metadata's prefix; so everything but the
container itself runs as it would under pyxis: the batch job, its runner, each rank as a job step
with its container options, the record with the image's digest."""

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT, records_in, tiny
from support import pyxis_spec

from suite.records.schema import validate
from suite.stacks import images
from suite.stacks.install import ensure_installed
from suite.stacks.recipes import load_stack

PY = sys.executable
DIGEST = "9c" * 32


@pytest.fixture
def pyxis_site(tmp_path, monkeypatch):
    """The pytorch stack's local environment as the content of a squashfs 'image', and the srun shim."""
    stack = load_stack("pytorch")
    installed = ensure_installed(stack)
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    image = image_dir / "pytorch-cpu.sqsh"
    image.write_bytes(b"hsqs: stands for the image; the shim runs the local environment")
    fl = images.load_flavour(stack, "cpu")
    meta = images.write_image_meta(Path(f"{image}.json"), fl, str(image), DIGEST, "enroot",
                                   installed.info.get("facts", {}), installed.info.get("packages", {}),
                                   {"kind": "pinned"})
    Path(f"{image}.json").write_text(json.dumps({**meta, "prefix": str(installed.prefix)}))
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "srun").write_text(f'#!/bin/sh\nexec {PY} {ROOT / "tests/support/pyxis_spec.py"} srun-shim "$@"\n')
    (shim / "srun").chmod(0o755)
    monkeypatch.setenv("PYXIS_SHIM_REAL_SRUN", "/usr/bin/srun" if Path("/usr/bin/srun").exists() else "srun")
    monkeypatch.setenv("PYXIS_SHIM_LOG", str(tmp_path / "srun-lines.jsonl"))
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SUITE_IMAGE_DIR", str(image_dir))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


def test_pytorch_ddp_as_pyxis_steps_of_a_batch_job(suite_cli, slurm_cluster, pyxis_site):
    result = suite_cli("run", "--case", "pytorch-ddp", "--runtime", "pyxis", "--scheduler", "slurm", "--timeout", "300",
                       "--gpus-per-node", "2", case_args=tiny("pytorch-ddp", launcher="ranks"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "ok", record["reason"]
    assert record["execution"]["slurm"]["state"] == "COMPLETED"
    prov = record["provenance"]
    assert prov["runtime"] == "pyxis" and prov["image_sha256"] == DIGEST and prov["image"].endswith("pytorch-cpu.sqsh")
    assert prov["container"]["interface"] == "pyxis" and prov["container"]["name"].startswith("hpcdl-pytorch-cpu-")
    lines = [json.loads(line) for line in (pyxis_site / "srun-lines.jsonl").read_text().splitlines()]
    steps = [entry for entry in lines if any(a.startswith("--container-image=") for a in entry["argv"])]
    assert len(steps) >= 2, lines  # each rank (and the interconnect check's, where it ran) a container step
    assert all(entry["problems"] == [] for entry in lines), [e for e in lines if e["problems"]]
    for entry in steps:
        options, _ = pyxis_spec.container_options(entry["argv"][1:])
        assert options["--container-image"] == str(pyxis_site / "images" / "pytorch-cpu.sqsh")
        assert options["--container-name"].startswith("hpcdl-pytorch-cpu-")
        mounts = dict(m.split(":")[:2] for m in options["--container-mounts"].split(","))
        assert mounts[str(ROOT)] == str(ROOT) and str(suite_cli.runs) in mounts
        assert "PYTHONPATH" in options["--container-env"].split(",")

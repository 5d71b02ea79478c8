"""`make bench` at tiny sizes: runs every measurement and writes well-formed output (the targets
themselves are reported, not asserted: they are about the machine as much as the suite)."""

import json
import math
import re
import subprocess

import pytest

from conftest import ROOT
from suite.containers import host_gpus

LINE = re.compile(r"^(?P<name>[a-z_]+\.[a-z-]+): (?P<value>-?[0-9.]+) \((?P<op>>=|<) (?P<target>[0-9.]+)(, MISSED)?\)  \{")


@pytest.mark.integration
def test_make_bench_tiny_writes_ratios(tmp_path, pytorch_stack):
    out = tmp_path / "bench"
    result = subprocess.run(["make", "-s", "bench", f"BENCH_ARGS=--tiny --out {out}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    printed = {m["name"]: float(m["value"]) for m in map(LINE.match, result.stdout.splitlines()) if m}
    assert set(printed) == {"harness_overhead.pytorch-synthetic", "startup.pytorch-synthetic", "scaling.pytorch-synthetic",
                            "input_pipeline.mxnet-imagenet", "input_pipeline.tf-cifar", "scaling.mxnet-imagenet"}
    [path] = out.glob("*-tiny.json")
    data = json.loads(path.read_text())
    assert data["size"] == "tiny" and data["rounds"] == 1
    for name, entry in data["results"].items():
        assert math.isfinite(entry["value"]) and entry["value"] == pytest.approx(printed[name], abs=1e-3)
        assert entry["target"].split()[0] in (">=", "<") and isinstance(entry["met"], bool) and entry["settings"]
    if not host_gpus():
        assert "gpu_amp.pytorch-synthetic: skipped (no GPU on this machine)" in result.stdout
    ratios = [v for k, v in printed.items() if not k.startswith("startup")]
    assert all(r > 0 for r in ratios)

"""FLOPs counted from the PyTorch cases' model as it runs (cases/_shared/flops.py, in the real pytorch
stack), and a real CPU run's utilisation: its MFU against the matmul peak its rank measured."""

import json
import os
import subprocess

import pytest
from conftest import ROOT, records_in, tiny

COUNT = """
import json, sys
import torch
import torch.nn.functional as F
from cases._shared.flops import training_flops_per_sample
from cases._shared.torch_resnet import resnet50
model = resnet50()
before = {k: v.clone() for k, v in model.state_dict().items()}
counts = {}
for size in (224, 448):
    images = torch.empty(8, 3, size, size, device="meta")
    labels = torch.zeros(8, dtype=torch.long, device="meta")
    counts[size] = training_flops_per_sample({"test": size}, model, images, labels, F.cross_entropy)
untouched = all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
json.dump({"counts": counts, "untouched": untouched, "grads": [p.grad is None for p in model.parameters()]}, sys.stdout)
"""


@pytest.fixture(scope="module")
def torch_stack():
    """The real pytorch stack (torch's CPU wheel), installed once."""
    from suite.stacks.locks import ensure_installed, load_stack

    return ensure_installed(load_stack("pytorch"))


def test_resnet50_training_flops_are_counted_from_the_model(torch_stack, tmp_path):
    done = subprocess.run([str(torch_stack.python), "-c", COUNT], cwd=ROOT, capture_output=True, text=True,
                          check=True, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    found = json.loads(done.stdout)
    (at_224, source), (at_448, _) = found["counts"]["224"], found["counts"]["448"]
    assert at_224 == pytest.approx(3 * 2 * 4.1e9, rel=0.03)  # 3 x the forward pass's 4.1 G multiply-adds
    assert at_448 / at_224 == pytest.approx(4, rel=0.01)  # a convolution network's work grows with the area
    assert source.startswith("torch.utils.flop_counter") and "cached" not in source
    assert found["untouched"] and all(found["grads"])  # counted on the meta device: the model is as it was
    cache = json.loads((tmp_path / "hpc-dl-bench" / "flops-per-sample.json").read_text())
    assert sorted(cache.values()) == [at_224 * 8, at_448 * 8]


def test_a_cpu_run_reports_its_mfu_against_its_measured_peak(suite_cli, torch_stack):
    done = suite_cli("run", "--case", "pytorch-ddp", case_args=tiny("pytorch-ddp"))
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = records_in(suite_cli.results)
    used, per_device = record["metrics"]["utilisation"], record["metrics"]["throughput"]["per_device"]
    assert used["flops_per_sample"] > 0 and used["flops_source"].startswith("torch.utils.flop_counter")
    assert used["achieved_flops_per_s_per_device"] == pytest.approx(per_device * used["flops_per_sample"])
    assert used["precision"] == "fp32" and used["mfu_datasheet"] is None  # a CPU has no datasheet figure here
    assert 0 < used["mfu_measured"] <= 1
    assert used["achieved_flops_per_s_per_device"] <= used["measured_peak"]["max"]
    [work] = {json.dumps(r["work"]) for r in record["repetitions"]}
    assert json.loads(work)["flops_per_sample"] == used["flops_per_sample"]
    assert "work:" in done.stdout and "of the measured fp32 matmul peak" in done.stdout


TF_COUNT = """
import json, sys
sys.path.insert(0, "cases/tf-cifar")
import keras_resnet
from work import forward_flops
json.dump({size: forward_flops(keras_resnet.resnet50_v15, size, 1000) for size in (224, 448)}, sys.stdout)
"""


def test_tensorflow_profiler_counts_the_same_architecture_as_pytorch():
    """tf-cifar's count (TensorFlow's profiler over the model's graph, x 3 for a training step) of its
    ResNet-50 v1.5 agrees with PyTorch's count of the same architecture (suite/instack/model_flops.py)."""
    from suite.instack.model_flops import training_flops_per_image
    from suite.stacks.locks import ensure_installed, load_stack

    stack = ensure_installed(load_stack("tensorflow"))
    done = subprocess.run([str(stack.python), "-c", TF_COUNT], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    forward = {int(size): flops for size, flops in json.loads(done.stdout.splitlines()[-1]).items()}
    assert 3 * forward[224] == pytest.approx(training_flops_per_image("resnet50-v1.5", 224)[0], rel=0.02)
    assert forward[448] / forward[224] == pytest.approx(4, rel=0.01)  # (224 and 448 px: whole 7 and 14 px maps)

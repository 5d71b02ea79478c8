"""FLOPs counted from the PyTorch cases' model as it runs (cases/_shared/flops.py, in the real pytorch
stack), and a real CPU run's utilisation: its MFU against the matmul peak its rank measured."""

import json
import os
import subprocess

import pytest
from conftest import ROOT, installed_stack, records_in, tiny

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
    return installed_stack("pytorch")


def test_resnet50_training_flops_are_counted_from_the_model(torch_stack, tmp_path):
    done = subprocess.run([str(torch_stack.python), "-c", COUNT], cwd=ROOT, capture_output=True, text=True,
                          check=True, env={**os.environ, "SUITE_FLOPS_CACHE": str(tmp_path / "flops.json")})
    found = json.loads(done.stdout)
    (at_224, source), (at_448, _) = found["counts"]["224"], found["counts"]["448"]
    assert at_224 == pytest.approx(3 * 2 * 4.1e9, rel=0.03)  # 3 x the forward pass's 4.1 G multiply-adds
    assert at_448 / at_224 == pytest.approx(4, rel=0.01)  # a convolution network's work grows with the area
    assert source.startswith("torch.utils.flop_counter") and "cached" not in source
    assert found["untouched"] and all(found["grads"])  # counted on the meta device: the model is as it was
    cache = json.loads((tmp_path / "flops.json").read_text())
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
    assert "work:" in done.stdout and "MFU " in done.stdout and "of the measured fp32 matmul peak" in done.stdout
    # where the launch's time went (the timeline): its phases follow one another within its wall time
    took = record["repetitions"][0]["timeline"]
    chained = ("to_start_line_s", "to_warmup_s", "warmup_s", "window_s", "after_window_s", "to_exit_s")
    assert set(chained) | {"total_s", "matmul_peak_s"} <= set(took), took
    # each phase and the total rounded to the millisecond: their sum may differ from the total by that rounding
    assert -0.005 <= took["total_s"] - sum(took[k] for k in chained) < 1.0, took
    assert took["window_s"] >= record["metrics"]["timed_seconds"] - 0.01
    assert 0 < took["matmul_peak_s"] <= took["to_warmup_s"]
    assert f"time: {took['total_s']:.1f} s from launch to exit: to the start line" in done.stdout


GPT_COUNT = """
import json, sys, time
sys.path[:0] = [".", "cases/pytorch-gpt"]
import torch
from gpt import GPT, GPTConfig, non_embedding_parameters, parameters_counted, training_flops_per_token
from train import counted_flops_per_token
config = GPTConfig()  # GPT-2 small: 12 layers, 12 heads, width 768, context 1024, its vocabulary padded to 50,304
began = time.perf_counter()
counted = counted_flops_per_token(config, 8)
seconds = time.perf_counter() - began
with torch.device("meta"):
    model = GPT(config, activation_checkpointing=True)
n, palm_n = parameters_counted(model), non_embedding_parameters(model)
json.dump({"counted": counted, "seconds": seconds, "n": n, "formula": training_flops_per_token(config, n, 1024),
           "palm": training_flops_per_token(config, palm_n, 1024)}, sys.stdout)
"""


def test_the_gpt_flop_count_at_gpt2_small_matches_6n_plus_attention(torch_stack, tmp_path):
    """PyTorch's count of one step of GPT-2 small (on the meta device: no weights, no arithmetic), made
    on an empty cache, beside 6 N + 12 L H Q T with N as nanoGPT counts it (every parameter but the
    position embedding, the head tied to the token embedding once); PaLM's N, without the embeddings,
    gives a figure 1.37 times smaller."""
    done = subprocess.run([str(torch_stack.python), "-c", GPT_COUNT], cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=300, env={**os.environ, "SUITE_FLOPS_CACHE": str(tmp_path / "f.json")})
    found = json.loads(done.stdout)
    assert found["counted"] == pytest.approx(854.65e6, rel=1e-5)
    assert found["n"] == 123_689_472 and found["formula"] == pytest.approx(855.38e6, rel=1e-5)
    assert found["formula"] / found["palm"] == pytest.approx(1.37, abs=0.005)
    assert found["seconds"] < 20  # cheap: the count's model lives on the meta device


PRECISIONS = """
import json, sys
import torch
from cases._shared import flops
torch.cuda.get_device_capability = lambda device=None: (9, 0)  # an H100, as far as the flags go
gpu = torch.device("cuda", 0)
seen = {}
def looks():
    return {"gpt": flops.precision(gpu, None, "matmuls"), "resnet": flops.precision(gpu, None, "convolutions"),
            "amp": flops.precision(gpu, torch.bfloat16, "matmuls"), "cpu": flops.precision(torch.device("cpu"), None)}
seen["defaults"] = looks()
torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, False
seen["flipped"] = looks()
torch.version.hip = "6.2"
seen["rocm"] = looks()
flops.measure = lambda square, multiply, precision, largest, **how: flops.matmul_tf32_on()
torch.backends.cuda.matmul.allow_tf32 = False
seen["peak_tf32_on"] = {p: flops.matmul_peak(torch.device("cpu"), p) for p in ("fp32", "tf32")}
seen["restored"] = torch.backends.cuda.matmul.allow_tf32
seen["kept"] = {}
for start in ("none", "ieee", "tf32"):  # torch >= 2.9: `none` (inherit) and `ieee` are states of their own
    inside = {}
    for p in ("fp32", "tf32"):
        torch.backends.cuda.matmul.fp32_precision = start  # the new API alone: torch refuses the legacy flag's read
        inside[p] = flops.matmul_peak(torch.device("cpu"), p)
        inside[p + " after"] = torch.backends.cuda.matmul.fp32_precision
    seen["kept"][start] = inside
json.dump(seen, sys.stdout)
"""


def test_precision_is_read_from_what_the_run_set(torch_stack):
    """A GPT's float32 matmuls are fp32 unless matmul TF32 is on; a ResNet's convolutions follow
    cuDNN's flag; ROCm GPUs are never tf32; the measured peak runs TF32 only at a tf32 step, and leaves the
    process's setting as it found it."""
    done = subprocess.run([str(torch_stack.python), "-c", PRECISIONS], cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=300)
    seen = json.loads(done.stdout)
    assert seen["defaults"] == {"gpt": "fp32", "resnet": "tf32", "amp": "bf16", "cpu": "fp32"}
    assert seen["flipped"] == {"gpt": "tf32", "resnet": "fp32", "amp": "bf16", "cpu": "fp32"}
    assert seen["rocm"] == {"gpt": "fp32", "resnet": "fp32", "amp": "bf16", "cpu": "fp32"}
    assert seen["peak_tf32_on"] == {"fp32": False, "tf32": True} and seen["restored"] is False
    assert seen["kept"] == {start: {"fp32": False, "fp32 after": start, "tf32": True, "tf32 after": start}
                            for start in ("none", "ieee", "tf32")}  # as the process had it, exactly


MEMORY = """
import json, sys
import torch
from cases._shared.memory import peak_memory, reset_peak_memory
cpu = torch.device("cpu")
big = torch.ones(64 * 2**20)  # 256 MiB, as the suite's own measurement would hold
del big
before, _ = peak_memory(cpu)
reset_peak_memory(cpu)
after, basis = peak_memory(cpu)
json.dump({"before": before, "after": after, "basis": basis}, sys.stdout)
"""


def test_the_peak_memory_is_reset_after_the_suites_own_measurement(torch_stack):
    done = subprocess.run([str(torch_stack.python), "-c", MEMORY], cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=300)
    found = json.loads(done.stdout)
    assert found["before"] - found["after"] > 200 * 2**20, found
    assert "reset after the matmul peak" in found["basis"]


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

    stack = installed_stack("tensorflow")
    done = subprocess.run([str(stack.python), "-c", TF_COUNT], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    forward = {int(size): flops for size, flops in json.loads(done.stdout.splitlines()[-1]).items()}
    assert 3 * forward[224] == pytest.approx(training_flops_per_image("resnet50-v1.5", 224)[0], rel=0.02)
    assert forward[448] / forward[224] == pytest.approx(4, rel=0.01)  # (224 and 448 px: whole 7 and 14 px maps)

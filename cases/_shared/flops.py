"""The work a PyTorch case's step stands for, and what its device can do, measured in the case's
process before the timed window (neither is ever timed):

- training_flops_per_sample: the model's tensor FLOPs of one training step (forward and backward, as
  MLPerf counts a model's FLOPs: no recomputation, no optimizer update), counted by PyTorch's
  FlopCounterMode over the case's own model and loss at the run's sizes. The count runs on the meta
  device (the same modules and shapes, no arithmetic, no memory), so it is the same on a CPU and a GPU
  and costs a fraction of a second; it is cached per case, model and sizes in the user's cache folder.
- matmul_peak: the best FLOP/s of large square matrix products at the run's precision on this
  process's device (its share of the cores on a CPU): the measured ceiling the model's FLOP/s is set
  against, for any device, listed on a datasheet or not.

The case hands both to the probe (probe.work, probe.measured_peak)."""

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from suite.instack.model_flops import cached

COUNTED = "torch.utils.flop_counter: one forward and backward pass of the model at the run's sizes"


def training_flops_per_sample(key: dict, model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                              loss_fn) -> tuple[float, str]:
    """(FLOPs per sample of one training step, where the figure comes from). `key` names what the count
    depends on (case, model, sizes); `inputs` and `targets` are one batch of the run's shapes (on any
    device, the meta device too)."""
    key = {**key, "torch": torch.__version__.split("+")[0], "batch": len(inputs)}
    total, from_cache = cached(key, lambda: _count_on_meta(model, inputs, targets, loss_fn))
    return total / len(inputs), COUNTED + (" (cached)" if from_cache else "")


def _count_on_meta(model: torch.nn.Module, inputs, targets, loss_fn) -> int:
    """FLOPs of a forward and backward pass of `model` with its parameters and buffers replaced by meta
    tensors of the same shapes: the model's own code runs, nothing is computed or allocated, and the
    model itself (its weights, its statistics) is untouched."""
    params = {name: torch.empty_like(p, device="meta").requires_grad_(p.requires_grad)
              for name, p in model.named_parameters()}
    buffers = {name: torch.empty_like(b, device="meta") for name, b in model.named_buffers()}
    meta_inputs = torch.empty_like(inputs, device="meta", memory_format=torch.contiguous_format)
    meta_targets = torch.empty_like(targets, device="meta")
    with FlopCounterMode(display=False) as counter:
        outputs = torch.func.functional_call(model, {**params, **buffers}, (meta_inputs,))
        loss_fn(outputs, meta_targets).backward()
    return counter.get_total_flops()


def precision(device: torch.device, amp_dtype: torch.dtype | None) -> str:
    """The arithmetic the step's matrix products run in: fp16/bf16 under autocast; float32 on a GPU
    whose convolutions use TF32 (cuDNN's default from Ampere on) is tf32, elsewhere fp32."""
    if amp_dtype is not None:
        return {torch.float16: "fp16", torch.bfloat16: "bf16"}[amp_dtype]
    if device.type == "cuda" and torch.backends.cudnn.allow_tf32 and torch.cuda.get_device_capability(device)[0] >= 8:
        return "tf32"
    return "fp32"


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "fp32": torch.float32}


def matmul_peak(device: torch.device, precision_name: str, seconds: float = 1.0) -> dict:
    """{flops_per_s, precision, matrix, seconds}: the best rate of n x n matrix products over about
    `seconds`, n grown until one product takes a few milliseconds (at most 8192 on a GPU, 4096 on a CPU)."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    tf32_was = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision_name == "tf32"
    try:
        began = time.perf_counter()
        n, one = _matrix_size(device, DTYPES[precision_name], sync)
        a = torch.randn(n, n, device=device).to(DTYPES[precision_name])
        b = torch.randn(n, n, device=device).to(DTYPES[precision_name])
        repeats = max(1, int(0.1 / max(one, 1e-6)))  # rounds of about 0.1 s
        best = 0.0
        while time.perf_counter() - began < seconds or best == 0.0:
            sync()
            start = time.perf_counter()
            for _ in range(repeats):
                torch.mm(a, b)
            sync()
            best = max(best, 2 * n**3 * repeats / (time.perf_counter() - start))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_was
    return {"flops_per_s": best, "precision": precision_name, "matrix": n,
            "seconds": round(time.perf_counter() - began, 3)}


def _matrix_size(device: torch.device, dtype: torch.dtype, sync) -> tuple[int, float]:
    """The matrix side to measure with, and one product's seconds at it."""
    largest = 8192 if device.type == "cuda" else 4096
    n = 512
    while True:
        a = torch.randn(n, n, device=device).to(dtype)
        torch.mm(a, a)  # the first product of a size sets up its kernel: not timed
        sync()
        start = time.perf_counter()
        torch.mm(a, a)
        sync()
        one = time.perf_counter() - start
        if one > 0.02 or n >= largest:
            return n, one
        n *= 2


def report_work(probe, key: dict, model: torch.nn.Module, inputs, targets, loss_fn, device: torch.device,
                amp_dtype: torch.dtype | None) -> None:
    """Counts the step's FLOPs per sample and measures the device's matmul peak at the step's
    precision, and hands both to the probe: before the warmup, never inside a timed window. `model` is
    the bare model (not wrapped for data parallelism or compiled): the count runs the model's own code."""
    per_sample, source = training_flops_per_sample(key, model, inputs, targets, loss_fn)
    name = precision(device, amp_dtype)
    probe.work(flops_per_sample=per_sample, source=source, precision=name)
    probe.measured_peak(**matmul_peak(device, name))

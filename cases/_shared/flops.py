"""The work a PyTorch case's step stands for, and what its device can do, measured in the case's
process before the timed window (neither is ever timed):

- training_flops_per_sample: the model's tensor FLOPs of one training step (forward and backward, as
  MLPerf counts a model's FLOPs: no recomputation, no optimizer update), counted by PyTorch's
  FlopCounterMode over the case's own model and loss at the run's sizes. The count runs on the meta
  device (the same modules and shapes, no arithmetic, no memory), so it is the same on a CPU and a GPU
  and costs a fraction of a second; it is cached per case, model and sizes in the user's cache folder.
- precision: the arithmetic of the step's products as the run set it (autocast, TF32 flags).
- matmul_peak: the best FLOP/s of large square matrix products at the step's precision on this
  process's device (its share of the cores on a CPU), timed by suite/instack/matmul_peak.py as every
  case's is: the measured ceiling the model's FLOP/s is set against, for any device, listed on a
  datasheet or not. The process's peak memory is reset after it (cases/_shared/memory.py).

The case hands both to the probe (probe.work, probe.measured_peak)."""

import contextlib

import torch
from torch.utils.flop_counter import FlopCounterMode

from cases._shared.memory import reset_peak_memory
from suite.instack.matmul_peak import largest_side, measure
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


def precision(device: torch.device, amp_dtype: torch.dtype | None, products: str = "convolutions") -> str:
    """The arithmetic the step's products run in, as this run set it: fp16/bf16 under autocast; float32
    is tf32 where the run lets TF32 into the products that make up its step (`products`: "convolutions",
    cuDNN's flag, on by default; "matmuls", TF32 in matrix products (matmul_tf32_on), off by default:
    a GPT's float32 is true FP32) on an NVIDIA GPU with TF32 (Ampere on), else fp32. ROCm GPUs
    (torch.version.hip) are fp32: the flags are NVIDIA's."""
    if amp_dtype is not None:
        return {torch.float16: "fp16", torch.bfloat16: "bf16"}[amp_dtype]
    if device.type != "cuda" or torch.version.hip or torch.cuda.get_device_capability(device)[0] < 8:
        return "fp32"
    return "tf32" if tf32_allowed(products) else "fp32"


def tf32_allowed(products: str) -> bool:
    """Whether this process lets TF32 into its float32 convolutions or matrix products."""
    if products == "matmuls":
        return matmul_tf32_on()
    return torch.backends.cudnn.allow_tf32


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "fp32": torch.float32}


def matmul_peak(device: torch.device, precision_name: str, seconds: float | None = None) -> dict:
    """The measured matmul peak of this process's device (suite/instack/matmul_peak.py) in torch.mm at
    the step's precision: float32 products in TF32 exactly when the step's products run in TF32 (a
    ResNet's convolutions under cuDNN's flag), never because the measurement wants it."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    dtype = DTYPES[precision_name]

    def square(n: int) -> torch.Tensor:
        return torch.randn(n, n, device=device).to(dtype)

    def multiply(a: torch.Tensor, times: int) -> None:
        for _ in range(times):
            torch.mm(a, a)
        sync()

    with matmul_tf32(precision_name == "tf32"):
        return measure(square, multiply, precision_name, largest_side(device.type == "cuda"), seconds=seconds)


@contextlib.contextmanager
def matmul_tf32(on: bool):
    """TF32 in float32 matrix products on or off inside the block, the process's setting left untouched where it
    already is so, else put back exactly. Since torch 2.9 the setting is `fp32_precision`, where `none` (the
    default: inherit) and `ieee` (what `allow_tf32 = False` writes) compute alike but are different states:
    torch.compile's caches key on them, so a setting left as `ieee` would make the case's compiled step another
    program than the same step elsewhere. The legacy flag is only ever written (it writes both APIs alike); read
    after the new API alone was set, torch refuses it."""
    if matmul_tf32_on() == on:
        yield
        return
    matmul = torch.backends.cuda.matmul
    was = getattr(matmul, "fp32_precision", None)
    matmul.allow_tf32 = on
    try:
        yield
    finally:
        matmul.allow_tf32 = not on
        if was is not None:
            matmul.fp32_precision = was


def matmul_tf32_on() -> bool:
    """Whether float32 matrix products on NVIDIA GPUs may run in TF32 in this process: the new API's setting
    where torch has it (`none` inherits the backends' own, whose `none` is IEEE), else the legacy flag."""
    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):
        return bool(matmul.allow_tf32)
    chain = (matmul.fp32_precision, getattr(torch.backends, "fp32_precision", "none"))
    return next((setting for setting in chain if setting != "none"), "ieee") == "tf32"


def report_peak(probe, device: torch.device, precision_name: str) -> None:
    """Measures the device's matmul peak and hands it to the probe, then forgets the process's peak
    memory so far: the record's memory figures are the training's, not the measurement's matrices."""
    probe.measured_peak(**matmul_peak(device, precision_name))
    reset_peak_memory(device)


def report_work(probe, key: dict, model: torch.nn.Module, inputs, targets, loss_fn, device: torch.device,
                amp_dtype: torch.dtype | None) -> None:
    """Counts the step's FLOPs per sample and measures the device's matmul peak at the step's
    precision, and hands both to the probe: before the warmup, never inside a timed window. `model` is
    the bare model (not wrapped for data parallelism or compiled): the count runs the model's own code."""
    per_sample, source = training_flops_per_sample(key, model, inputs, targets, loss_fn)
    name = precision(device, amp_dtype, "convolutions")
    probe.work(flops_per_sample=per_sample, source=source, precision=name)
    report_peak(probe, device, name)

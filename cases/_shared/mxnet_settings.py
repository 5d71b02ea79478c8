"""What MXNet's settings make of a run's arithmetic, read from its environment as MXNet reads it
(MXNet has no call that tells; mxnet-imagenet imports this). Standard library only."""

import os


def precision(dtype: str, on_gpu: bool) -> str:
    """The arithmetic of the step's products as MXNet's settings have it: float16 is fp16; float32 on a
    GPU is tf32 where MXNet lets tensor cores take float32 inputs (MXNET_CUDA_ALLOW_TENSOR_CORE, on by
    default, and MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION, off by default) and NVIDIA_TF32_OVERRIDE=0
    does not forbid it; else fp32. (A GPU without TF32 runs tf32 as fp32: the analysis reads it so.)"""
    if dtype == "float16":
        return "fp16"
    allowed = (on_gpu and _env_on("MXNET_CUDA_ALLOW_TENSOR_CORE", True)
               and _env_on("MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION", False)
               and os.environ.get("NVIDIA_TF32_OVERRIDE") != "0")
    return "tf32" if allowed else "fp32"


def _env_on(name: str, default: bool) -> bool:
    """A boolean MXNet setting as MXNet reads it (0, 1, true, false)."""
    value = os.environ.get(name, "").strip().lower()
    return default if not value else value in ("1", "true")

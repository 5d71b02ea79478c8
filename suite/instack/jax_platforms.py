"""Whether a JAX process trains on GPUs, and on which platform: the one place the JAX cases
(cases/_shared/jax_dist.py) and the interconnect check (allreduce_sweep.py) ask. Standard library only:
imported inside the stacks.

It is decided before JAX starts (JAX_PLATFORMS must be set before JAX makes its backend), from what this
environment's JAX has: the PJRT plugins installed beside it, `jax-cuda<major>-plugin` / `jax-cuda<major>-pjrt`
for CUDA of any major version and `jax-rocm<major>-plugin` / `-pjrt` for ROCm (or a jaxlib built with one of
them, `jaxlib==0.4.26+cuda12.cudnn89` as older releases were published), and from whether the host shows a
device of that platform that the visibility variables leave."""

import os
import re
import subprocess
from importlib.metadata import distributions

PLUGIN = re.compile(r"jax-(cuda|rocm)\d+-(plugin|pjrt)")
JAXLIB_BUILD = re.compile(r"\+(cuda|rocm)")
HIDING = {"cuda": ("CUDA_VISIBLE_DEVICES",),
          "rocm": ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")}


def jax_gpu_plugin() -> str | None:
    """"cuda" or "rocm": the GPU platform whose PJRT plugin (or jaxlib build) is installed; None: JAX's CPU only."""
    for dist in distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        found = PLUGIN.fullmatch(name) or (name == "jaxlib" and JAXLIB_BUILD.search(dist.version))
        if found:
            return found[1]
    return None


def jax_gpu_platform() -> str | None:
    """The GPU platform a JAX process here is to use: jax_gpu_plugin()'s where the host lists a device of it
    and no visibility variable set empty hides them all; None: the CPU."""
    platform = jax_gpu_plugin()
    if platform is None or any(os.environ.get(name) == "" for name in HIDING[platform]):
        return None
    return platform if host_has_devices(platform) else None


def host_has_devices(platform: str) -> bool:
    """Whether the host shows a GPU of the platform: one `nvidia-smi -L` lists, or AMD's /dev/kfd."""
    if platform == "rocm":
        return os.path.exists("/dev/kfd")
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "GPU" in listed

"""A PyTorch case process's peak memory, resettable, so that the record's memory figures are the
training's and not the suite's own measurements before it (the matmul peak's matrices):

- on a GPU: torch.cuda.max_memory_allocated, reset by torch.cuda.reset_peak_memory_stats;
- on a CPU: the process's peak resident set (VmHWM in /proc/self/status), reset by writing 5 to
  /proc/self/clear_refs (Linux); where either is missing, getrusage's peak since the process began."""

import resource
from pathlib import Path

import torch

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_PEAK_RSS = "5"  # clear_refs: reset the peak resident set size (VmHWM) to the current one
_reset = {"cpu": False}  # whether the CPU peak was reset in this process


def reset_peak_memory(device: torch.device) -> None:
    """Forgets the peak so far: from here on the peak counts what the process holds from now."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        CLEAR_REFS.write_text(RESET_PEAK_RSS)
        _reset["cpu"] = True
    except OSError:
        pass  # not Linux, or not allowed: peak_memory says it counts from the start


def peak_memory(device: torch.device) -> tuple[int, str]:
    """This process's peak memory in bytes since the last reset, and what it counts."""
    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated(device),
                "torch.cuda.max_memory_allocated, reset after the matmul peak was measured")
    found = _peak_resident_kib()
    if found is not None and _reset["cpu"]:
        return found * 1024, "peak resident set of the process (VmHWM), reset after the matmul peak was measured"
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak resident set of the process since it began (getrusage)")


def _peak_resident_kib() -> int | None:
    try:
        lines = STATUS.read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("VmHWM:")), None)

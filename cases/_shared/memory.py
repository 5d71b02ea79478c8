"""A PyTorch case process's peak memory, resettable, so that the record's memory figures are the
training's and not the suite's own measurements before it (the matmul peak's matrices):

- on a GPU: torch.cuda.max_memory_allocated, reset by torch.cuda.reset_peak_memory_stats;
- on a CPU: the process's peak resident set (cases/_shared/resident_memory.py)."""

import torch

from cases._shared.resident_memory import peak_resident, reset_peak_resident


def reset_peak_memory(device: torch.device) -> None:
    """Forgets the peak so far: from here on the peak counts what the process holds from now."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_peak_resident()


def peak_memory(device: torch.device) -> tuple[int, str]:
    """This process's peak memory in bytes since the last reset, and what it counts."""
    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated(device),
                "torch.cuda.max_memory_allocated, reset after the matmul peak was measured")
    return peak_resident()

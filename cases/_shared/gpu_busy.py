"""The GPU's own time for a training step's forward and backward pass (the PyTorch cases on CUDA), for
the run's diagnosis: set against the timed step's wall time it says how much of the step the GPU
works. NVML's utilisation says the same over the whole node at a one-second grain; this is the step
itself, on the rank's own GPU.

The pass is launched behind a kernel that spins on the GPU, so every launch is queued before the GPU
reaches it and the GPU runs them back to back, whatever the host's launch cost; CUDA events around
the pass time the GPU alone. Where the spin ended before the host finished launching (a slow host, a
full launch queue), the spin is made longer and the pass tried again."""

import torch

CYCLES_PER_SECOND = 2e9  # about a GPU's clock: the spin kernel counts cycles, not seconds
SPINS_S = (0.05, 0.2, 0.8, 3.2)  # one try each, until one outlasts the launches


def pass_gpu_seconds(one_pass, settle=None, spins: tuple[float, ...] = SPINS_S) -> float | None:
    """GPU seconds of `one_pass()` (launches only: nothing in it may wait for the GPU); `settle()`
    runs after each try (e.g. waits for the all-reduces it started); None off CUDA, or where no spin
    outlasted the launches. A pass that starts collectives must be tried as often on every rank: one
    spin, long enough."""
    if not torch.cuda.is_available() or not hasattr(torch.cuda, "_sleep"):
        return None
    for spin in spins:
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(spin * CYCLES_PER_SECOND))
        begin.record()
        one_pass()
        end.record()
        queued = not begin.query()  # the GPU still spins: it has not reached the pass yet
        torch.cuda.synchronize()
        if settle:
            settle()
        if queued:
            return begin.elapsed_time(end) / 1000
    return None

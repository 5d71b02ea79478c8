"""A JAX case's run once its step is compiled (both jax cases'): the wait for the other processes, the warmup
and the timed iterations (cases/_shared/timed.py's rule), on GPUs the device's time per step, then the losses,
every process's peak memory and the end line (jax_work.report_end).

The case's state answers `advance(compiled, batch)`, one step that updates its arrays and returns the step's
loss (on the devices), and `arrays()`, what a sync waits for. JAX is imported inside the functions: the module is
imported after cases/_shared/jax_dist.py set JAX up."""

import time

from cases._shared.jax_dist import agree, wait_for_the_others
from cases._shared.jax_work import report_end
from cases._shared.timed import min_seconds, timed_iterations

DEVICE_STEPS = 5  # steps dispatched back to back after the timed window, timed as the device's per step
GPU_PASS_BASIS = (f"{DEVICE_STEPS} train steps dispatched back to back after the timed window, one batch, "
                  "block_until_ready after the last: wall seconds / steps (the device's time where the host "
                  "dispatches faster than the device runs)")


def train_and_report(probe, compiled, state, next_batch, args, platform: str, per_step: int) -> None:
    """Everything from the first collective to the end line; `per_step` samples (images, tokens) a step per
    device."""
    import jax

    # the first collective: every process has its program (see wait_for_the_others)
    probe.result(waited_for_the_others_s=wait_for_the_others("compiled"))
    losses = train(probe, compiled, state, next_batch, args, platform, per_step)
    if platform == "gpu":  # the device's time for a step, beside the timed step (the diagnosis)
        probe.result(gpu_pass_s=device_step_seconds(compiled, state, next_batch()), gpu_pass_basis=GPU_PASS_BASIS)
    report_end(probe, losses, jax.local_devices()[0])


def train(probe, compiled, state, next_batch, args, platform: str, per_step: int) -> list:
    """The warmup and the timed iterations; every step's loss (on the devices)."""
    import jax

    losses = []

    def one_iteration():
        for _ in range(args.num_batches_per_iter):
            losses.append(state.advance(compiled, next_batch()))

    sync = lambda: jax.block_until_ready(state.arrays())  # noqa: E731
    with probe.warmup(images=per_step * args.num_warmup_batches, sync=sync):
        for _ in range(args.num_warmup_batches):
            losses.append(state.advance(compiled, next_batch()))
    timed_iterations(probe, args.num_iters, min_seconds(args.min_seconds, platform == "gpu"),
                     per_step * args.num_batches_per_iter, one_iteration, sync, agree)
    return losses


def device_step_seconds(compiled, state, batch) -> float:
    """Seconds a step takes on the device: DEVICE_STEPS steps on one batch (no data read between them)
    dispatched back to back, timed from a drained queue to block_until_ready after the last, over their count.
    Every process runs them (their collectives); the state trains on, their losses are not recorded."""
    import jax

    jax.block_until_ready(state.arrays())
    began = time.perf_counter()
    for _ in range(DEVICE_STEPS):
        loss = state.advance(compiled, batch)
    jax.block_until_ready((state.arrays(), loss))
    return (time.perf_counter() - began) / DEVICE_STEPS

"""The timed iterations of a step-based case (pytorch-synthetic, pytorch-ddp with synthetic data):
--num-iters of them, or more where --min-seconds asks for a longer timed window. On a fast GPU ten
iterations last a few seconds, too short for the telemetry sampler (one sample a second) and for a
stable mean; after the first timed iteration, rank 0's time for it sets how many run in all, and every
rank runs that many (`agree` hands rank 0's count to all: a collective of the case's framework)."""

import math
import time

AUTO_GPU_SECONDS = 30.0  # --min-seconds -1 (the default) on GPUs; on CPUs it keeps --num-iters
MAX_ITERATIONS = 100_000


def min_seconds(requested: float, on_gpu: bool) -> float:
    return requested if requested >= 0 else (AUTO_GPU_SECONDS if on_gpu else 0.0)


def iterations_needed(num_iters: int, first_seconds: float, minimum: float) -> int:
    """At least num_iters; as many as fill `minimum` seconds at the first iteration's pace."""
    if minimum <= 0 or first_seconds <= 0:
        return num_iters
    return min(MAX_ITERATIONS, max(num_iters, math.ceil(minimum / first_seconds)))


def timed_iterations(probe, num_iters: int, minimum: float, images: int, one_iteration, sync, agree,
                     after=None) -> None:
    """after(index, total, seconds), where given: called after each timed iteration with its seconds, outside
    the iteration's time (pytorch-ddp times a step without its gradient exchange there)."""
    total, index = num_iters, 0
    while index < total:
        began = time.perf_counter()
        with probe.iteration(images=images, sync=sync, total=total):
            one_iteration()
        seconds = time.perf_counter() - began
        if index == 0 and minimum > 0:
            total = agree(iterations_needed(num_iters, seconds, minimum))
        if after is not None:
            after(index, total, seconds)
        index += 1
    probe.result(timed_iterations=total, min_seconds=minimum)

"""The measured matmul peak of every case: the best FLOP/s of large square matrix products on one
device, the ceiling a run's model FLOP/s is set against (its MFU against the measured peak). One
timing routine for every framework; the case passes two functions in its framework:

- square(n): an n x n matrix on the device, in the run's arithmetic;
- multiply(a, times): `times` products a x a one after another, returning when the last is done.

The side n grows from 512 by powers of two until one product takes a few milliseconds (at most `largest`,
which every case takes from largest_side), each step to where the last product's time predicts (next_side);
then rounds of about 0.1 s of products are timed for about `seconds` (1 s, or $SUITE_MATMUL_PEAK_SECONDS:
longer for a steadier figure, shorter where many small runs start, as the tests') and the best round kept.
Nothing of it runs inside a timed window. Standard library only."""

import os
import time

FIRST_SIDE = 512
LONG_ENOUGH_S = 0.02  # one product at least this long: the side is large enough to fill the device
ROUND_S = 0.1
SECONDS_VARIABLE = "SUITE_MATMUL_PEAK_SECONDS"


def largest_side(on_gpu: bool) -> int:
    """The side the products grow to at most (measure's `largest`), for every case: 8192 on a GPU, 4096
    on a CPU."""
    return 8192 if on_gpu else 4096


def configured_seconds(environ=os.environ) -> float:
    """How long the products are timed: $SUITE_MATMUL_PEAK_SECONDS, else 1 s (ValueError when it is not a
    number of seconds from 0.1 to 600)."""
    text = environ.get(SECONDS_VARIABLE, "").strip()
    try:
        seconds = float(text) if text else 1.0
    except ValueError:
        seconds = float("nan")
    if not 0.1 <= seconds <= 600:
        raise ValueError(f"{SECONDS_VARIABLE}={text!r}: the seconds the matmul peak is timed, from 0.1 to 600")
    return seconds


def measure(square, multiply, precision: str, largest: int, shared_by: int = 1, seconds: float | None = None) -> dict:
    """{flops_per_s, precision, matrix, seconds, shared_by}: the best rate per device (the process's
    rate divided by `shared_by`, the devices that share its cores on a CPU)."""
    seconds = configured_seconds() if seconds is None else seconds
    began = time.perf_counter()
    n, one = matrix_side(square, multiply, largest)
    a = square(n)
    repeats = max(1, int(ROUND_S / max(one, 1e-6)))
    best = 0.0
    while time.perf_counter() - began < seconds or best == 0.0:
        start = time.perf_counter()
        multiply(a, repeats)
        best = max(best, 2 * n**3 * repeats / (time.perf_counter() - start))
    return {"flops_per_s": best / shared_by, "precision": precision, "matrix": n,
            "seconds": round(time.perf_counter() - began, 3), "shared_by": shared_by}


def matrix_side(square, multiply, largest: int) -> tuple[int, float]:
    """The side to measure with, and one product's seconds at it."""
    n = FIRST_SIDE
    while True:
        a = square(n)
        multiply(a, 1)  # the first product of a size sets up its kernel: not timed
        start = time.perf_counter()
        multiply(a, 1)
        one = time.perf_counter() - start
        if one > LONG_ENOUGH_S or n >= largest:
            return n, one
        n = next_side(n, one, largest)


def next_side(n: int, one: float, largest: int) -> int:
    """The side to try after n, whose product took `one` seconds: the power of two where a product would
    take LONG_ENOUGH_S were its time n**3 (at least 2n, at most `largest`). A GPU's small products are all
    launch overhead, so it goes from the first side to the largest: each side tried costs a compilation
    (JAX, TensorFlow) and a kernel's set-up."""
    wanted = n * (LONG_ENOUGH_S / max(one, 1e-9)) ** (1 / 3)
    side = 2 * n
    while side < min(wanted, largest):
        side *= 2
    return min(side, largest)

"""The measured matmul peak of every case: the best FLOP/s of large square matrix products on one
device, the ceiling a run's model FLOP/s is set against (its MFU against the measured peak). One
timing routine for every framework; the case passes two functions in its framework:

- square(n): an n x n matrix on the device, in the run's arithmetic;
- multiply(a, times): `times` products a x a one after another, returning when the last is done.

The side n is doubled from 512 until one product takes a few milliseconds (at most `largest`); then
rounds of about 0.1 s of products are timed for about `seconds` and the best round kept. Nothing of it
runs inside a timed window. Standard library only."""

import time

FIRST_SIDE = 512
LONG_ENOUGH_S = 0.02  # one product at least this long: the side is large enough to fill the device
ROUND_S = 0.1


def measure(square, multiply, precision: str, largest: int, shared_by: int = 1, seconds: float = 1.0) -> dict:
    """{flops_per_s, precision, matrix, seconds, shared_by}: the best rate per device (the process's
    rate divided by `shared_by`, the devices that share its cores on a CPU)."""
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
        n *= 2

"""Statistics of repetitions: mean with its 95% confidence interval (Student t), speedup and efficiency
against a baseline, and numbers formatted for tables."""

import math
import statistics


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and half-width of its 95% confidence interval (Student t); no interval for one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    # imported on first use, and the t quantile alone: scipy.stats takes a second to import, in every run
    from scipy.special import stdtrit

    sem = statistics.stdev(values) / math.sqrt(len(values))
    return mean, float(stdtrit(len(values) - 1, 0.975) * sem)


def speedup_efficiency(points, baseline) -> list[tuple[float, float]]:
    """(speedup, efficiency %) of each (devices, throughput) pair in `points` against the
    (devices, throughput) pair `baseline`: speedup = throughput / baseline throughput, efficiency =
    100 x speedup / (devices / baseline devices). The one definition that sweeps, reports, the
    scaling model and its validation use."""
    base_devices, base_throughput = baseline
    rows = []
    for devices, throughput in points:
        speedup = throughput / base_throughput
        rows.append((speedup, 100 * speedup / (devices / base_devices)))
    return rows


def fmt_number(value: float, digits: int = 1, sign: bool = False) -> str:
    """`value` rounded to `digits` decimals, then formatted; with sign=True a non-zero result carries
    its sign (`+1.8`, `-0.9`). Zero never does: a value that rounds to zero, or a -0.0 from a
    floating-point fit (its sign depends on the BLAS kernel), prints `0.0`, the same on every machine."""
    rounded = round(value, digits) + 0.0  # -0.0 + 0.0 is +0.0
    return f"{rounded:{'+' if sign and rounded != 0 else ''}.{digits}f}"

import math
import statistics

from scipy import stats


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and half-width of its 95% confidence interval (Student t); no interval for one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    sem = statistics.stdev(values) / math.sqrt(len(values))
    return mean, float(stats.t.ppf(0.975, len(values) - 1) * sem)

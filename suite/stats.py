import math
import statistics


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and half-width of its 95% confidence interval (Student t); no interval for one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    from scipy import stats  # imported on first use: keeps the runner's start-up short

    sem = statistics.stdev(values) / math.sqrt(len(values))
    return mean, float(stats.t.ppf(0.975, len(values) - 1) * sem)

"""Where a bare loop's wall time goes, in seconds between marks counted from the start of its process
(interpreter, imports, device, model up to the first mark): the loop marks the end of each phase and prints
`phases` in its JSON line, so that `make gpu-check` sets a side's time beside the suite's timeline of the
same run (suite/records/measure.py: timeline). Standard library only."""

import os
import time

IMPORTED = time.time()


def process_started(stat_path: str = "/proc/self/stat", uptime_path: str = "/proc/uptime") -> float:
    """When this process started (time.time()'s clock; Linux's /proc, to its 10-ms ticks), else this module's
    import."""
    try:
        with open(stat_path) as stat, open(uptime_path) as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, after the name
            up = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return IMPORTED
    return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))


class Phases:
    """Marks in order: mark("set_up") ends the first phase, mark("window") the last; seconds() the phases
    as {name_s: seconds}."""

    def __init__(self, started: float | None = None, clock=time.time):
        self.clock = clock
        self.last = process_started() if started is None else started
        self.found: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = self.clock()
        self.found[f"{name}_s"] = round(max(0.0, now - self.last), 3)
        self.last = now

    def seconds(self) -> dict[str, float]:
        return dict(self.found)

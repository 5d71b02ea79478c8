"""A case process's peak resident set on a CPU, resettable, with no framework: the record's memory figures
are the training's, not the suite's own measurements before it (the matmul peak's matrices). The peak is
VmHWM in /proc/self/status, reset by writing 5 to /proc/self/clear_refs (Linux); where either is missing,
getrusage's peak since the process began, and the basis says so."""

import resource
from pathlib import Path

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_PEAK_RSS = "5"  # clear_refs: reset the peak resident set size (VmHWM) to the current one
_reset = {"done": False}  # whether the peak was reset in this process


def reset_peak_resident() -> None:
    """Forgets the peak so far: from here on the peak counts what the process holds from now."""
    try:
        CLEAR_REFS.write_text(RESET_PEAK_RSS)
        _reset["done"] = True
    except OSError:
        pass  # not Linux, or not allowed: peak_resident says it counts from the start


def peak_resident() -> tuple[int, str]:
    """The process's peak resident set in bytes since the last reset, and what it counts."""
    found = _peak_resident_kib()
    if found is not None and _reset["done"]:
        return found * 1024, "peak resident set of the process (VmHWM), reset after the matmul peak was measured"
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak resident set of the process since it began (getrusage)")


def _peak_resident_kib() -> int | None:
    try:
        lines = STATUS.read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("VmHWM:")), None)

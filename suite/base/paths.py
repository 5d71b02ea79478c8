"""Where things are: the checkout's folders (cases, containers, hostfiles, results, runs), and the folders
outside it that the environment may move (data, the user's cache, local stacks)."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "cases"
CONTAINERS = ROOT / "containers"
HOSTFILES = ROOT / "hostfiles"
RESULTS = ROOT / "reports" / "results"
RUNS = ROOT / "runs"


def data_dir() -> Path:
    """Where datasets live (one folder per dataset); DATA_DIR moves it, e.g. to a parallel filesystem."""
    return Path(os.environ.get("DATA_DIR") or ROOT / "data")


def cache_home() -> Path:
    """The user's cache folder for the suite, outside every checkout."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hpc-dl-bench"


def stack_home() -> Path:
    """Where local stacks live: outside the checkout, shared by every checkout of the user."""
    if os.environ.get("SUITE_STACK_HOME"):
        return Path(os.environ["SUITE_STACK_HOME"])
    return cache_home() / "stacks"

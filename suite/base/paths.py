"""Where things are: the checkout's folders (cases, containers, hostfiles, results, runs), and the folders
outside it that the environment may move (data, the user's cache, local stacks); and whether a folder where
results go can be written, asked before the work that fills it."""

import argparse
import os
import tempfile
from pathlib import Path

from suite.base.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "cases"
CONTAINERS = ROOT / "containers"
HOSTFILES = ROOT / "hostfiles"
RESULTS = ROOT / "reports" / "results"
RUNS = ROOT / "runs"


def given(text: str) -> Path:
    """A path option's value (argparse's type): an empty one is refused, for it would mean the current folder
    (a results folder there puts its pages in the folder above)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (leave the option out for its default)")
    return Path(text)


def unwritable(folder: Path, try_a_file: bool = True) -> str | None:
    """Why nothing can be written in `folder`, or None. Where it is not there yet, the nearest folder above it that
    is stands for it (the folder is made there). Its permissions first; then, with try_a_file, a file made and
    removed there (without a name where the kernel allows), for what permissions cannot tell: a read-only or pseudo
    filesystem, root on a root-squashed share. It leaves nothing, and makes no folder another run could see
    come and go."""
    folder = Path(folder).absolute()
    try:
        there = next(p for p in (folder, *folder.parents) if p.exists() or p.is_symlink())
    except PermissionError as exc:
        return f"{exc.filename or folder} cannot be reached by this user (a folder above it may not be entered)"
    if not there.is_dir():
        return f"{there} is not a folder"
    if not os.access(there, os.W_OK | os.X_OK):
        return f"{there} may not be written by this user"
    if try_a_file:
        try:
            with tempfile.TemporaryFile(dir=there):
                pass
        except OSError as exc:
            return f"no file can be made in {there}: {exc.strerror or exc}"
    return None


def refuse_unwritable(folder: Path, what: str, try_a_file: bool = True) -> None:
    """UsageError (one line, exit 2) where nothing can be written in `folder`, which `what` names (unwritable)."""
    problem = unwritable(folder, try_a_file)
    if problem:
        raise UsageError(f"{what} {folder}: nothing can be written there: {problem}")


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

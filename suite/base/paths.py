"""Where things are: the checkout's folders (cases, containers, hostfiles, results, runs), and the folders
outside it that the environment may move (data, the user's cache, local stacks)."""

import contextlib
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


def unwritable(folder: Path) -> str | None:
    """Why nothing can be written in `folder` (it, or the nearest of its parents that is there, is not a folder or
    may not be written), or None; it creates nothing."""
    folder = Path(folder).absolute()
    try:
        there = next(p for p in (folder, *folder.parents) if p.exists() or p.is_symlink())
    except PermissionError as exc:
        return f"{exc.filename or folder} cannot be reached by this user (a folder above it may not be entered)"
    if not there.is_dir():
        return f"{there} is not a folder"
    if not os.access(there, os.W_OK | os.X_OK):
        return f"{there} may not be written by this user"
    return None


def unwritable_made(folder: Path) -> str | None:
    """Why `folder` could not be made (with its parents) and a file written in it, or None: what unwritable cannot
    tell from permissions (a read-only or pseudo filesystem, root on a root-squashed share). It leaves nothing:
    the file goes at once, the folders it made after it."""
    folder, made = Path(folder).absolute(), []
    try:
        made = [p for p in (folder, *folder.parents) if not p.exists()]  # the deepest first
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return f"{exc.strerror or exc} ({exc.filename or folder})"
    finally:
        for path in made:
            with contextlib.suppress(OSError):  # not made after all, or filled meanwhile by another run
                path.rmdir()
    return None


def refuse_unwritable(folder: Path, what: str, make: bool) -> None:
    """UsageError (one line, exit 2) where nothing can be written in `folder`, which `what` names; make: by making
    it and a file in it too (leaving nothing), else by its permissions alone (a dry run)."""
    problem = unwritable(folder) or (unwritable_made(folder) if make else None)
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

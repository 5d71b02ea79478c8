"""The local stacks kept under the stack home (suite/stacks/install.py builds them): each folder's size, when it was
built and last used, and whether a recipe of this checkout made it; and their removal. Every checkout of a user
shares the home, and a record's stack is found again by its recipe, so nothing is removed that this checkout's
recipes make or that was used within the days given. Last use: the latest time of the folder, its marker and
its `.lock` file, which every run that takes the stack opens for writing (install.ensure_installed)."""

import fcntl
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.stacks.install import MARKER, lock_of
from suite.stacks.recipes import FLAVOURS, described_flavours

DAY_S = 86400


@dataclass(frozen=True)
class KeptStack:
    prefix: Path
    info: dict  # the marker: {} where the build never finished
    size_bytes: int
    last_used: float
    of_this_checkout: bool

    @property
    def lock(self) -> Path:
        return lock_of(self.prefix)


def recipe_keys() -> set[tuple[str, str, str]]:
    """(stack, flavour, recipe prefix) of every flavour this checkout describes, as folder names carry them."""
    return {(f.stack.name, f.name, f.recipe_sha256[:16]) for f in described_flavours()}


def key_of(folder: Path) -> tuple[str, str, str] | None:
    """A stack folder's (stack, flavour, recipe prefix): `<stack>-<flavour>-<python>-<machine>-<recipe16>`."""
    parts = folder.name.split("-")
    for at in range(1, len(parts) - 3):
        if parts[at] in FLAVOURS:
            return "-".join(parts[:at]), parts[at], parts[-1]
    return None


def kept_stacks(home: Path | None = None) -> list[KeptStack]:
    home = home or paths.stack_home()
    keys = recipe_keys()
    found = []
    for folder in sorted(p for p in home.glob("*") if p.is_dir()):
        key = key_of(folder)
        if key is None:
            continue
        used = max(p.stat().st_mtime for p in (folder, lock_of(folder), folder / MARKER) if p.exists())
        found.append(KeptStack(folder, _marker(folder), _size(folder), used, key in keys))
    return found


def removable(stacks: list[KeptStack], unused_days: float, now: float | None = None) -> list[KeptStack]:
    """Those no recipe of this checkout makes and not used for `unused_days` days."""
    now = time.time() if now is None else now
    return [s for s in stacks if not s.of_this_checkout and now - s.last_used >= unused_days * DAY_S]


def remove(stack: KeptStack) -> bool:
    """Removes the folder and its lock file, unless an install holds the lock now (False)."""
    with open(stack.lock, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(stack.prefix, ignore_errors=True)
        stack.lock.unlink(missing_ok=True)
    return True


def listing(stacks: list[KeptStack]) -> list[str]:
    """A line per stack (name, size, built, last used, whose recipe) and one of the total."""
    lines = []
    for s in stacks:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.last_used))
        mine = "this checkout" if s.of_this_checkout else "another recipe"
        lines.append(f"  {s.prefix.name}  {gib(s.size_bytes)}  built {s.info.get('built_at', 'unfinished')}  "
                     f"last used {used}  {mine}")
    return [*lines, f"{len(stacks)} stack(s), {gib(sum(s.size_bytes for s in stacks))} in all"]


def remove_unused(stacks: list[KeptStack], unused_days: float) -> list[str]:
    """Removes the removable stacks; a line per stack removed or kept, and one of the space freed."""
    lines, freed = [], 0
    for s in removable(stacks, unused_days):
        if remove(s):
            freed += s.size_bytes
            lines.append(f"removed {s.prefix.name} ({gib(s.size_bytes)})")
        else:
            lines.append(f"kept {s.prefix.name}: an install holds its lock now")
    return [*lines, f"freed {gib(freed)}"]


def gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"


def _marker(folder: Path) -> dict:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def _size(folder: Path) -> int:
    """Bytes on disk (hard links counted once)."""
    seen, total = set(), 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total

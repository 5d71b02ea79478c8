"""A stack's locks as the suite reads them: every requirement `name==version [; marker]` with the sha256
hashes of its files, anything else refused naming its line; and which of them pip installs on an interpreter
and processor (suite/stacks/lock_targets.py: which ones a lock covers)."""

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement

from suite.base.errors import UsageError
from suite.stacks.lock_targets import Target

HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class LockPin:
    """One requirement of a lock: `name==version [; marker]` with the hashes of its files."""

    name: str
    version: str
    marker: str
    hashes: tuple[str, ...]

    def applies(self, target: Target | None = None) -> bool:
        """Whether pip installs it on the target (None: the running interpreter)."""
        return not self.marker or Marker(self.marker).evaluate(target.environment() if target else None)


def lock_entries(lock: Path) -> list[LockPin]:
    """Every requirement of a lock, each `name==version [; marker] --hash=sha256:...`; anything else
    (a range, a missing or malformed hash) is refused naming its line."""
    entries = []
    logical, first = "", 0
    for lineno, raw in enumerate(lock.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not logical:
            first = lineno
        logical += " " + line.removesuffix("\\").strip()
        if line.endswith("\\"):
            continue
        text, logical = logical.strip(), ""
        if text:
            entries.append(_lock_entry(text, f"{lock}:{first}"))
    return entries


def _lock_entry(text: str, where: str) -> LockPin:
    requirement, _, options = text.partition(" --hash=")
    hashes = [HASH.match(f) for f in f"--hash={options}".split()] if options else [None]
    try:
        req = Requirement(requirement)
        (spec,) = req.specifier
    except (InvalidRequirement, ValueError):
        spec = req = None
    if not req or spec.operator != "==" or "*" in spec.version or not all(hashes):
        raise UsageError(f"{where}: '{text[:80]}' is not pinned as 'name==version [; marker] "
                         "--hash=sha256:<64 hex>' (every line of a lock must be)")
    return LockPin(req.name, spec.version, str(req.marker or ""), tuple(h.group(1) for h in hashes))


def lock_pins(lock: Path, target: Target | None = None) -> dict[str, str]:
    """name -> version of what the lock installs on the target (None: the running interpreter)."""
    return {pin.name.lower(): pin.version for pin in lock_entries(lock) if pin.applies(target)}

"""Which interpreters and processors a lock covers. `make locks` (tools/make-locks.py) writes in each
lock's header the targets (CPython X.Y on Linux x86_64 or aarch64) for which every pin has a file, one
`# not covered:` line for each other target naming the packages that publish none, and beside the
lock a `.files` list of the file of every hash. A stack is built only with an interpreter its lock
covers; the tests check the coverage against the files' wheel tags."""

import functools
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

FILES_SUFFIX = ".files"
COVERS = re.compile(r"^# covers: (.*?) \(CPython on Linux, glibc >= (\d+\.\d+)\)$", re.M)
NOT_COVERED = re.compile(r"^# not covered: (\S+): (.*)$", re.M)


@dataclass(frozen=True)
class Target:
    python: str  # "3.11"
    machine: str  # platform.machine(): "x86_64", "aarch64"

    @property
    def key(self) -> str:
        return f"{self.python}-{self.machine}"

    @classmethod
    def parse(cls, key: str) -> "Target":
        python, _, machine = key.partition("-")
        return cls(python, machine)

    def environment(self) -> dict[str, str]:
        """The values of PEP 508 markers on this target (what pip evaluates a lock's markers with)."""
        return {"python_version": self.python, "python_full_version": f"{self.python}.0",
                "implementation_version": f"{self.python}.0", "platform_machine": self.machine,
                "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "platform_release": "", "platform_version": "", "extra": ""}


def here() -> Target | None:
    """The target of the running interpreter; None where it is not CPython on Linux."""
    if sys.implementation.name != "cpython" or not sys.platform.startswith("linux"):
        return None
    return Target(f"{sys.version_info.major}.{sys.version_info.minor}", platform.machine())


@functools.cache
def target_tags(target: Target, glibc: str) -> frozenset[Tag]:
    """Every wheel tag pip accepts on the target with at least this glibc."""
    major, minor = (int(x) for x in target.python.split("."))
    newest = int(glibc.split(".")[1])
    arch = target.machine
    legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5} if arch == "x86_64" else {"manylinux2014": 17}
    platforms = [*(f"manylinux_2_{m}_{arch}" for m in range(newest, 4, -1)),
                 *(f"{name}_{arch}" for name, m in legacy.items() if m <= newest), f"linux_{arch}"]
    version = (major, minor)
    return frozenset([*cpython_tags(version, platforms=platforms), *compatible_tags(version, platforms=platforms)])


def files_cover(filenames, target: Target, glibc: str) -> bool:
    """Whether one of the files is a wheel that installs on the target."""
    tags = target_tags(target, glibc)
    return any(name.endswith(".whl") and parse_wheel_filename(name)[3] & tags for name in filenames)


@dataclass(frozen=True)
class Coverage:
    covered: tuple[Target, ...]
    glibc: str
    not_covered: dict  # target key -> what lacks a file for it

    def keys(self) -> str:
        return " ".join(t.key for t in self.covered) or "nothing"


def read_coverage(lock: Path) -> Coverage | None:
    """The coverage a lock's header states; None for a lock without one (written by hand)."""
    text = lock.read_text()
    covers = COVERS.search(text)
    if not covers:
        return None
    covered = tuple(Target.parse(k) for k in covers.group(1).split() if k != "nothing")
    return Coverage(covered, covers.group(2), dict(NOT_COVERED.findall(text)))


def listed_files(lock: Path) -> dict[str, str]:
    """sha256 -> file name of every hash in the lock, as `make locks` listed them beside it."""
    lines = Path(f"{lock}{FILES_SUFFIX}").read_text().splitlines()
    return {sha: name for sha, name in (line.split(maxsplit=1) for line in lines if line and not line.startswith("#"))}


def glibc_here() -> str | None:
    name, version = platform.libc_ver()
    return version if name == "glibc" and version else None


def uncovered_reason(coverage: Coverage, target: Target | None, glibc: str | None) -> str:
    """Why the lock cannot install on this target ('' where it can)."""
    if target is None:
        return f"{sys.implementation.name} on {sys.platform} (the locks are for CPython on Linux)"
    if target not in coverage.covered:
        lacking = coverage.not_covered.get(target.key, "not among the targets it was made for")
        return f"CPython {target.python} on {target.machine} ({lacking})"
    if glibc and tuple(map(int, glibc.split("."))) < tuple(map(int, coverage.glibc.split("."))):
        return f"glibc {glibc} (its files need glibc >= {coverage.glibc})"
    return ""

"""A framework stack as the suite builds it: containers/<stack>/ holds the pinned locks (every package with
its hashes; suite/stacks/locks.py reads them), where pip alone cannot build the stack a post-install.sh run after
the lock is installed, and container.toml, which describes each flavour (cpu, cuda): its lock, the extra index its
wheels come from, the build steps before post-install.sh, and for images the base and system packages. The same
flavour builds the local virtual environment made here (suite/stacks/install.py, `local` runtime) and the
container images (suite/stacks/images.py), so the two cannot drift."""

import hashlib
import json
import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.instack.allreduce_sweep import APIS as COLLECTIVES
from suite.stacks.build_needs import NEEDS
from suite.stacks.locks import lock_entries, lock_pins

FLAVOURS = ("cpu", "cuda")
DESCRIPTION = "container.toml"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
KEYS = {"base", "base_source", "python", "lock", "pip_extra_index", "apt", "build_env", "build_path", "prepare",
        "smoke", "check_build", "system_site_packages", "example_case", "no_local"}
# the stack's own, at the top of container.toml only: no flavour changes them
STACK_KEYS = {"collective", "build_needs"}


@dataclass(frozen=True)
class Stack:
    name: str
    dir: Path
    # the collective of the stack's framework that the interconnect check times (suite/instack/allreduce_sweep.py's
    # --api), as the top of container.toml names it (load_stack reads it); None where it names none
    collective: str | None = None
    # what post-install.sh needs of a host that builds the stack locally (suite/stacks/build_needs.py's NEEDS)
    build_needs: tuple[str, ...] = ()

    @property
    def lock(self) -> Path:
        return self.dir / "requirements.lock"

    @property
    def post_install(self) -> Path | None:
        script = self.dir / "post-install.sh"
        return script if script.exists() else None

    def post_install_inputs(self) -> list[Path]:
        """post-install.sh and what it reads: the folder's scripts (those it sources too), its locks other than
        the stack's (sdist.lock) and its patches; nothing where there is no post-install.sh."""
        if not self.post_install:
            return []
        return [*sorted(p for p in self.dir.glob("*.lock") if p != self.lock), *sorted(self.dir.glob("*.sh")),
                *sorted((self.dir / "patches").glob("*"))]

    def recipe_files(self) -> list[Path]:
        """Everything of the stack folder a build reads besides a flavour's own lock."""
        return [self.lock, *self.post_install_inputs()]

    @property
    def lock_sha256(self) -> str:
        return hashlib.sha256(self.lock.read_bytes()).hexdigest()

    @property
    def recipe_sha256(self) -> str:
        return files_sha256(self.dir, self.recipe_files())


def files_sha256(root: Path, files: list[Path], extra: bytes = b"") -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    digest.update(extra)
    return digest.hexdigest()


@dataclass(frozen=True)
class Flavour:
    """One build of a stack (cpu, cuda), as container.toml describes it: a local environment here,
    or an image."""

    stack: Stack
    name: str
    lock: str = "requirements.lock"  # relative to the stack folder
    base: str = ""
    base_source: str = ""
    python: str = "python3"
    smoke: str = ""
    example_case: str = ""
    pip_extra_index: str = ""  # where wheels that are not on PyPI are found (torch's CPU build)
    apt: tuple[str, ...] = ()
    build_env: dict = field(default_factory=dict)  # the image's: what its base provides (CUDA, MPI)
    build_path: tuple[str, ...] = ()
    prepare: tuple[str, ...] = ()  # shell lines before post-install.sh, local and image builds alike
    check_build: bool = False
    system_site_packages: bool = False
    no_local: str = ""  # why this flavour exists as an image only (empty: it builds here too)

    @property
    def id(self) -> str:
        return f"{self.stack.name}/{self.name}"

    @property
    def lock_path(self) -> Path:
        return self.stack.dir / self.lock

    @property
    def lock_sha256(self) -> str:
        return hashlib.sha256(self.lock_path.read_bytes()).hexdigest()

    @property
    def base_pinned(self) -> bool:
        return bool(DIGEST.search(self.base))

    @property
    def recipe_sha256(self) -> str:
        """The flavour's lock, the stack's other locks, post-install.sh, patches and the settings a
        local build reads: a change to any of them makes a new environment."""
        files = sorted({*self.stack.recipe_files(), self.lock_path})
        settings = {k: asdict(self)[k] for k in ("name", "pip_extra_index", "prepare", "system_site_packages")}
        return files_sha256(self.stack.dir, files, json.dumps(settings, sort_keys=True).encode())

    def extra_index_builds(self) -> tuple[tuple[str, str], ...]:
        """(name, version) of the builds the lock pins for this interpreter with a local version (torch
        2.13.0+cpu): the flavour's extra index publishes them, the public index does not."""
        return tuple((p.name, p.version) for p in lock_entries(self.lock_path) if "+" in p.version and p.applies())

    def locks(self) -> list[tuple[Path, bool]]:
        """Every lock a build installs from: (path, as sdists?): the flavour's lock (wheels), then the
        stack's other locks (sdists its post-install builds)."""
        others = [p for p in sorted(self.stack.dir.glob("*.lock")) if p.name != "requirements.lock"]
        return [(self.lock_path, False), *((p, True) for p in others)]


def load_flavour(stack: Stack, name: str) -> Flavour:
    path = stack.dir / DESCRIPTION
    if name not in FLAVOURS:
        raise UsageError(f"unknown flavour '{name}' (known: {', '.join(FLAVOURS)})")
    if not path.exists():
        if name == "cpu":  # a stack without images: its lock, built here
            return Flavour(stack, name)
        raise UsageError(f"stack {stack.name} has no container description ({path}), so no {name} flavour")
    spec = tomllib.loads(path.read_text())
    merged = {k: v for k, v in spec.items() if not isinstance(v, dict) and k not in STACK_KEYS} | spec.get(name, {})
    unknown = set(merged) - KEYS
    if unknown or name not in spec:
        raise UsageError(f"{path}: " + (f"unknown keys {sorted(unknown)}" if unknown else f"no [{name}] table"))
    if "@sha256:" not in merged.get("base", ""):
        raise UsageError(f"{path} [{name}]: base must be pinned by digest (IMAGE@sha256:...), "
                         f"got {merged.get('base')!r}")
    if '"' in merged.get("smoke", ""):
        raise UsageError(f"{path} [{name}]: smoke must not contain double quotes (it is run as python -c \"...\")")
    tuples = {k: tuple(merged[k]) for k in ("apt", "build_path", "prepare") if k in merged}
    return Flavour(stack=stack, name=name, **{**merged, **tuples})


def described_flavours() -> list[Flavour]:
    stacks = sorted(p.parent.name for p in paths.CONTAINERS.glob(f"*/{DESCRIPTION}"))
    return [load_flavour(load_stack(s), f) for s in stacks for f in FLAVOURS]



def load_stack(name: str) -> Stack:
    stack_dir = paths.CONTAINERS / name
    if not (stack_dir / "requirements.lock").exists():
        known = sorted(p.parent.name for p in paths.CONTAINERS.glob("*/requirements.lock"))
        raise UsageError(f"unknown stack '{name}' (known stacks: {', '.join(known)})")
    for lock in stack_dir.glob("**/*.lock"):
        lock_pins(lock)
    return Stack(name, stack_dir, *described_top(stack_dir / DESCRIPTION))


def described_top(path: Path) -> tuple[str | None, tuple[str, ...]]:
    """The `collective` and `build_needs` at the top of a container.toml (None and () without them); a
    collective the interconnect check does not know, or a need suite/stacks/build_needs.py cannot look for, is
    refused here, before anything runs."""
    top = tomllib.loads(path.read_text()) if path.exists() else {}
    name, needs = top.get("collective"), tuple(top.get("build_needs", ()))
    if name is not None and name not in COLLECTIVES:
        raise UsageError(f"{path}: collective {name!r} is not one the interconnect check knows "
                         f"({', '.join(COLLECTIVES)})")
    if unknown := [need for need in needs if need not in NEEDS]:
        raise UsageError(f"{path}: build_needs {unknown} are not ones the suite can look for ({', '.join(NEEDS)})")
    return name, needs

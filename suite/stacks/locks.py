"""Framework stacks: containers/<stack>/ holds the pinned locks (every package with its hashes), where
pip alone cannot build the stack a post-install.sh run after the lock is installed, and
container.toml, which describes each flavour (cpu, cuda): its lock, the extra index its wheels come
from, the build steps before post-install.sh, and for images the base and system packages. The same
flavour builds the local virtual environment made here (`local` runtime) and the container images
(suite/stacks/images.py), so the two cannot drift."""

import fcntl
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement

from suite.base import paths
from suite.base.errors import UsageError
from suite.base.jsonfile import write_json_atomic
from suite.stacks import lock_targets, wheelhouse
from suite.stacks.lock_targets import Target

MARKER = "suite-stack.json"
FACTS = "suite-facts.json"
FLAVOURS = ("cpu", "cuda")
DESCRIPTION = "container.toml"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
KEYS = {"base", "base_source", "python", "lock", "pip_extra_index", "apt", "build_env", "build_path", "prepare",
        "smoke", "check_build", "system_site_packages", "example_case", "no_local"}


@dataclass(frozen=True)
class Stack:
    name: str
    dir: Path

    @property
    def lock(self) -> Path:
        return self.dir / "requirements.lock"

    @property
    def post_install(self) -> Path | None:
        script = self.dir / "post-install.sh"
        return script if script.exists() else None

    def recipe_files(self) -> list[Path]:
        """Everything of the stack folder a build reads besides a flavour's own lock."""
        extra = [self.post_install] if self.post_install else []
        return [*sorted(self.dir.glob("*.lock")), *extra, *sorted((self.dir / "patches").glob("*"))]

    @property
    def lock_sha256(self) -> str:
        return hashlib.sha256(self.lock.read_bytes()).hexdigest()

    @property
    def recipe_sha256(self) -> str:
        return _files_sha256(self.dir, self.recipe_files())


def _files_sha256(root: Path, files: list[Path], extra: bytes = b"") -> str:
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
        return _files_sha256(self.stack.dir, files, json.dumps(settings, sort_keys=True).encode())

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
    merged = {k: v for k, v in spec.items() if not isinstance(v, dict)} | spec.get(name, {})
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


@dataclass(frozen=True)
class InstalledStack:
    flavour: Flavour
    prefix: Path
    info: dict

    @property
    def stack(self) -> Stack:
        return self.flavour.stack

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    def tool(self, name: str) -> Path:
        return self.prefix / "bin" / name


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


def load_stack(name: str) -> Stack:
    stack_dir = paths.CONTAINERS / name
    if not (stack_dir / "requirements.lock").exists():
        known = sorted(p.parent.name for p in paths.CONTAINERS.glob("*/requirements.lock"))
        raise UsageError(f"unknown stack '{name}' (known stacks: {', '.join(known)})")
    stack = Stack(name, stack_dir)
    for lock in stack_dir.glob("**/*.lock"):
        lock_pins(lock)
    return stack


def local_flavour(stack: Stack, requested: str | None, gpus: int | None = None, log=print) -> Flavour:
    """The flavour a local build of the stack uses: the one asked for, else the one that fits this
    host (suite.inputs.host_gpus.pick_flavour); a flavour that exists as an image only is refused when asked
    for, and stands back for cpu when it was only this host's fit."""
    from suite.inputs.host_gpus import pick_flavour

    name = pick_flavour(requested, gpus)
    asked = bool(requested)
    if not (stack.dir / DESCRIPTION).exists() and not asked:
        name = "cpu"  # a stack without images has its lock only
    flavour = load_flavour(stack, name)
    if not flavour.no_local:
        return flavour
    if asked:
        raise UsageError(f"stack {stack.name} has no local {name} flavour: {flavour.no_local} (FLAVOUR=cpu runs it "
                         "here on the CPU)")
    log(f"note: stack {stack.name}: {flavour.no_local}; installing its cpu flavour here")
    return load_flavour(stack, "cpu")


def local_prefix(flavour: Flavour) -> Path:
    """The stack's folder, one per recipe, interpreter version and processor (runners of two Pythons
    sharing a stack home each get their own)."""
    version = f"py{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = version if sys.implementation.name == "cpython" else f"{sys.implementation.name}-{version}"
    name = f"{flavour.stack.name}-{flavour.name}-{interpreter}-{platform.machine()}-{flavour.recipe_sha256[:16]}"
    return paths.stack_home() / name


def require_covered(flavour: Flavour, target: Target | None, glibc: str | None) -> None:
    """Refuses, before anything is built, an interpreter or processor for which the flavour's lock
    has no files (its header says what it covers), naming what it covers and the ways on."""
    coverage = lock_targets.read_coverage(flavour.lock_path)
    reason = lock_targets.uncovered_reason(coverage, target, glibc) if coverage else ""
    if not reason:
        return
    machine = target.machine if target else platform.machine()
    ways = []
    if target not in coverage.covered:  # the interpreter or processor; else an older glibc
        pythons = [t.python for t in coverage.covered if t.machine == machine]
        best = flavour.python.removeprefix("python") if flavour.python.removeprefix("python") in pythons else None
        if pythons:
            ways.append(f"a covered interpreter ({', '.join('python' + p for p in pythons)}: e.g. "
                        f"BOOTSTRAP_PYTHON=python{best or pythons[-1]}, the runner builds its stacks with its own)")
        ways += [f"FLAVOUR={other.name} (its lock covers {target.key})" for other in _other_local_flavours(flavour)
                 if target and target in (lock_targets.read_coverage(other.lock_path) or coverage).covered]
    ways.append("the site's own framework (RUNTIME=modules)")
    if machine == "x86_64":
        ways.append("an image (RUNTIME=apptainer or docker)")
    where = flavour.lock_path.relative_to(paths.CONTAINERS.parent)
    raise UsageError(f"stack {flavour.id}: {where} covers CPython {coverage.keys()}, not {reason}; "
                     f"use {', or '.join(ways)}")


def _other_local_flavours(flavour: Flavour) -> list[Flavour]:
    if not (flavour.stack.dir / DESCRIPTION).exists():
        return []
    others = [load_flavour(flavour.stack, name) for name in FLAVOURS if name != flavour.name]
    return [other for other in others if not other.no_local]


def find_installed(flavour: Flavour) -> InstalledStack | None:
    """The finished local environment of this exact recipe, or None. A folder without the marker is
    an interrupted install and does not count."""
    prefix = local_prefix(flavour)
    try:
        info = json.loads((prefix / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if info.get("recipe_sha256") != flavour.recipe_sha256:
        return None
    return InstalledStack(flavour, prefix, info)


def ensure_installed(stack: Stack | Flavour, log=print, wheels: Path | str | None = None) -> InstalledStack:
    """Install a flavour (a Stack: the flavour that fits this host) once per recipe; concurrent
    callers wait for the one that installs. With `wheels`, pip reads that folder alone."""
    flavour = stack if isinstance(stack, Flavour) else local_flavour(stack, None, log=log)
    require_covered(flavour, lock_targets.here(), lock_targets.glibc_here())
    prefix = local_prefix(flavour)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.with_name(prefix.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = find_installed(flavour)
        if installed:
            return installed
        if prefix.exists():
            log(f"stack {flavour.id}: removing an unfinished install at {prefix}")
            shutil.rmtree(prefix)
        where = f"from the wheel folder {wheels}" if wheels else "from the package index"
        log(f"stack {flavour.id}: installing into {prefix} {where} (once per lock; this takes a few minutes)")
        started = time.time()
        _build(flavour, prefix, wheels, log)
        info = {
            "stack": flavour.stack.name,
            "flavour": flavour.name,
            "recipe_sha256": flavour.recipe_sha256,
            "lock_sha256": flavour.lock_sha256,
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.time() - started, 1),
            "installed_from": str(Path(wheels).resolve()) if wheels else "index",
            "packages": _frozen_packages(prefix),
            "facts": _read_facts(prefix),
        }
        write_json_atomic(prefix / MARKER, info)
        log(f"stack {flavour.id}: ready after {info['build_seconds']:.0f} s")
        return InstalledStack(flavour, prefix, info)


def install_argv(flavour: Flavour, python: str, wheels: Path | str | None = None, log=print) -> list[str]:
    """The pip command that installs the flavour's lock: hash-checked, no resolution beyond it, from
    where suite.stacks.wheelhouse says (the image build's %post says the same)."""
    try:
        where = wheelhouse.sources(flavour.pip_extra_index, wheels, log, needs=flavour.extra_index_builds())
    except RuntimeError as exc:
        raise RuntimeError(f"stack {flavour.id}: {exc}") from None
    return [python, "-m", "pip", "install", "--quiet", "--require-hashes", "--no-deps", *where,
            "-r", str(flavour.lock_path)]


def post_install_script(flavour: Flavour, stack_dir: str, prefix: str, facts: str) -> str:
    """The shell that builds what pip cannot: the flavour's prepare lines, then post-install.sh, with
    STACK_DIR, STACK_PREFIX and SUITE_FACTS_FILE set (local and image builds alike)."""
    q = shlex.quote
    exports = f"export STACK_DIR={q(stack_dir)} STACK_PREFIX={q(prefix)} SUITE_FACTS_FILE={q(facts)}"
    return "\n".join([exports, *flavour.prepare, f"bash {q(stack_dir + '/post-install.sh')}"])


def _build(flavour: Flavour, prefix: Path, wheels, log) -> None:
    install = install_argv(flavour, str(prefix / "bin" / "python"), wheels, log)  # may refuse: nothing made yet
    venv = ["--system-site-packages"] if flavour.system_site_packages else []
    subprocess.run([sys.executable, "-m", "venv", *venv, str(prefix)], check=True)
    _checked_run(install, flavour, wheels, pip=True)
    if flavour.stack.post_install:
        env = dict(os.environ, PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                   **wheelhouse.wheel_env(wheels))
        script = post_install_script(flavour, str(flavour.stack.dir), str(prefix), str(prefix / FACTS))
        with tempfile.TemporaryDirectory(prefix=f"{flavour.stack.name}-build-") as work:
            _checked_run(["bash", "-euo", "pipefail", "-c", script], flavour, wheels, cwd=work, env=env)


UNREACHABLE = re.compile(r"No matching distribution|Could not find a version|NewConnectionError|Max retries exceeded|"
                         r"Temporary failure in name resolution|Network is unreachable")
MISMATCH = re.compile(r"^\s+(\S+==\S+) from (\S+?)(?: \(from [^\n]*\))?:\s*\n\s+Expected sha256 \S+"
                      r"(?:\n\s+Expected\s+or \S+)*\n\s+Got\s+([0-9a-f]{64})", re.M)


def _checked_run(argv: list[str], flavour: Flavour, wheels, pip: bool = False, **kwargs) -> None:
    """Runs a build step; a failure becomes one line saying what happened (for pip: a file whose hash
    the lock does not list, which one and which lock; an index that did not answer)."""
    result = subprocess.run(argv, **kwargs, **({"stderr": subprocess.PIPE, "text": True} if pip else {}))
    if pip and result.stderr:
        sys.stderr.write(result.stderr)
    if result.returncode == 0:
        return
    said = (result.stderr or "") if pip else ""
    if mismatch := MISMATCH.search(said):
        pin, url, got = mismatch.groups()
        file, where = url.split("#")[0].rsplit("/", 1)[-1], flavour.lock_path.relative_to(paths.CONTAINERS.parent)
        raise RuntimeError(f"stack {flavour.id}: pip got {file} for {pin}, whose sha256 {got} {where} does not "
                           "list: the index serves a file this lock was not made with (a mirror's "
                           "own build, or another build of the same release); `make locks` against the index the "
                           "stack installs from, or WHEELS=<a folder `make wheels` filled from the right one>")
    hint = ""
    if not wheels and (UNREACHABLE.search(said) or not pip):
        hint = (" (a machine without the package index: fill a wheel folder where there is one, `make wheels`, and "
                "install from it with WHEELS=<folder>)")
    shown = " ".join(argv[:4]) if argv[0] != "bash" else "post-install.sh"
    raise RuntimeError(f"stack {flavour.id}: '{shown} ...' failed with exit {result.returncode}{hint}")


def _frozen_packages(prefix: Path) -> dict[str, str]:
    out = subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                         capture_output=True, text=True, check=True).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def _read_facts(prefix: Path) -> dict:
    try:
        return json.loads((prefix / FACTS).read_text())
    except (OSError, ValueError):
        return {}

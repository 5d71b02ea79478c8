"""The local stacks (`local` runtime, `suite install`): a flavour (suite/stacks/recipes.py) built here once
as a virtual environment, one folder per recipe, interpreter and processor under the stack home, marked finished
by MARKER; concurrent callers wait for the one that builds. An interpreter or processor the flavour's lock does not
cover is refused before anything is built; a failed build step is said in one line and what it made removed. The
pip command and the post-install shell are the image builds' too (suite/stacks/images.py)."""

import fcntl
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
from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.base.jsonfile import write_json_atomic
from suite.stacks import build_needs, lock_targets, wheelhouse
from suite.stacks.lock_targets import Target
from suite.stacks.recipes import DESCRIPTION, FLAVOURS, Flavour, Stack, load_flavour

MARKER = "suite-stack.json"
FACTS = "suite-facts.json"


@dataclass(frozen=True)
class InstalledStack:
    flavour: Flavour
    prefix: Path
    info: dict

    @property
    def stack(self) -> Stack:
        return self.flavour.stack

    def python_include(self) -> str:
        """Where the stack's Python keeps its headers (its base interpreter's, as the venv's own sysconfig says)."""
        return subprocess.run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                              capture_output=True, text=True, check=True).stdout.strip()

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    def tool(self, name: str) -> Path:
        return self.prefix / "bin" / name


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


def lock_of(prefix: Path) -> Path:
    """The file beside a stack's folder that its install holds and every run that takes the stack opens."""
    return prefix.with_name(prefix.name + ".lock")


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


def build_needs_lacking(flavour: Flavour) -> str | None:
    """What this host lacks of what the flavour's post-install.sh needs (its container.toml's build_needs: a
    compiler, patch, the Python headers), in one line; None where nothing is lacking."""
    needs = flavour.stack.build_needs if flavour.stack.post_install else ()
    missing = build_needs.lacking(needs)
    return build_needs.refusal(flavour.id, missing) if missing else None


def require_build_needs(flavour: Flavour) -> None:
    """Refuses, before anything is downloaded, a build that would fail for want of what it needs of the host."""
    if said := build_needs_lacking(flavour):
        raise UsageError(said)


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
    with open(lock_of(prefix), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = find_installed(flavour)
        if installed:
            return installed
        require_build_needs(flavour)
        if prefix.exists():
            log(f"stack {flavour.id}: removing an unfinished install at {prefix}")
            shutil.rmtree(prefix)
        where = f"from the wheel folder {wheels}" if wheels else "from the package index"
        log(f"stack {flavour.id}: installing into {prefix} {where} (once per lock; this takes a few minutes)")
        started = time.time()
        try:
            _build(flavour, prefix, wheels, log)
        except BaseException:
            shutil.rmtree(prefix, ignore_errors=True)  # an unfinished environment is only space (GBs with CUDA)
            raise
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
    offline = ("a machine without the package index: fill a wheel folder where there is one, `make wheels`, and "
               "install from it with WHEELS=<folder>")
    hint = ""
    if not pip:  # a build script: its own output, streamed above, has the cause
        hint = " (its output above says why)" if wheels else \
            f" (its output above says why: a compiler or toolkit missing, or, on {offline})"
    elif not wheels and UNREACHABLE.search(said):
        hint = f" ({offline})"
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

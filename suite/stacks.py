"""Framework stacks: containers/<stack>/ holds the pinned lock (requirements.lock, every package with
its hashes) and, where pip alone cannot build the stack, a post-install.sh run after the lock is
installed. The same files build the container images and the local virtual environments made here."""

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from suite import paths
from suite.errors import UsageError
from suite.jsonfile import write_json_atomic

MARKER = "suite-stack.json"


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
        """Everything the local build reads; a change to any of them makes a new environment."""
        extra = [self.post_install] if self.post_install else []
        return [*sorted(self.dir.glob("*.lock")), *extra, *sorted((self.dir / "patches").glob("*"))]

    @property
    def lock_sha256(self) -> str:
        return hashlib.sha256(self.lock.read_bytes()).hexdigest()

    @property
    def recipe_sha256(self) -> str:
        digest = hashlib.sha256()
        for path in self.recipe_files():
            digest.update(path.relative_to(self.dir).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()


@dataclass(frozen=True)
class InstalledStack:
    stack: Stack
    prefix: Path
    info: dict

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    def tool(self, name: str) -> Path:
        return self.prefix / "bin" / name


PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s]+)$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def lock_pins(lock: Path) -> dict[str, str]:
    """name -> version of a lock whose every requirement is `name==version --hash=sha256:...`;
    anything else (a range, a missing or malformed hash) is refused naming its line."""
    pins: dict[str, str] = {}
    logical, first = "", 0
    for lineno, raw in enumerate(lock.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not logical:
            first = lineno
        logical += " " + line.removesuffix("\\").strip()
        if line.endswith("\\"):
            continue
        fields, logical = logical.split(), ""
        if not fields:
            continue
        pin = PIN.match(fields[0])
        if not pin or len(fields) < 2 or not all(HASH.match(f) for f in fields[1:]):
            raise UsageError(f"{lock}:{first}: '{' '.join(fields)[:80]}' is not pinned as "
                             "'name==version --hash=sha256:<64 hex>' (every line of a lock must be)")
        pins[pin.group(1).lower()] = pin.group(2)
    return pins


def load_stack(name: str) -> Stack:
    stack_dir = paths.CONTAINERS / name
    if not (stack_dir / "requirements.lock").exists():
        known = sorted(p.parent.name for p in paths.CONTAINERS.glob("*/requirements.lock"))
        raise UsageError(f"unknown stack '{name}' (known stacks: {', '.join(known)})")
    stack = Stack(name, stack_dir)
    for lock in stack_dir.glob("*.lock"):
        lock_pins(lock)
    return stack


def local_prefix(stack: Stack) -> Path:
    return paths.stack_home() / f"{stack.name}-{stack.recipe_sha256[:16]}"


def find_installed(stack: Stack) -> InstalledStack | None:
    """The finished local environment of this exact recipe, or None. A folder without the marker is
    an interrupted install and does not count."""
    prefix = local_prefix(stack)
    try:
        info = json.loads((prefix / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if info.get("recipe_sha256") != stack.recipe_sha256:
        return None
    return InstalledStack(stack, prefix, info)


def ensure_installed(stack: Stack, log=print) -> InstalledStack:
    """Install the stack once per recipe; concurrent callers wait for the one that installs."""
    prefix = local_prefix(stack)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.with_name(prefix.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = find_installed(stack)
        if installed:
            return installed
        if prefix.exists():
            log(f"stack {stack.name}: removing an unfinished install at {prefix}")
            shutil.rmtree(prefix)
        log(f"stack {stack.name}: installing into {prefix} (once per lock; this takes a few minutes)")
        started = time.time()
        _build(stack, prefix)
        info = {
            "stack": stack.name,
            "recipe_sha256": stack.recipe_sha256,
            "lock_sha256": stack.lock_sha256,
            "python": sys.version.split()[0],
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.time() - started, 1),
            "packages": _frozen_packages(prefix),
            "facts": _read_facts(prefix),
        }
        write_json_atomic(prefix / MARKER, info)
        log(f"stack {stack.name}: ready after {info['build_seconds']:.0f} s")
        return InstalledStack(stack, prefix, info)


def _build(stack: Stack, prefix: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True)
    python = str(prefix / "bin" / "python")
    _checked_run([python, "-m", "pip", "install", "--quiet", "--require-hashes", "--no-deps", "-r", str(stack.lock)], stack)
    if stack.post_install:
        env = dict(os.environ, STACK_PREFIX=str(prefix), STACK_DIR=str(stack.dir),
                   SUITE_FACTS_FILE=str(prefix / "suite-facts.json"),
                   PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
        with tempfile.TemporaryDirectory(prefix=f"{stack.name}-build-") as work:
            _checked_run(["bash", str(stack.post_install)], stack, cwd=work, env=env)


def _checked_run(argv: list[str], stack: Stack, **kwargs) -> None:
    result = subprocess.run(argv, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"stack {stack.name}: '{' '.join(argv[:4])} ...' failed with exit {result.returncode}")


def _frozen_packages(prefix: Path) -> dict[str, str]:
    out = subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                         capture_output=True, text=True, check=True).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def _read_facts(prefix: Path) -> dict:
    try:
        return json.loads((prefix / "suite-facts.json").read_text())
    except (OSError, ValueError):
        return {}

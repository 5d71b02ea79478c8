"""Runtimes, launchers and schedulers are modules in their folder, found by name: adding one is adding
a file."""

import importlib
import pkgutil
from types import ModuleType

from suite.errors import UsageError

KINDS = {"runtimes": "runtime", "launchers": "launcher", "schedulers": "scheduler"}


def available(kind: str) -> list[str]:
    package = importlib.import_module(f"suite.{kind}")
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def load(kind: str, name: str) -> ModuleType:
    known = available(kind)
    if name not in known:
        raise UsageError(f"unknown {KINDS[kind]} '{name}' (known: {', '.join(known)})")
    return importlib.import_module(f"suite.{kind}.{name}")

"""Runs a stack from its local virtual environment, built from the stack's lock on first use."""

from collections.abc import Iterable
from pathlib import Path

from suite import paths
from suite.plan import StackEnv
from suite.stacks import Stack, ensure_installed, find_installed, load_stack, local_prefix


def prepare(stack: Stack, log=print, binds: Iterable[Path | str] = (), image_dir: Path | None = None) -> StackEnv:
    """binds and image_dir concern container runtimes; a local environment sees every folder."""
    installed = ensure_installed(stack, log)
    return StackEnv(
        runtime="local",
        bin_dir=str(installed.prefix / "bin"),
        env={"PYTHONPATH": str(paths.ROOT)},
        facts=installed.info.get("facts", {}),
        provenance={
            "stack": stack.name,
            "stack_lock_sha256": stack.lock_sha256,
            "stack_recipe_sha256": stack.recipe_sha256,
            "stack_location": str(installed.prefix),
            "stack_packages": installed.info.get("packages", {}),
            "runtime": "local",
            "image": None,
            "image_sha256": None,
        },
    )


def doctor_lines(cluster, stacks: list[str]) -> list[str]:
    lines = []
    for name in stacks:
        stack = load_stack(name)
        lines.append(f"ok: stack {name} built at {local_prefix(stack)}" if find_installed(stack) else
                     f"missing: stack {name} at {local_prefix(stack)} (built on first use, or now: make install "
                     f"CASE=<a case of it>)")
    return lines

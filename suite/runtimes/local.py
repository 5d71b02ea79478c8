"""Runs a stack from its local virtual environment, built on first use from the flavour of its lock
that fits the hosts (cuda where they have GPUs, cpu otherwise; FLAVOUR overrides), from the package
index or from a wheel folder (WHEELS, for machines without network)."""

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.plan import StackEnv, StackRequest
from suite.stacks.install import build_needs_lacking, ensure_installed, find_installed, local_flavour, local_prefix
from suite.stacks.recipes import load_stack


def prepare(want: StackRequest, log=print) -> StackEnv:
    """A local environment sees every folder: binds and image_dir concern container runtimes."""
    flavour = local_flavour(want.stack, want.flavour, want.gpus, log)
    installed = find_installed(flavour)
    if installed is None and not want.install:
        raise UsageError(f"stack {flavour.id} is not installed yet at {local_prefix(flavour)} (a real run installs "
                         f"it first; or now: make install CASE=<a case of it> FLAVOUR={flavour.name})")
    installed = installed or ensure_installed(flavour, log, want.wheels)
    return StackEnv(
        runtime="local",
        bin_dir=str(installed.prefix / "bin"),
        env={"PYTHONPATH": str(paths.ROOT)},
        facts=installed.info.get("facts", {}),
        python_include=installed.python_include(),
        provenance={
            "stack": flavour.stack.name,
            "stack_flavour": flavour.name,
            "stack_lock_sha256": flavour.lock_sha256,
            "stack_recipe_sha256": flavour.recipe_sha256,
            "stack_location": str(installed.prefix),
            "stack_packages": installed.info.get("packages", {}),
            "runtime": "local",
            "image": None,
            "image_sha256": None,
        },
    )


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    lines = []
    for name in stacks:
        chosen = local_flavour(load_stack(name), flavour, log=lambda m: None)
        where = local_prefix(chosen)
        if find_installed(chosen):
            lines.append(f"ok: stack {chosen.id} built at {where}")
            continue
        lines.append(f"missing: stack {chosen.id} at {where} (built on first use, or now: make install "
                     f"CASE=<a case of it> FLAVOUR={chosen.name}; without network: WHEELS=<folder of make wheels>)")
        if lacking := build_needs_lacking(chosen):
            lines.append(f"missing: {lacking}")
    return lines

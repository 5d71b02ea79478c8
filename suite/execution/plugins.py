"""Runtimes, launchers and schedulers are modules in their folder, found by name: adding one is adding
a file. What such a module must define, and the optional hooks it may define, is written below as one
Protocol per kind; `load` returns an object on which every hook exists (the module's own, else the
default written here), so the runner calls hooks without probing for them.

Settings a plugin reads from a cluster profile are declared by the plugin itself (`PROFILE`: one
table of the profile, named after the plugin, with typed keys and defaults), so the profile checker
and `doctor` loop over the plugins and nothing else is edited to add one."""

import importlib
import importlib.util
import pkgutil
import shutil
import string
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from suite.base.errors import UsageError
from suite.execution.plan import Launch, Plan, Process, ProcessResult, StackEnv, StackRequest
from suite.inputs.host_network import is_local
from suite.inputs.hostfiles import Host, World

KINDS = {"runtimes": "runtime", "launchers": "launcher", "schedulers": "scheduler"}
# Where plugins are looked for: suite/<kind>/ first; a test or a site may add folders of its own.
EXTRA_PATHS: dict[str, list[str]] = {kind: [] for kind in KINDS}


@dataclass(frozen=True)
class Setting:
    """One key of a plugin's table in a cluster profile: its type, default and meaning."""

    type: type
    default: Any = None
    help: str = ""
    fields: tuple[str, ...] = ()  # a template's placeholders, e.g. ("stack",) for {stack}; (): not a template


def template_problem(template: str, fields: tuple[str, ...]) -> str | None:
    """What is wrong with a template of a profile setting (a placeholder other than `fields`, a brace
    alone), or None: the profile checker asks this of every template, so `fill` never meets one."""
    known = f"known: {', '.join('{' + f + '}' for f in fields)}"
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"{exc} ({known}; a brace itself is written twice)"
    for _, name, spec, conversion in parts:
        if name is not None and (name not in fields or spec or conversion):
            placeholder = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            return f"unknown placeholder {placeholder} ({known})"
    return None


def fill(template: str, **values: str) -> str:
    """A template of a profile setting with its placeholders filled in (checked by template_problem)."""
    return template.format_map(values)


@dataclass(frozen=True)
class BatchJob:
    """A run point a scheduler may take over whole (SLURM outside an allocation: one batch job that
    runs `inner_argv`, the runner itself, for this point only). Plain data, no runner objects."""

    run_id: str
    case: str
    world: World
    inner_argv: tuple[str, ...]
    timeout_s: float
    stall_s: float
    repeat: int
    run_dir: Path
    profile: Any = None  # the cluster profile (suite.execution.clusters.Cluster) or None
    # Shell lines the job runs before the runner (the runtime's job_lines: loading a site's modules),
    # so that the job's own steps start where every process of the point starts.
    setup: tuple[str, ...] = ()


# A batch job its scheduler ended before the run did (SLURM's names: its time limit, scancel, a node failure ...):
# the scheduler fails the record saying so, with the state in execution.<scheduler>.state, and resume names it.
ENDED_BY_SCHEDULER = frozenset({"TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "DEADLINE", "BOOT_FAIL",
                                "OUT_OF_MEMORY"})


@dataclass(frozen=True)
class TakenOver:
    """What a scheduler that ran a point whole hands back: the record the point wrote (None when it
    wrote none, then `failure` says why), facts for the record's `execution`, and the hosts it ran
    on where the scheduler learnt them (None: the planned ones)."""

    record: dict | None
    failure: str | None
    execution: dict
    hostnames: list[str] | None = None


@runtime_checkable
class Runtime(Protocol):
    """Where a stack's programs come from: a local virtual environment, or a container image. A
    runtime that builds images (a container tool) says what with (IMAGES), owns its recipe file and
    its build; suite/stacks/images.py holds what every tool shares, and suite/runtimes/_image.py the
    prepare every image runtime shares."""

    name: str
    PROFILE: dict[str, Setting]
    IMAGES: str  # what it builds images with, in words ("apptainer", "a Docker engine"); "": none
    BUILD_PREFERENCE: int  # `make containers TOOL=auto` tries image runtimes in this order, lowest first
    BASES: tuple[str, ...]  # the bases it builds on: "pinned" (container.toml's digest), "debian" (made here)

    def prepare(self, want: StackRequest, log: Callable[[str], None]) -> StackEnv:
        """Make the stack usable (install it, find its image) and say how to run its programs; raise
        UsageError for what a user must fix (a missing image), RuntimeError/OSError for failures.
        The provenance it returns names the stack, its flavour, lock and packages (stack_packages:
        launchers and cases read framework versions from them)."""

    def doctor_lines(self, cluster, stacks: list[str], flavour: str | None) -> list[str]:
        """`ok: ...` / `missing: ...` lines: what this runtime needs on this machine for the stacks
        (flavour: as asked, None: what this host fits)."""

    def recipe(self, flavour):
        """The build file of a container flavour (suite.stacks.images.Flavour) as a suite.stacks.images.Recipe
        (its path under containers/<stack>/ and its text, rendered from the shared build steps);
        None where this runtime builds no images."""

    def build_problem(self) -> str | None:
        """Why this runtime cannot build images on this machine (one line), or None when it can."""

    def check_build(self, flavour, base: str) -> None:
        """Refuse (UsageError) an image it cannot build on that base, before anything starts."""

    def build_image(self, flavour, inputs, log: Callable[[str], None]) -> dict:
        """Build the image of a container flavour on the base and wheel folder of inputs
        (suite.stacks.images.BuildInputs) and return its metadata; UsageError where this runtime builds
        no images."""

    def cleanup(self, stack_env: StackEnv, log: Callable[[str], None]) -> None:
        """After each repetition: end what the runtime started for it and what outlived its processes
        (a container whose client process was killed)."""

    def job_lines(self, want: StackRequest) -> list[str]:
        """Shell lines a batch job runs before the runner (BatchJob.setup), e.g. `module load ...`:
        what every process of the point needs in its environment; cheap, reads nothing remote."""


@runtime_checkable
class Launcher(Protocol):
    """Which processes a case needs on which hosts, with which environment."""

    name: str

    def plan(self, launch: Launch) -> Plan:
        """The processes of one launch; plain data, nothing started."""

    def check(self, launch: Launch) -> None:
        """Refuse (UsageError) what depends only on the inputs, before anything starts."""


@runtime_checkable
class Scheduler(Protocol):
    """How the processes of a plan are started and ended on their hosts."""

    name: str
    PROFILE: dict[str, Setting]

    def execute(self, plan: Plan, log_dir: Path, timeout_s: float, stall_s: float | None,
                cluster=None) -> list[ProcessResult]:
        """Run the plan to its end; the first failure or a limit ends every process of it. Processes
        marked daemon (the telemetry samplers) are ended once the others have ended, never fail the
        job and get no ProcessResult (suite.schedulers.local.run_plan does this)."""

    def check(self, cluster, dry_run: bool) -> None:
        """Refuse (UsageError) bad profile settings, and missing commands unless dry_run."""

    def hosts(self, nodes: int) -> tuple[list[Host], str, str | None] | None:
        """(hosts, where they come from, cluster name) when the scheduler knows the hosts itself
        (an allocation); None: the hostfile's."""

    def take_over(self, job: BatchJob) -> TakenOver | None:
        """Run a whole point (a batch job) and say how it went; None: the runner runs it here."""

    def describe(self, plan: Plan, job: BatchJob) -> str:
        """For a dry run: how each process would be started."""

    def doctor_lines(self, cluster) -> list[str]:
        """`ok: ...` / `missing: ...` lines: commands, reachability of the hosts."""

    def placement(self, cluster) -> str:
        """How a process on a host that is not this machine is started: "srun", "ssh", or "local"
        (it is not: every host must be this machine). Launchers read it as Launch.placement."""

    def how_started(self, process: Process, cluster) -> str:
        """"srun", "ssh" or "local": how this process is started (the record keeps it per process)."""

    def execution_facts(self, cluster) -> dict | None:
        """Facts for the record's execution.<scheduler> about a point run here (e.g. the SLURM
        allocation it runs in); None: nothing to add."""

    def run_on_hosts(self, hosts: list[str], argv: tuple[str, ...], cluster) -> dict[str, str | None]:
        """The output of a short command (argv) on each host, started as this scheduler starts
        processes there; None where it cannot run now. The runner reads facts of the hosts this way
        before launch (their GPUs: suite/inputs/host_gpus.py)."""


class _Defaults:
    PROFILE: dict[str, Setting] = {}

    def doctor_lines(self, *args) -> list[str]:
        return []


class RuntimeDefaults(_Defaults):
    IMAGES = ""
    BUILD_PREFERENCE = 0
    BASES: tuple[str, ...] = ("pinned",)

    def recipe(self, flavour):
        return None

    def build_problem(self) -> str | None:
        return f"runtime {self.name} builds no images"

    def check_build(self, flavour, base: str) -> None:
        return None

    def build_image(self, flavour, inputs, log) -> dict:
        raise UsageError(f"runtime {self.name} builds no container images")

    def cleanup(self, stack_env, log) -> None:
        return None

    def job_lines(self, want) -> list[str]:
        return []


class LauncherDefaults(_Defaults):
    def check(self, launch: Launch) -> None:
        return None


class SchedulerDefaults(_Defaults):
    def check(self, cluster, dry_run: bool) -> None:
        return None

    def hosts(self, nodes: int):
        return None

    def take_over(self, job: BatchJob) -> TakenOver | None:
        return None

    def describe(self, plan: Plan, job: BatchJob) -> str:
        return "started as: each process directly on this machine"

    def placement(self, cluster) -> str:
        return "local"

    def how_started(self, process: Process, cluster) -> str:
        return self.placement(cluster)

    def execution_facts(self, cluster) -> dict | None:
        return None

    def run_on_hosts(self, hosts: list[str], argv: tuple[str, ...], cluster) -> dict[str, str | None]:
        """Hosts that are this machine run it here; others cannot be reached without a scheduler."""
        return {host: output_here(argv) if is_local(host) else None for host in hosts}


def output_here(argv, timeout_s: float = 60) -> str | None:
    """What a short command prints on this machine; None when it cannot run or exits non-zero."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def run_on_first_host(want: StackRequest, argv: tuple[str, ...]) -> str | None:
    """What a short command prints on the run's first host, started as the run's scheduler starts
    processes there (a dry run: only where that host is this machine); None where it cannot run now
    (the nodes of a batch job not yet submitted) or exits non-zero. For runtimes that must look at
    the environment the processes will have before launch."""
    if want.first_host is None:
        return None
    scheduler = load("schedulers", want.scheduler) if want.install else SchedulerDefaults()
    return scheduler.run_on_hosts([want.first_host], argv, want.profile).get(want.first_host)


CONTRACTS = {"runtimes": (Runtime, RuntimeDefaults), "launchers": (Launcher, LauncherDefaults),
             "schedulers": (Scheduler, SchedulerDefaults)}


def command_line(name: str, why: str) -> str:
    """A doctor line for a command a plugin needs on PATH."""
    found = shutil.which(name)
    return f"ok: {name} ({found})" if found else f"missing: {name} on PATH ({why})"


def _package_paths(kind: str) -> list[str]:
    package = importlib.import_module(f"suite.{kind}")
    return [*package.__path__, *EXTRA_PATHS[kind]]


def available(kind: str) -> list[str]:
    return sorted({m.name for m in pkgutil.iter_modules(_package_paths(kind)) if not m.name.startswith("_")})


def _module(kind: str, name: str) -> ModuleType:
    for folder in EXTRA_PATHS[kind]:
        path = Path(folder) / f"{name}.py"
        if path.exists():
            spec = importlib.util.spec_from_file_location(f"suite_plugin_{kind}_{name}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    return importlib.import_module(f"suite.{kind}.{name}")


def load(kind: str, name: str):
    """The plugin `name` of `kind` (runtimes, launchers, schedulers) as an object of its contract:
    the module's functions and PROFILE, with the contract's defaults for hooks it does not define."""
    known = available(kind)
    if name not in known:
        raise UsageError(f"unknown {KINDS[kind]} '{name}' (known: {', '.join(known)})")
    module = _module(kind, name)
    protocol, defaults = CONTRACTS[kind]
    hooks = {attr: staticmethod(value) if callable(value) else value
             for attr in _protocol_members(protocol) if (value := getattr(module, attr, None)) is not None}
    missing = [hook for hook in required_hooks(kind) if not callable(hooks.get(hook))]
    if missing:
        raise UsageError(f"{KINDS[kind]} {name} ({getattr(module, '__file__', name)}) does not define "
                         f"{', '.join(missing)}, which every {KINDS[kind]} must (docs/plugins.md)")
    cls = type(f"{name}_{KINDS[kind]}", (defaults,), {**hooks, "name": name, "module": module})
    return cls()


def required_hooks(kind: str) -> list[str]:
    """The hooks of a kind's contract that have no default: a plugin must define them."""
    protocol, defaults = CONTRACTS[kind]
    return [m for m in _protocol_members(protocol) if not hasattr(defaults, m)]


def _protocol_members(protocol) -> list[str]:
    return [m for m in (*protocol.__annotations__, *vars(protocol)) if not m.startswith("_") and m != "name"]


def load_all(kind: str) -> list:
    return [load(kind, name) for name in available(kind)]

"""The plain data passed between runtime, launcher and scheduler."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.base.env_policy import SITE_NAMES
from suite.inputs.host_network import is_local
from suite.inputs.hostfiles import Host, World


@dataclass(frozen=True)
class StackRequest:
    """What a runtime is asked to prepare: a stack (suite.stacks.recipes.Stack), and what the run and the
    cluster profile say about where it comes from."""

    stack: Any
    flavour: str | None = None  # cpu or cuda; None: what the hosts of the run have
    wheels: Path | None = None  # a wheel folder to install from, with no network
    binds: tuple[str, ...] = ()  # folders a container must see besides the checkout
    image_dir: Path | None = None  # where a container runtime's images are
    profile: Any = None  # the cluster profile (suite.execution.clusters.Cluster), for the runtime's own table
    gpus: int | None = None  # GPUs of the run's first host, where known (None: this host's)
    install: bool = True  # False (a dry run): what is not installed yet is a UsageError, not installed now
    # The environment a site provides (runtime modules): the run's MODULES, SOURCE and PYTHON as given
    # (None: not given, the profile's [modules] table says), read with the profile's table.
    modules: tuple[str, ...] | None = None
    source: tuple[str, ...] | None = None
    python: str | None = None
    # Where the run's processes start, for a runtime that must look at the first host before launch:
    # the scheduler's name (its run_on_hosts reaches the host) and the host (None: not known before
    # launch, e.g. the nodes of a batch job not yet submitted).
    scheduler: str = "local"
    first_host: str | None = None


@dataclass(frozen=True)
class StackEnv:
    """How to run a program of a stack: argv prefix (empty for a virtual environment, `apptainer
    exec IMAGE` for a container, a shell that loads modules), where its programs are, and what to
    record about it. `programs` names programs that are not files of bin_dir (program -> the argv
    that runs it, e.g. torchrun -> python -m torch.distributed.run in a site's environment)."""

    runtime: str
    bin_dir: str
    prefix: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    programs: dict = field(default_factory=dict)
    # where the stack's Python keeps its headers, where the runner can look before launch (a local stack: a venv of
    # an interpreter of this host); None where it cannot
    python_include: str | None = None

    def argv(self, program: str, *args: str) -> list[str]:
        if program in self.programs:
            return [*self.prefix, *self.programs[program], *args]
        path = f"{self.bin_dir}/{program}" if self.bin_dir else program
        return [*self.prefix, path, *args]

    def version(self, package: str) -> str | None:
        """The installed version of a package of the stack (its pip list), None where it has none."""
        packages = self.provenance.get("stack_packages") or {}
        wanted = package.lower().replace("_", "-")
        return next((v for name, v in packages.items() if name.lower().replace("_", "-") == wanted), None)


@dataclass(frozen=True)
class Launch:
    """What a launcher plans from: the case script and options, the world, the stack, the folders."""

    script: str
    case_argv: list[str]
    world: World
    stack_env: StackEnv
    run_dir: str
    data_dir: str
    options: dict = field(default_factory=dict)  # the case options, parsed, defaults filled in
    # How the scheduler starts a process on a host that is not this machine: "srun" (a job step),
    # "ssh", or "local" (it does not: every host must be this machine); the runner sets it from the
    # scheduler's `placement` hook. See docs/plugins.md.
    placement: str = "ssh"
    cpu_bind: str = "none"  # how each case process binds itself to cores (suite/instack/cpu_binding.py)
    device: str | None = None  # "cuda": GPUs were asked for and are there; a rank on another device stops
    site_env: dict = field(default_factory=dict)  # the cluster profile's [env] as applied (clusters.applied_env)

    def env(self, host: Host | None = None, **extra: str) -> dict:
        """Environment of a case process: the profile's [env] under the stack's own variables; SUITE_* tell the
        case where to write and what it runs on; `extra` (the launcher's) last."""
        env = {**self.site_env, **self.stack_env.env, "SUITE_RUN_DIR": self.run_dir, "SUITE_DATA_DIR": self.data_dir,
               "SUITE_NODES": str(self.world.nodes), "SUITE_DEVICES": str(self.world.devices)}
        if self.cpu_bind != "none":
            env["SUITE_CPU_BIND"] = self.cpu_bind
        if self.device:
            env["SUITE_DEVICE"] = self.device
        if self.site_env:
            env[SITE_NAMES] = ",".join(sorted(self.site_env))
        if host is not None:
            env["SUITE_DEVICES_PER_NODE"] = str(host.slots)
            env.update(self.machine_slots(host))
        return {**env, **extra}

    def processes_on_machine(self, host: Host, per_host: int | None = None) -> int:
        """Case processes sharing `host`'s machine (all local hosts are this one machine): `per_host`
        on each host, or one per slot."""
        hosts = [h for h in self.world.hosts if is_local(h.name)] if is_local(host.name) else [host]
        return sum(per_host or h.slots for h in hosts)

    def machine_slots(self, host: Host) -> dict:
        """Where several hosts of the world are this machine (loopback hostfiles): the first slot of
        `host` among all of the machine's, so that their processes take distinct cores."""
        local = [h for h in self.world.hosts if is_local(h.name)]
        if len(local) < 2 or host not in local:
            return {}
        offset = sum(h.slots for h in local[:local.index(host)])
        return {"SUITE_SLOT_OFFSET": str(offset), "SUITE_MACHINE_SLOTS": str(sum(h.slots for h in local))}


@dataclass(frozen=True)
class Process:
    name: str
    host: str
    argv: list[str]
    env: dict
    cwd: str
    # A helper beside the job (the telemetry sampler, Horovod's rendezvous server): the plan ends when
    # every other process has ended, then daemons get SIGTERM; their exit never fails the run.
    daemon: bool = False
    # One MPI job over several hosts (host -> tasks) started as one step (`srun --mpi=...`); planned
    # only for placement "srun". Empty: one process on `host`.
    mpi_tasks: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    processes: tuple[Process, ...]
    ranks: int  # how many probe files (ranks) the case writes
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessResult:
    name: str
    host: str
    returncode: int | None
    log: str
    tail: list[str]
    reason: str | None = None
    first_error: str | None = None
    ended_at: float | None = None  # time.monotonic() when the process was seen to end

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.reason is None


def first_failure(results: list[ProcessResult]) -> ProcessResult | None:
    """The process that failed by itself and ended first: the cause, not a rank that aborted because a
    peer had gone (SIGABRT from a collective) or one the scheduler stopped (which has a reason)."""
    failed = [r for r in results if not r.ok]
    by_itself = [r for r in failed if r.reason is None] or failed
    return min(by_itself, key=lambda r: r.ended_at if r.ended_at is not None else float("inf"), default=None)

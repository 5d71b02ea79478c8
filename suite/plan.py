"""The plain data passed between runtime, launcher and scheduler."""

from dataclasses import dataclass, field

from suite.hostfile import Host, World


@dataclass(frozen=True)
class StackEnv:
    """How to run a program of a stack: argv prefix (empty for a virtual environment, `apptainer
    exec IMAGE` for a container), where its programs are, and what to record about it."""

    runtime: str
    bin_dir: str
    prefix: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    def argv(self, program: str, *args: str) -> list[str]:
        path = f"{self.bin_dir}/{program}" if self.bin_dir else program
        return [*self.prefix, path, *args]


@dataclass(frozen=True)
class Launch:
    """What a launcher plans from: the case script and options, the world, the stack, the folders."""

    script: str
    case_argv: list[str]
    world: World
    stack_env: StackEnv
    run_dir: str
    data_dir: str

    def env(self, host: Host | None = None, **extra: str) -> dict:
        """Environment of a case process; SUITE_* tell the case where to write and what it runs on."""
        env = {**self.stack_env.env, "SUITE_RUN_DIR": self.run_dir, "SUITE_DATA_DIR": self.data_dir,
               "SUITE_NODES": str(self.world.nodes), "SUITE_DEVICES": str(self.world.devices)}
        if host is not None:
            env["SUITE_DEVICES_PER_NODE"] = str(host.slots)
        return {**env, **extra}


@dataclass(frozen=True)
class Process:
    name: str
    host: str
    argv: list[str]
    env: dict
    cwd: str


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

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.reason is None

"""The plain data passed between runtime, launcher and scheduler."""

from dataclasses import dataclass, field


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
class Process:
    name: str
    host: str
    argv: list[str]
    env: dict
    cwd: str


@dataclass(frozen=True)
class Plan:
    processes: tuple[Process, ...]
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

"""A run request: what `suite run` is asked to do, field by field, and its command line both ways.

One place owns the `run` options: the parser the entry point shows (`add_run_options`), the request
built from them (`from_argv`), the command line that asks for the same request again (`to_argv`: a
batch job's runner, a rerun's provenance), and the request a record asked for (`from_record`, for
`suite rerun`). A round-trip test covers every option, so one added here cannot be lost on the way."""

import argparse
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import names_a_file, profile_path
from suite.inputs.host_gpus import FLAVOURS
from suite.instack.cpu_binding import POLICIES

PRECHECK_FLAGS = {"on": "--precheck", "off": "--no-precheck"}  # "auto": neither
SUITE = ("python", "-m", "suite")  # how a record's provenance writes the runner's command line


@dataclass
class RunRequest:
    """A `suite run` as asked: text as the user gave it (checked later by suite.execution.run.check); None or
    the default where nothing was given."""

    case: str = "pytorch-synthetic"
    nodes: str = "1"
    gpus_per_node: str | None = None
    cluster: str | None = None
    hostfile: str | None = None
    runtime: str | None = None
    scheduler: str | None = None
    repeat: str = "1"
    timeout: str | None = None
    stall: str | None = None
    baseline: str | None = None
    results_dir: Path = paths.RESULTS
    runs_dir: Path = paths.RUNS
    data_dir: Path | None = None
    dry_run: bool = False
    run_id: str | None = None  # set by the slurm scheduler for the run inside its batch job
    # interconnect check: auto (points of 2+ nodes), on, off (suite/execution/interconnect_check.py)
    precheck: str = "auto"
    telemetry_interval: float | None = 1.0  # seconds between telemetry samples; 0: no sampler
    cpu_bind: str | None = None  # suite/instack/cpu_binding.py; None: the cluster's, else none
    flavour: str | None = None  # cpu or cuda stack; None: what the hosts have
    wheels: Path | None = None  # install the stack from this wheel folder alone; None: the cluster's, else the index
    modules: str | None = None  # runtime modules: modules to load, space-separated; None: the cluster's [modules]
    source: str | None = None  # runtime modules: scripts to source after loading, space-separated
    python: str | None = None  # runtime modules: the Python to run; None: the cluster's, else python3 on PATH
    case_args: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # the command line as typed, for provenance; [] : to_argv's
    rerun_of: dict | None = None  # set by `suite rerun`: goes into provenance.rerun_of

    def provenance_argv(self) -> list[str]:
        return self.argv or [*SUITE, *to_argv(self)]


# What a record keeps of its request (provenance.request) and a rerun reads back: what was asked,
# not where this machine put the files.
RECORDED = ("case", "nodes", "gpus_per_node", "cluster", "hostfile", "runtime", "scheduler", "repeat", "timeout",
            "stall", "data_dir", "precheck", "telemetry_interval", "cpu_bind", "flavour", "modules", "source", "python",
            "case_args")
# Not command-line options: set by the programs that build a request.
NOT_OPTIONS = {"case_args", "argv", "rerun_of"}


def add_run_options(parser: argparse.ArgumentParser, runtimes: list[str], schedulers: list[str],
                    leave_out: frozenset[str] = frozenset()) -> None:
    """The `run` options (Make variables in brackets), but those whose destination is in `leave_out`
    (`compare-frameworks` shares all but a few)."""

    def add(*names, **how):
        if names[0].lstrip("-").replace("-", "_") not in leave_out:
            parser.add_argument(*names, **how)

    add("--case", default="pytorch-synthetic", help="case folder under cases/ (Make: CASE)")
    add("--nodes", default="1",
        help="use the first N hosts of the hostfile; a list such as 1,2,4 runs a sweep (Make: NODES)")
    add("--gpus-per-node", default=None, help="devices (processes) per node, overriding the hostfile's slots; a list "
        "such as 1,4 sweeps over it (Make: GPUS_PER_NODE)")
    add("--cluster", default=None, help="cluster profile hostfiles/NAME.toml or a PATH.toml: hostfile, scheduler, "
        "devices per node, data, environment (Make: CLUSTER)")
    add("--hostfile", default=None, help="'host slots=N' or 'host:N' per line (default: the cluster's, else "
        "hostfiles/localhost) (Make: HOSTFILE)")
    add("--runtime", default=None, help=f"one of {runtimes} (default: the cluster's, else local) (Make: RUNTIME)")
    add("--scheduler", default=None, help=f"one of {schedulers} (default: the cluster's, else local) (Make: SCHEDULER)")
    add("--repeat", default="1", help="separate launches, for the confidence interval (Make: REPEAT)")
    add("--timeout", default=None, help="seconds one launch may take (default: the case's) (Make: TIMEOUT)")
    add("--stall", default=None, help="seconds without any output line after which a launch is ended as hung "
        "(default: the case's, 30 min) (Make: STALL)")
    add("--baseline", default=None, help="record to compute a sweep's speedup against (default: the sweep's "
        "smallest device count)")
    add("--results-dir", type=paths.given, default=paths.RESULTS, help="where records go (default: reports/results; a "
        "sweep's table goes beside it, in ../sweeps) (Make: RESULTS)")
    add("--runs-dir", type=paths.given, default=paths.RUNS, help="where run directories (logs, probe files) go "
        "(default: runs) (Make: RUNS)")
    add("--data-dir", type=paths.given, default=None, help="where datasets live (default: $DATA_DIR or data/ in the "
        "checkout) (Make: DATA_DIR)")
    add("--dry-run", action="store_true", help="print every process with its host, argv and environment (for SLURM "
        "the job script) and start nothing (Make: DRY_RUN=1)")
    add("--run-id", default=None, help=argparse.SUPPRESS)  # the slurm scheduler's batch job passes it
    check = parser.add_mutually_exclusive_group()
    check.add_argument("--precheck", dest="precheck", action="store_const", const="on", default="auto",
                       help="run the interconnect check (all-reduce sweep) also for one node (Make: PRECHECK=1)")
    check.add_argument("--no-precheck", dest="precheck", action="store_const", const="off",
                       help="skip the interconnect check done before points of 2+ nodes (Make: NO_PRECHECK=1)")
    add("--telemetry-interval", type=float, default=1.0, metavar="SECONDS",
        help="seconds between telemetry samples on each host; 0: no sampler (Make: TELEMETRY)")
    add("--cpu-bind", default=None, choices=POLICIES, help="how each worker binds itself to cores: none, cores "
        "(its share of the node's), numa, gpu-affine (cores nearest its GPU); default: the cluster's, else none "
        "(Make: CPU_BIND)")
    add("--flavour", default=None, choices=FLAVOURS, help="the stack's cpu or cuda build (default: cuda where the "
        "hosts have NVIDIA GPUs, else cpu) (Make: FLAVOUR)")
    add("--wheels", type=paths.given, default=None, help="install the stack from this wheel folder alone, with no "
        "network (filled by `make wheels`; default: the cluster's, else the package index) (Make: WHEELS)")
    add_site_env_options(add, "runtime modules")


# The site's environment of runtime modules (`run`, and `check` for its modules paths): option -> what, default
SITE_ENV_OPTIONS = {
    "modules": ("environment modules to load, in order, e.g. \"GCC/13 PyTorch/2.3\"", "the cluster's [modules] load"),
    "source": ("scripts to source after loading, e.g. a venv's activate", "the cluster's [modules] source"),
    "python": ("the Python that runs the case", "the cluster's [modules] python, else the first python3 on PATH once "
               "loaded"),
}


def add_site_env_options(add, applies_to: str) -> None:
    """--modules, --source, --python through `add` (a parser's add_argument), each help starting with `applies_to`."""
    for name, (what, default) in SITE_ENV_OPTIONS.items():
        add(f"--{name}", default=None, help=f"{applies_to}: {what} (default: {default}) (Make: {name.upper()})")


def split_case_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(runner arguments, case arguments): the case's come after the first '--'."""
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return list(argv), []


def request_of(cls, args: argparse.Namespace, **given):
    """An instance of the dataclass `cls` (a command's typed request) from the parsed arguments of the
    same names, and `given`, which wins over them."""
    return cls(**{**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}, **given})


def from_namespace(args: argparse.Namespace, case_args: list[str], argv: list[str] | None = None) -> RunRequest:
    """The request of parsed `run` options (fields of the same names), its case arguments and the
    command line as typed (None: the request's own)."""
    cluster = args.cluster and (str(profile_path(args.cluster)) if names_a_file(args.cluster) else args.cluster)
    return request_of(RunRequest, args, case_args=list(case_args), argv=[*SUITE, *argv] if argv else [],
                      cluster=cluster)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"cannot read the run's command line: {message}")


def from_argv(argv: list[str]) -> RunRequest:
    """The request of a `run` command line (with or without `python -m suite run` in front); options
    this suite no longer has are left out, as a record's command line may hold them."""
    own, case_args = split_case_args(list(argv))
    if own[:1] != ["run"] and own[3:4] != ["run"]:
        raise UsageError(f"not a `suite run` command line: {' '.join(own)[:120]}")
    own = own[own.index("run") + 1:]
    run = _Parser(prog="python -m suite run", add_help=False)
    add_run_options(run, [], [])
    return from_namespace(run.parse_known_args(own)[0], case_args)


def to_argv(req: RunRequest) -> list[str]:
    """`run` and the options that ask for `req` again (from_argv(to_argv(req)) == req, argv aside):
    every field that differs from its default, then '--' and the case arguments."""
    default = RunRequest()
    argv = ["run"]
    for f in fields(RunRequest):
        value = getattr(req, f.name)
        if f.name in NOT_OPTIONS or value == getattr(default, f.name):
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.name == "precheck":
            argv.append(PRECHECK_FLAGS[value])
        elif isinstance(value, bool):
            argv += [flag] if value else []
        else:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return [*argv, "--", *req.case_args]


def recorded(req: RunRequest) -> dict:
    """The request as a record keeps it (provenance.request): plain JSON values."""
    values = asdict(req)
    return {name: str(values[name]) if isinstance(values[name], Path) else values[name] for name in RECORDED}


def from_record(record: dict) -> RunRequest:
    """The request a record's run was asked with: its provenance.request (schema 3), else its
    command line read back with today's parser (older records)."""
    kept = record["provenance"].get("request")
    if kept is None:
        return from_argv(record["provenance"]["argv"])
    values = {name: kept[name] for name in RECORDED if name in kept}
    if values.get("data_dir"):
        values["data_dir"] = Path(values["data_dir"])
    return RunRequest(**values)

"""`suite check [--cluster NAME] [--only PATTERN]` (make check-site): the acceptance test of a port. Every
path the profile (or this host) offers: each case at its [tiny] sizes, through each runtime, with each
launcher of the case, on one node and, where the scheduler reaches other hosts, on two; each through the
normal runner in a subprocess with a time limit, so that a failure stays contained. A path this host
cannot take is listed as not available, with why (the doctor's own checks), and never counts as a pass.
Prints a table, writes it beside the records (suite/analysis/site_check.py) and exits 1 when an
available path failed."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from suite.analysis.site_check import (
    FAILED,
    OK,
    UNAVAILABLE,
    PathResult,
    SiteCheck,
    exit_status,
    format_table,
    one_line,
    summary_line,
    write_check,
)
from suite.base import paths
from suite.base.errors import UsageError
from suite.commands import common_args
from suite.execution import plugins
from suite.execution.clusters import Cluster, load_cluster
from suite.execution.plan import StackRequest
from suite.inputs.cases import Case, known_cases, load_case
from suite.inputs.host_gpus import host_gpus, pick_flavour
from suite.inputs.hostfiles import read_hostfile
from suite.records.write import utc_now
from suite.stacks.locks import load_stack

PATH_TIMEOUT_S = 1800  # one path, its stack's first install included
LAUNCH_TIMEOUT_S, LAUNCH_STALL_S = 900, 300  # the runner's own limits of a tiny launch (TIMEOUT, STALL)
GRACE_S = 90  # after the limit: the runner's own interruption (SIGTERM) ends its job and writes the record
FRAMEWORKS = {"torch": "torch", "horovod": "horovod", "tensorflow": "tensorflow", "tensorflow-cpu": "tensorflow",
              "mxnet": "mxnet"}  # lock package -> the framework a site's environment must have


@dataclass(frozen=True)
class SiteEnv:
    """The site's environment for the modules paths, as `run` takes it (MODULES, SOURCE, PYTHON: words as
    given, None where the profile's [modules] table says)."""

    modules: str | None = None
    source: str | None = None
    python: str | None = None

    def request(self, cluster: Cluster | None) -> StackRequest:
        def words(text: str | None):
            return None if text is None else tuple(text.split())

        return StackRequest(None, profile=cluster, modules=words(self.modules), source=words(self.source),
                            python=self.python)

    def options(self) -> list[str]:
        return [arg for name in ("modules", "source", "python") if getattr(self, name) is not None
                for arg in (f"--{name}", getattr(self, name))]


@dataclass(frozen=True)
class SitePath:
    """One way of running a case here: plain values, and the runner's command line for it."""

    case: Case
    runtime: str
    launcher: str
    launcher_args: tuple[str, ...]  # the case option that picks the launcher, where it has one
    nodes: int
    per_node: int

    def named(self) -> str:
        return f"{self.case.name}/{self.runtime}/{self.launcher}"

    def result(self, outcome: str, why: str = "", seconds: float | None = None, record: str | None = None):
        return PathResult(self.case.name, self.runtime, self.launcher, self.nodes, self.nodes * self.per_node,
                          outcome, one_line(why), None if seconds is None else round(seconds, 1), record)


# --- which paths -------------------------------------------------------------------------------------

def launchers_of(case: Case) -> list[tuple[str, tuple[str, ...]]]:
    """(launcher, case arguments choosing it): the choices of the case's launcher option, else its one launcher."""
    option = case.spec.get("launcher_option")
    choices = case.spec.get("options", {}).get(option, {}).get("choices") if option else None
    if not choices:
        return [(case.launcher, ())]
    return [(choice, (f"--{option}", choice)) for choice in choices]


def runtimes_for(cluster: Cluster | None) -> list[str]:
    """Every runtime, the profile's first."""
    first = cluster.runtime if cluster else "local"
    return [first, *(name for name in plugins.available("runtimes") if name != first)]


def per_node(cluster: Cluster | None, gpus: int, nodes: int) -> int:
    """Devices per node: the profile's, else this host's GPUs, else CPU workers (two in all: the smallest
    world that exchanges gradients)."""
    if cluster and cluster.devices_per_node:
        return cluster.devices_per_node
    if gpus:
        return gpus
    return 2 if nodes == 1 else 1


def node_counts(scheduler) -> list[int]:
    """One node; two where the scheduler starts processes on other hosts (a local scheduler never does)."""
    return [1] if scheduler.placement(None) == "local" else [1, 2]


def site_paths(cluster: Cluster | None, cases: list[Case], runtimes: list[str], nodes: list[int],
               gpus: int) -> list[SitePath]:
    return [SitePath(case, runtime, launcher, args, n, per_node(cluster, gpus, n))
            for case in cases for runtime in runtimes for launcher, args in launchers_of(case) for n in nodes]


def narrowed(found: list[SitePath], only: list[str] | None) -> list[SitePath]:
    """The paths whose case/runtime/launcher contains one of the patterns; none matching is refused."""
    if not only:
        return found
    kept = [p for p in found if any(pattern in p.named() for pattern in only)]
    if not kept:
        names = sorted({p.named() for p in found})
        raise UsageError(f"--only {' '.join(only)} matches none of the {len(names)} paths here "
                         f"(case/runtime/launcher: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''})")
    return kept


# --- whether a path is available here (the doctor's checks) -------------------------------------------

def first_missing(lines: list[str]) -> str | None:
    return next((line.removeprefix("missing: ") for line in lines if line.startswith("missing:")), None)


def scheduler_problem(scheduler, cluster: Cluster | None) -> str | None:
    """The run's own check of the scheduler (its commands on PATH, the profile's settings)."""
    try:
        scheduler.check(cluster, False)
    except UsageError as exc:
        return str(exc)
    return None


def hosts_problem(scheduler, cluster: Cluster | None, nodes: int) -> str | None:
    allocated = scheduler.hosts(nodes)
    if allocated:
        hosts, where = allocated[0], allocated[1]
    else:
        where = str((cluster and cluster.hostfile) or paths.HOSTFILES / "localhost")
        try:
            hosts = read_hostfile(where)
        except UsageError as exc:
            return str(exc)
    return None if len(hosts) >= nodes else f"{nodes} nodes, but {where} has {len(hosts)} host(s)"


def data_problem(case: Case, cluster: Cluster | None, case_args: list[str]) -> str | None:
    data_dir = Path((cluster and cluster.data_dir) or paths.data_dir())
    try:
        case.check_data(case.parse_options(case_args), data_dir)
    except UsageError as exc:
        return str(exc)
    return None


def stack_frameworks(stack: str) -> set[str]:
    """The frameworks a stack's locks pin (torch, horovod, tensorflow, mxnet)."""
    names = set()
    for lock in load_stack(stack).dir.rglob("*.lock"):
        names |= {m.group(1).lower() for m in re.finditer(r"(?m)^([A-Za-z0-9_.-]+)==", lock.read_text())}
    return {FRAMEWORKS[name] for name in names if name in FRAMEWORKS}


def modules_problem(cluster: Cluster | None, stack: str, site: SiteEnv = SiteEnv()) -> str | None:
    """The site's environment: named (profile or MODULES/SOURCE/PYTHON), a module system to load it with,
    and the stack's frameworks in it. A module that does not load is no reason here: the run shows it,
    as a failure."""
    from suite.runtimes import modules

    setup = modules.setup_of(site.request(cluster))
    if not (setup.load or setup.source or setup.python):
        return (f"no environment of the site named (profile {cluster.name if cluster else 'localhost'}: no [modules] "
                "load, source or python; nor MODULES, SOURCE or PYTHON)")
    output = plugins.output_here(modules.probe_argv(setup, facts=False)) or ""
    try:
        found = modules.read_probe(output, setup, "this machine")
    except (UsageError, RuntimeError) as exc:
        return str(exc) if "no module system" in str(exc) else None
    lacking = sorted(f for f in stack_frameworks(stack) if not ({f, f"{f}-cpu"} & set(found["packages"])))
    return f"the site's environment ({setup.describe()}) has no {', '.join(lacking)}" if lacking else None


def runtime_problem(runtime: str, cluster: Cluster | None, stack: str, flavour: str,
                    site: SiteEnv = SiteEnv()) -> str | None:
    """Why the runtime cannot run the stack here, or None. A local stack is built by the run itself."""
    if runtime == "local":
        return None
    if runtime == "modules":
        return modules_problem(cluster, stack, site)
    return first_missing(plugins.load("runtimes", runtime).doctor_lines(cluster, [stack], flavour))


class Availability:
    """Why a path is not available here (None: it is), each check made once per check run."""

    def __init__(self, cluster: Cluster | None, scheduler, flavour: str, site: SiteEnv = SiteEnv()):
        self.cluster, self.scheduler, self.flavour, self.site, self.known = cluster, scheduler, flavour, site, {}

    def once(self, key, compute):
        if key not in self.known:
            self.known[key] = compute()
        return self.known[key]

    def problem(self, path: SitePath) -> str | None:
        stack = path.case.stack
        return (self.once("scheduler", lambda: scheduler_problem(self.scheduler, self.cluster))
                or self.once(("hosts", path.nodes), lambda: hosts_problem(self.scheduler, self.cluster, path.nodes))
                or self.once(("runtime", path.runtime, stack),
                             lambda: runtime_problem(path.runtime, self.cluster, stack, self.flavour, self.site))
                or self.once(("data", path.case.name), lambda: data_problem(path.case, self.cluster, tiny_args(path))))


# --- running one path ---------------------------------------------------------------------------------

def tiny_args(path: SitePath) -> list[str]:
    return [*path.case.tiny_args(), *path.launcher_args]


def runner_argv(path: SitePath, cluster: Cluster | None, results: Path, runs: Path,
                site: SiteEnv = SiteEnv()) -> list[str]:
    return [sys.executable, "-m", "suite", "run", "--case", path.case.name, "--nodes", str(path.nodes),
            "--gpus-per-node", str(path.per_node), "--runtime", path.runtime,
            *(site.options() if path.runtime == "modules" else []),
            *(["--cluster", cluster.name] if cluster else []), "--timeout", str(LAUNCH_TIMEOUT_S),
            "--stall", str(LAUNCH_STALL_S), "--results-dir", str(results), "--runs-dir", str(runs),
            "--", *tiny_args(path)]


def why_failed(returncode: int, output: str, record: dict | None) -> str:
    """The run's one-line error: its record's reason, else the runner's error line, else its last line."""
    if record and record.get("reason"):
        return record["reason"]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if line.startswith(("error:", "FAILED:"))), None)
    return said or (f"exit {returncode}: {lines[-1]}" if lines else f"exit {returncode} with no output")


def gpu_problem(record: dict, gpus: int) -> str | None:
    """On a GPU host a path must have trained on its GPUs: device in the record, NCCL where the case
    reports a torch.distributed backend, GPU telemetry from every host, MLLOG lines of the ranks."""
    if not gpus:
        return None
    device = record["world"].get("device_type")
    if device not in ("cuda", "gpu"):
        return f"trained on {device} although this host has {gpus} GPU(s)"
    backend = record["config"].get("reported_by_case", {}).get("backend")
    if backend not in (None, "nccl"):
        return f"torch.distributed backend {backend} on GPUs (NCCL expected)"
    for host, facts in ((record["metrics"].get("telemetry") or {}).get("hosts") or {}).items():
        found = facts.get("gpus") if isinstance(facts, dict) else facts
        if not (isinstance(found, list) and found):
            return f"no GPU telemetry from {host}: {found}"
    for rep in record["repetitions"]:
        if rep.get("run_dir") and not list(Path(rep["run_dir"]).glob("ranks/*.mllog")):
            return f"no MLLOG lines of the ranks under {rep['run_dir']}/ranks"
    return None


def new_records(folder: Path, before: set[Path]) -> list[Path]:
    return sorted(set(folder.glob("*.json")) - before)


def run_path(path: SitePath, cluster: Cluster | None, folder: Path, timeout_s: float, gpus: int,
             site: SiteEnv = SiteEnv()) -> tuple[PathResult, bool]:
    """One path through the normal runner, in a session of its own, its output shown live; at the limit
    SIGTERM (the runner ends its job and writes a failed record), killed after a grace. Also says whether
    Ctrl-C came meanwhile (the runner got it, and the check goes no further)."""
    results, runs = folder / "results", folder / "runs"
    before = set(results.glob("*.json"))
    argv = runner_argv(path, cluster, results, runs, site)
    print(f"\n== check: {path.named()} on {path.nodes} node(s) x {path.per_node}: {' '.join(argv[2:])}", flush=True)
    started = time.monotonic()
    runner = subprocess.Popen(argv, cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", start_new_session=True)
    output, limit, interrupted = follow(runner, timeout_s)
    seconds = time.monotonic() - started
    written = new_records(results, before)
    record = json.loads(written[-1].read_text()) if written else None
    where = str(written[-1]) if written else None
    if limit or interrupted:
        said = f"{limit or 'interrupted (SIGINT) while it ran'}; {why_failed(runner.returncode, output, record)}"
        return path.result(FAILED, said, seconds, where), interrupted
    if runner.returncode == 0 and record and record["status"] == "ok":
        problem = gpu_problem(record, gpus)
        return path.result(FAILED if problem else OK, problem or "", seconds, where), False
    return path.result(FAILED, why_failed(runner.returncode, output, record), seconds, where), False


def follow(runner: subprocess.Popen, timeout_s: float) -> tuple[str, str | None, bool]:
    """The runner's output (echoed as it comes), which limit ended it where it overran, and whether Ctrl-C
    came: passed on to the runner once (it has a session of its own), which then ends its job."""
    kept: list[str] = []
    deadline, overran, interrupted = time.monotonic() + timeout_s, None, False

    def pump():
        for line in runner.stdout:
            kept.append(line)
            sys.stdout.write(f"   | {line}")
            sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while runner.poll() is None:
        try:
            time.sleep(0.2)
            if overran is None and time.monotonic() > deadline:
                overran = f"no end within the check's limit of {timeout_s:.0f} s"
                stop(runner)
        except KeyboardInterrupt:
            if not interrupted:  # once: the runner is ending its job
                interrupted = True
                runner.send_signal(signal.SIGINT)
    reader.join(timeout=5)
    return "".join(kept), overran, interrupted


def stop(runner: subprocess.Popen) -> None:
    """SIGTERM: the runner's interruption path; SIGKILL of its group when it does not end in GRACE_S."""
    runner.send_signal(signal.SIGTERM)
    try:
        runner.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(runner.pid, signal.SIGKILL)


# --- the command --------------------------------------------------------------------------------------

def new_check_id(cluster: str) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{re.sub(r'[^A-Za-z0-9_.-]', '-', cluster)}-check"


def run_paths(found: list[SitePath], check: SiteCheck, available: Availability, cluster: Cluster | None,
              folder: Path, timeout_s: float) -> bool:
    """Each path in turn, its row added to the check; False where Ctrl-C ended the check."""
    try:
        for path in found:
            if problem := available.problem(path):
                check.paths.append(path.result(UNAVAILABLE, problem))
                continue
            result, interrupted = run_path(path, cluster, folder, timeout_s, check.gpus, available.site)
            check.paths.append(result)
            if interrupted:
                return False
    except KeyboardInterrupt:  # while a path's availability was looked at
        return False
    return True


def check_site(cluster_name: str | None, only: list[str] | None, results_dir: Path, runs_dir: Path,
               timeout_s: float = PATH_TIMEOUT_S, site: SiteEnv = SiteEnv()) -> int:
    cluster = load_cluster(cluster_name) if cluster_name else None
    scheduler = plugins.load("schedulers", cluster.scheduler if cluster else "local")
    gpus = host_gpus()
    found = narrowed(site_paths(cluster, [load_case(n) for n in known_cases()], runtimes_for(cluster),
                                node_counts(scheduler), gpus), only)
    check = SiteCheck(new_check_id(cluster.name if cluster else "localhost"), cluster.name if cluster else "localhost",
                      scheduler.name, socket.gethostname(), utc_now(), gpus, " ".join(only) if only else None)
    folder = Path(runs_dir).resolve() / check.check_id
    available = Availability(cluster, scheduler, pick_flavour(None, gpus), site)
    started = time.monotonic()
    if not run_paths(found, check, available, cluster, folder, timeout_s):
        print("check interrupted: the paths after the last one listed did not run", file=sys.stderr)
    check.seconds = round(time.monotonic() - started, 1)
    written = write_check(check, results_dir)
    print(f"\n{format_table(check)}\n\n{summary_line(check)}\ntable: {written}")
    return exit_status(check)


NAME = "check"
HELP = ("the acceptance test of a port: every path the profile (or this host) offers, each case at its tiny sizes "
        "through each runtime and launcher, in one table (ok, failed, not available here, and why); exit 1 when an "
        "available path failed")


@dataclass(frozen=True)
class CheckRequest:
    cluster: str | None = None
    only: list[str] | None = None
    timeout: float = PATH_TIMEOUT_S
    results_dir: Path = paths.RESULTS
    runs_dir: Path = paths.RUNS
    modules: str | None = None
    source: str | None = None
    python: str | None = None


def add_arguments(parser) -> None:
    common_args.cluster(parser, "cluster profile hostfiles/NAME.toml (default: this machine) (Make: CLUSTER)")
    parser.add_argument("--only", action="append", default=None, metavar="PATTERN",
                        help="only the paths whose case/runtime/launcher contains PATTERN, e.g. pytorch-ddp/local/ "
                             "or /docker/ (repeatable) (Make: ONLY)")
    parser.add_argument("--timeout", type=float, default=PATH_TIMEOUT_S, metavar="SECONDS",
                        help=f"limit of each path, its stack's first install included (default: {PATH_TIMEOUT_S})")
    common_args.results_dir(parser, "the table goes beside it, in ../site-checks/ (default: reports/results)")
    parser.add_argument("--runs-dir", type=Path, default=paths.RUNS,
                        help="where each check's folder goes: the paths' records and run folders (default: runs/)")
    for name, key, what in (("modules", "load", "environment modules to load, in order"),
                            ("source", "source", "scripts to source after loading"),
                            ("python", "python", "the Python that runs the cases")):
        parser.add_argument(f"--{name}", default=None, help=f"the site's environment of the modules paths: {what} "
                            f"(default: the profile's [modules] {key}) (Make: {name.upper()})")


def make_request(args, case_args: list[str], argv: list[str]) -> CheckRequest:
    common_args.no_case_args(NAME, case_args)
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    return common_args.request_of(CheckRequest, args)


def run(req: CheckRequest) -> int:
    return check_site(req.cluster, req.only, req.results_dir, req.runs_dir, req.timeout,
                      SiteEnv(req.modules, req.source, req.python))

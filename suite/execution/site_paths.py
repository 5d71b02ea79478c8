"""The paths a site offers for `suite check` (each case through each runtime and launcher, on one node and,
where the scheduler reaches other hosts, on two) and why one of them is not available here (the doctor's
own checks). Running them is suite/execution/site_runner.py's; the table is suite/analysis/site_check.py."""

from dataclasses import dataclass
from pathlib import Path

from suite.analysis.site_check import PathResult, one_line
from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import plugins
from suite.execution.clusters import Cluster
from suite.execution.plan import StackRequest
from suite.inputs.cases import Case
from suite.inputs.hostfiles import read_hostfile
from suite.records.read import FRAMEWORKS
from suite.stacks.locks import lock_entries
from suite.stacks.recipes import load_stack


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


PROFILES_SITE_ENV = SiteEnv()  # nothing given on the command line: the profile's [modules] table says


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
        """case/runtime/launcher: what --only is matched against."""
        return f"{self.case.name}/{self.runtime}/{self.launcher}"

    def tiny_args(self) -> list[str]:
        return [*self.case.tiny_args(), *self.launcher_args]

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
    """The frameworks a stack's locks pin (FRAMEWORKS' packages: torch, jax, mxnet, tensorflow, horovod), the
    framework a site's environment must have; a -cpu build (tensorflow-cpu) pins its framework."""
    names = {pin.name.lower() for lock in load_stack(stack).dir.rglob("*.lock") for pin in lock_entries(lock)}
    return {framework for framework in FRAMEWORKS if {framework, f"{framework}-cpu"} & names}


def modules_problem(cluster: Cluster | None, stack: str, site: SiteEnv = PROFILES_SITE_ENV) -> str | None:
    """The site's environment: named (profile or MODULES/SOURCE/PYTHON), a module system to load it with,
    and the stack's frameworks in it. A module that does not load is no reason here: the run shows it,
    as a failure."""
    modules = plugins.load("runtimes", "modules").module  # its own probe of a site's environment
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
                    site: SiteEnv = PROFILES_SITE_ENV) -> str | None:
    """Why the runtime cannot run the stack here, or None. A local stack is built by the run itself."""
    if runtime == "local":
        return None
    if runtime == "modules":
        return modules_problem(cluster, stack, site)
    return first_missing(plugins.load("runtimes", runtime).doctor_lines(cluster, [stack], flavour))


class Availability:
    """Why a path is not available here (None: it is), each check made once per check run."""

    def __init__(self, cluster: Cluster | None, scheduler, flavour: str, site: SiteEnv = PROFILES_SITE_ENV):
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
                or self.once(("data", path.case.name), lambda: data_problem(path.case, self.cluster, path.tiny_args())))

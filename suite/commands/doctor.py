"""`suite doctor [--cluster NAME]`: what a cluster profile needs on this machine and whether it is
there, one line each (`ok:` or `missing:`): the scheduler's commands, the runtime (container tool
and images, or local stacks), the cases' data, and that the hosts can be reached. Exit status 1 when
anything is missing; nothing is installed or started."""

from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.commands import common_args
from suite.execution import plugins
from suite.execution.clusters import Cluster, load_cluster
from suite.inputs.cases import known_cases, load_case
from suite.inputs.host_gpus import host_gpus, pick_flavour


def doctor(cluster_name: str | None, case_names: list[str] | None = None, flavour: str | None = None) -> int:
    cluster = load_cluster(cluster_name) if cluster_name else Cluster("localhost", paths.HOSTFILES / "localhost")
    cases = [load_case(name) for name in (case_names or known_cases())]
    print(f"cluster {cluster.name}: scheduler {cluster.scheduler}, runtime {cluster.runtime}"
          f"{' (an example profile: adapt it first)' if cluster.example else ''}")
    stacks = sorted({case.stack for case in cases})
    lines = [*plugin_lines("schedulers", cluster.scheduler, cluster), gpu_line(flavour),
             *plugin_lines("runtimes", cluster.runtime, cluster, stacks, flavour), *data_lines(cluster, cases)]
    for line in lines:
        print(line)
    return 1 if any(line.startswith("missing:") for line in lines) else 0


def gpu_line(flavour: str | None) -> str:
    gpus = host_gpus()
    chosen = pick_flavour(flavour, gpus)
    how = "as asked (FLAVOUR)" if flavour else "for this host"
    return f"ok: {gpus} NVIDIA GPU(s) here (nvidia-smi -L); stacks in their {chosen} flavour {how}"


def plugin_lines(kind: str, name: str, *args) -> list[str]:
    try:
        plugin = plugins.load(kind, name)
    except UsageError as exc:
        return [f"missing: {exc}"]
    return plugin.doctor_lines(*args)


def data_lines(cluster: Cluster, cases: list) -> list[str]:
    data_dir = Path(cluster.data_dir or paths.data_dir())
    lines = []
    for case in cases:
        required = case.spec.get("data", {}).get("requires", [])
        if not required:
            continue
        missing = [rel for rel in required if not (data_dir / rel).exists()]
        lines.append(f"ok: data of {case.name} under {data_dir}" if not missing else
                     f"missing: data of {case.name} under {data_dir}: {missing[0]}"
                     f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''} "
                     f"(make data CASE={case.name}, SYNTHETIC=1 for a small set)")
    return lines


NAME = "doctor"
HELP = "what a cluster profile needs and what is missing here, one line each"


@dataclass(frozen=True)
class DoctorRequest:
    cluster: str | None = None
    case: list[str] | None = None
    flavour: str | None = None


def add_arguments(parser) -> None:
    common_args.cluster(parser, "cluster profile hostfiles/NAME.toml (default: this machine)")
    parser.add_argument("--case", action="append", default=None,
                        help="check only this case's stack, image and data (repeatable; default: every case)")
    common_args.flavour(parser, "the stacks' cpu or cuda flavour (default: what this host fits) (Make: FLAVOUR)")


def make_request(args, case_args: list[str], argv: list[str]) -> DoctorRequest:
    common_args.no_case_args(NAME, case_args)
    return common_args.request_of(DoctorRequest, args)


def run(req: DoctorRequest) -> int:
    return doctor(req.cluster, req.case, req.flavour)

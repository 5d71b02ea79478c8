"""`suite predict`: fit the scaling model (suite/analysis/scaling.py) and print predictions with their assumptions."""

import argparse
from dataclasses import dataclass
from pathlib import Path

from suite.analysis.network_figures import measured_network
from suite.analysis.scaling import Measurements, exchange_for, fit
from suite.analysis.scaling_validation import measurements
from suite.base import paths
from suite.base.errors import UsageError
from suite.base.stats import fmt_number
from suite.commands import common_args
from suite.execution.clusters import load_cluster
from suite.execution.request import request_of
from suite.inputs.cases import load_case
from suite.inputs.counts import positive_ints
from suite.records.read import load_points


def network_from_records(case_name: str, cluster: str | None, results_dir) -> dict:
    """Bandwidth and latency from the interconnect checks in the records of the cluster (the one
    given, else the only one the case has records of), with a line saying where they come from."""
    points = load_points(results_dir, warn=lambda m: None)
    clusters = {cluster} if cluster else {p.cluster for p in points if p.case == case_name}
    found = measured_network(p.record for p in points if p.cluster in clusters) if len(clusters) == 1 else None
    return {**found[0], "source": found[1]} if found else {}


def predict(args: "PredictRequest") -> str:
    case = load_case(args.case)
    devices = positive_ints(args.devices, "--devices")
    data = measurements(case, args.cluster, args.results_dir, args.published)
    used = {n: v for n, v in data.points.items() if args.fit_up_to is None or n <= args.fit_up_to}
    if not used:
        raise UsageError(f"no measurements at or below {args.fit_up_to} devices to fit")
    network = {}
    if not args.fit_network and not args.published:
        network = network_from_records(case.name, args.cluster, args.results_dir)
    if args.cluster and not args.fit_network and not network:
        profile = load_cluster(args.cluster).interconnect
        network = {**profile, "source": f"from the cluster profile ({profile.get('description', 'interconnect')})"} \
            if profile else {}
    try:
        exchange = exchange_for(case.spec, data.devices_per_node)
        model = fit(used, exchange, data.batch_per_device, network.get("bandwidth_gbit_s"), network.get("latency_us"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return format_prediction(model, data, devices, network)


def format_prediction(model, data: Measurements, devices: list[int], network: dict) -> str:
    lines = [f"measurements: {data.source}",
             "network: " + (network["source"] if network else "fitted from the measurements"),
             f"model: {model.describe()}",
             f"{'devices':>8} {'predicted img/s':>16} {'efficiency':>10} {'measured':>10} {'error':>8}"]
    for n in sorted(set(devices) | set(data.points)):
        measured = data.points.get(n)
        error = f"{fmt_number(100 * (model.throughput(n) - measured) / measured, 1, sign=True)}%" if measured else "-"
        fitted = "*" if n in model.fitted_on else " "
        eff = f"{fmt_number(100 * model.efficiency(n))}%"
        shown = f"{fmt_number(measured, 0)}{fitted}" if measured else "-"
        lines.append(f"{n:>8} {fmt_number(model.throughput(n)):>16} {eff:>10} {shown:>10} {error:>8}")
    lines.append("* = used in the fit; efficiency = throughput / (devices x predicted one-device throughput)")
    return "\n".join(lines)


NAME = "predict"
HELP = "predict throughput and efficiency at other device counts"
EPILOG = None
FORMATTER = argparse.HelpFormatter


@dataclass(frozen=True)
class PredictRequest:
    case: str
    devices: str
    cluster: str | None = None
    results_dir: Path = paths.RESULTS
    published: str | None = None
    fit_up_to: int | None = None
    fit_network: bool = False


def add_arguments(parser) -> None:
    add = parser.add_argument
    add("--case", required=True)
    add("--devices", required=True, help="device counts to predict, e.g. 8,16,32,64")
    common_args.cluster(parser, "use this cluster's records and its profile's interconnect figures")
    common_args.results_dir(parser)
    add("--published", metavar="SOURCE", help="fit the case's published figures whose source contains SOURCE")
    add("--fit-up-to", type=int, default=None, help="fit only measurements at or below this many devices")
    add("--fit-network", action="store_true", help="fit bandwidth and latency even when the profile gives them")


def make_request(args, case_args: list[str], argv: list[str]) -> PredictRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(PredictRequest, args)


def run(req: PredictRequest) -> int:
    print(predict(req))
    return 0

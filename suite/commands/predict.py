"""`suite predict`: fit the scaling model (suite/analysis/scaling.py) and print predictions with their assumptions."""

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from suite.analysis.network_figures import measured_network as measured
from suite.analysis.scaling import Measurements, Model, exchange_for, fit, from_points, from_reference
from suite.base import paths
from suite.base.errors import UsageError
from suite.base.stats import fmt_number, speedup_efficiency
from suite.commands import common_args
from suite.execution.clusters import load_cluster
from suite.inputs.cases import load_case
from suite.inputs.hostfiles import positive_ints
from suite.records.read import case_references, load_points


def measurements(case, cluster: str | None, results_dir, published: str | None) -> Measurements:
    if published is not None:
        refs = [r for r in case_references(case.name) if "throughput" in r and published.lower() in r["source"].lower()]
        if not refs:
            raise UsageError(f"case {case.name} has no published throughput figures matching '{published}'")
        return from_reference(refs[0])
    points = [p for p in load_points(results_dir, warn=lambda m: None)
              if p.case == case.name and (cluster is None or p.cluster == cluster)]
    if not points:
        raise UsageError(f"no successful records of {case.name}{f' on {cluster}' if cluster else ''} in {results_dir}")
    commonest = Counter(p.config_key for p in points).most_common(1)[0][0]
    return from_points([p for p in points if p.config_key == commonest])


def measured_network(case_name: str, cluster: str | None, results_dir) -> dict:
    """Bandwidth and latency from the interconnect checks in the records of the cluster (the one
    given, else the only one the case has records of), with a line saying where they come from."""
    points = load_points(results_dir, warn=lambda m: None)
    clusters = {cluster} if cluster else {p.cluster for p in points if p.case == case_name}
    found = measured(p.record for p in points if p.cluster in clusters) if len(clusters) == 1 else None
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
        network = measured_network(case.name, args.cluster, args.results_dir)
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


@dataclass(frozen=True)
class Validation:
    """The model checked against published figures it was not fitted to, two ways:
    extrapolation  fitted on the device counts <= fit_up_to, predicting the larger ones (held out);
    leave-one-out  each device count predicted by a model fitted on all the other ones."""

    case: str
    data: Measurements
    fit_up_to: int
    model: Model                      # the extrapolation fit
    leave_one_out: dict[int, Model]   # devices -> the model fitted without that device count

    @property
    def held_out(self) -> list[int]:
        return sorted(n for n in self.data.points if n > self.fit_up_to)

    def error_pct(self, n: int) -> float:
        """Of the extrapolation model at n: a prediction error where n is held out, else the fit's residual."""
        return 100 * (self.model.throughput(n) - self.data.points[n]) / self.data.points[n]

    def loo_error_pct(self, n: int) -> float:
        return 100 * (self.leave_one_out[n].throughput(n) - self.data.points[n]) / self.data.points[n]


def validate_on_published(case_name: str, published: str, fit_up_to: int) -> Validation:
    case = load_case(case_name)
    data = measurements(case, None, None, published)
    if not any(n > fit_up_to for n in data.points):
        raise ValueError(f"{case_name}: no published point above {fit_up_to} devices to hold out")
    exchange = exchange_for(case.spec, data.devices_per_node)
    model = fit({n: v for n, v in data.points.items() if n <= fit_up_to}, exchange, data.batch_per_device)
    others = {n: fit({m: v for m, v in data.points.items() if m != n}, exchange, data.batch_per_device)
              for n in data.points if len(data.points) > 4}  # 3 parameters: fitted on 4 points or more
    return Validation(case_name, data, fit_up_to, model, others)


def validation_table(case_name: str, published: str, fit_up_to: int) -> str:
    """Markdown: the model fitted on published figures up to `fit_up_to` devices, predicting the rest,
    and each point predicted by a fit on all the others (docs/scaling.md)."""
    v = validate_on_published(case_name, published, fit_up_to)
    points = sorted(v.data.points.items())

    def pct(value: float) -> str:
        return f"{fmt_number(value, 1, sign=True)}%"

    published_eff = {n: e for (n, _), (_, e) in zip(points, speedup_efficiency(points, points[0]))}
    rows = [f"{case_name}, {v.data.source}; extrapolation held out devices {', '.join(map(str, v.held_out))}, "
            f"model: {v.model.describe()}", "",
            f"| devices | published img/s | role (fit on <= {fit_up_to}) | predicted img/s "
            "| error (residual if fitted) | leave-one-out predicted img/s | leave-one-out error | published efficiency "
            "| predicted efficiency |",
            "| ---: | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, value in points:
        held = n > fit_up_to
        error = pct(v.error_pct(n)) if held else f"({pct(v.error_pct(n))})"
        loo = (f"{fmt_number(v.leave_one_out[n].throughput(n), 0)} | {pct(v.loo_error_pct(n))}"
               if n in v.leave_one_out else "- | -")
        rows.append(f"| {n} | {fmt_number(value, 0)} | {'held out' if held else 'fitted'} "
                    f"| {fmt_number(v.model.throughput(n), 0)} | {error} | {loo} "
                    f"| {fmt_number(published_eff[n])}% | {fmt_number(100 * v.model.efficiency(n))}% |")
    return "\n".join(rows)


NAME = "predict"
HELP = "predict throughput and efficiency at other device counts"


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
    return common_args.request_of(PredictRequest, args)


def run(req: PredictRequest) -> int:
    print(predict(req))
    return 0

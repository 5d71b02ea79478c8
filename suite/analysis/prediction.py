"""The predictions of `suite predict`: the scaling model (suite/analysis/scaling.py) fitted to a case's records
or published figures, with network figures measured, from the cluster profile or fitted, as a table that
says what it assumed."""

from collections.abc import Callable
from pathlib import Path

from suite.analysis.network_figures import measured_network
from suite.analysis.scaling import Measurements, exchange_for, fit
from suite.analysis.scaling_validation import measurements
from suite.base.errors import UsageError
from suite.base.stats import fmt_number
from suite.inputs.cases import load_case
from suite.records.read import load_points


def recorded_network(case_name: str, cluster: str | None, results_dir: Path) -> dict:
    """Bandwidth and latency from the interconnect checks in the records of the cluster (the one
    given, else the only one the case has records of): the case's own checks first (a stack's exchange
    gets its own effective figures from the same links: NCCL, Gloo, gRPC, ps-lite), else any case's; with
    a line saying where they come from."""
    points = load_points(results_dir, warn=lambda m: None)
    clusters = {cluster} if cluster else {p.cluster for p in points if p.case == case_name}
    if len(clusters) != 1:
        return {}
    on_cluster = [p for p in points if p.cluster in clusters]
    found = measured_network([p.record for p in on_cluster if p.case == case_name]) or \
        measured_network([p.record for p in on_cluster])
    return {**found[0], "source": found[1]} if found else {}


def predict(case_name: str, devices: list[int], results_dir: Path, cluster: str | None = None,
            published: str | None = None, fit_up_to: int | None = None, fit_network: bool = False,
            profile_interconnect: Callable[[str], dict] = lambda cluster: {}) -> str:
    """The table of predictions at `devices`. The network figures: fitted where fit_network or published;
    else the records' interconnect checks; else the cluster profile's (profile_interconnect(cluster), asked
    only then); else fitted."""
    case = load_case(case_name)
    data = measurements(case, cluster, results_dir, published)
    used = {n: v for n, v in data.points.items() if fit_up_to is None or n <= fit_up_to}
    if not used:
        raise UsageError(f"no measurements at or below {fit_up_to} devices to fit")
    network = {}
    if not fit_network and not published:
        network = recorded_network(case.name, cluster, results_dir)
    if cluster and not fit_network and not network:
        profile = profile_interconnect(cluster)
        network = {**profile, "source": f"from the cluster profile ({profile.get('description', 'interconnect')})"} \
            if profile else {}
    try:
        exchange = exchange_for(case.spec, data)
        model = fit(used, exchange, data.batch_per_device, network.get("bandwidth_gbit_s"), network.get("latency_us"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return format_prediction(model, data, devices, network, case.throughput_unit)


def format_prediction(model, data: Measurements, devices: list[int], network: dict, unit: str = "img/s") -> str:
    lines = [f"measurements: {data.source}",
             "network: " + (network["source"] if network else "fitted from the measurements"),
             f"model: {model.describe()}",
             f"{'devices':>8} {'predicted ' + unit:>19} {'efficiency':>10} {'measured':>10} {'error':>8}"]
    for n in sorted(set(devices) | set(data.points)):
        measured = data.points.get(n)
        error = f"{fmt_number(100 * (model.throughput(n) - measured) / measured, 1, sign=True)}%" if measured else "-"
        fitted = "*" if n in model.fitted_on else " "
        eff = f"{fmt_number(100 * model.efficiency(n))}%"
        shown = f"{fmt_number(measured, 0)}{fitted}" if measured else "-"
        lines.append(f"{n:>8} {fmt_number(model.throughput(n)):>19} {eff:>10} {shown:>10} {error:>8}")
    lines.append("* = used in the fit; efficiency = throughput / (devices x predicted one-device throughput)")
    return "\n".join(lines)

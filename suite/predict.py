"""`suite predict`: fit the scaling model (suite/scaling.py) and print predictions with their assumptions."""

from collections import Counter

from suite.cases import load_case
from suite.clusters import load_cluster
from suite.errors import UsageError
from suite.hostfile import positive_ints
from suite.records import case_references, load_points
from suite.scaling import Measurements, exchange_for, fit, from_points, from_reference


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


def predict(args) -> str:
    case = load_case(args.case)
    devices = positive_ints(args.devices, "--devices")
    data = measurements(case, args.cluster, args.results_dir, args.published)
    used = {n: v for n, v in data.points.items() if args.fit_up_to is None or n <= args.fit_up_to}
    if not used:
        raise UsageError(f"no measurements at or below {args.fit_up_to} devices to fit")
    network = {}
    if args.cluster and not args.fit_network:
        network = load_cluster(args.cluster).interconnect
    try:
        exchange = exchange_for(case.spec, data.devices_per_node)
        model = fit(used, exchange, data.batch_per_device, network.get("bandwidth_gbit_s"), network.get("latency_us"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return format_prediction(model, data, devices, network)


def format_prediction(model, data: Measurements, devices: list[int], network: dict) -> str:
    lines = [f"measurements: {data.source}",
             "network: " + (f"from the cluster profile ({network.get('description', 'interconnect')})" if network
                            else "fitted from the measurements"),
             f"model: {model.describe()}",
             f"{'devices':>8} {'predicted img/s':>16} {'efficiency':>10} {'measured':>10} {'error':>8}"]
    for n in sorted(set(devices) | set(data.points)):
        measured = data.points.get(n)
        error = f"{100 * (model.throughput(n) - measured) / measured:+.1f}%" if measured else "-"
        fitted = "*" if n in model.fitted_on else " "
        eff = f"{100 * model.efficiency(n):.1f}%"
        shown = f"{measured:.0f}{fitted}" if measured else "-"
        lines.append(f"{n:>8} {model.throughput(n):>16.1f} {eff:>10} {shown:>10} {error:>8}")
    lines.append("* = used in the fit; efficiency = throughput / (devices x predicted one-device throughput)")
    return "\n".join(lines)


def validation_table(case_name: str, published: str, fit_up_to: int) -> str:
    """Markdown: the model fitted on published figures up to `fit_up_to` devices against the rest."""
    case = load_case(case_name)
    data = measurements(case, None, None, published)
    model = fit({n: v for n, v in data.points.items() if n <= fit_up_to},
                exchange_for(case.spec, data.devices_per_node), data.batch_per_device)
    one = data.points[min(data.points)]
    rows = [f"{case_name}, {data.source}; fitted on devices <= {fit_up_to}: {model.describe()}", "",
            "| devices | published img/s | predicted img/s | error | published efficiency | predicted efficiency |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, value in sorted(data.points.items()):
        role = " (fit)" if n <= fit_up_to else ""
        predicted = model.throughput(n)
        rows.append(f"| {n}{role} | {value:.0f} | {predicted:.0f} | {100 * (predicted - value) / value:+.1f}% "
                    f"| {100 * value / (n * one):.1f}% | {100 * model.efficiency(n):.1f}% |")
    return "\n".join(rows)

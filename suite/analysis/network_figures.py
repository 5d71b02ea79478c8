"""The network figures of the scaling model from an interconnect check: fitted from its sizes, and the
best measured ones among records (`suite predict`)."""

from suite.analysis.scaling import Exchange


def link_traffic(exchange: str, nbytes: int, participants: int) -> tuple[float, float]:
    """(bytes over the slowest link, latency-bound hops) of one exchange of `nbytes` among `participants`, as the
    scaling model counts them (suite/analysis/scaling.py): a ring all-reduce's 2(n-1)/n x bytes and 2(n-1) hops,
    nccl-tests' bus bandwidth factor; a parameter server's push and pull, 2 x bytes and a hop per worker."""
    return Exchange(exchange, nbytes).traffic(participants)


def network_figures(sizes: list[dict], participants: int, exchange: str) -> dict:
    """The scaling model's two figures, fitted by least squares over the sizes to time = hops x latency +
    link bytes / bandwidth, the traffic of `exchange` (link_traffic)."""
    traffic = [link_traffic(exchange, s["bytes"], participants) for s in sizes]
    hops = traffic[0][1]
    xs = [link for link, _ in traffic]
    ys = [s["latency_us"] * 1e-6 for s in sizes]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    per_byte = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    if per_byte <= 0:  # too noisy to fit: the largest message's bus bandwidth
        per_byte = ys[-1] / xs[-1]
    alpha = max(0.0, my - per_byte * mx)
    return {"bandwidth_gbit_s": round(8 / per_byte / 1e9, 4), "latency_us": round(alpha / hops * 1e6, 2),
            "largest_busbw_gb_s": sizes[-1]["busbw_gb_s"]}


def measured_network(records: list[dict]) -> tuple[dict, str] | None:
    """The figures of the most recent ok check among `records` with the most nodes, and what they are."""
    checked = [r for r in records if (r["metrics"].get("interconnect") or {}).get("status") == "ok"]
    if not checked:
        return None
    best = max(checked, key=lambda r: (r["metrics"]["interconnect"]["nodes"], r["finished_at"]))
    check = best["metrics"]["interconnect"]
    return check["network"], (f"measured by the interconnect check of run {best['run_id']} ({check['implementation']}, "
                              f"{check['ranks']} ranks on {check['nodes']} node(s))")


def summary_line(check: dict, links: str | None = None) -> str:
    """The interconnect check in one line for a run's summary: its largest message's bus bandwidth, the
    fitted figures per hop, and beside them the links each node has (`links`: the system description's
    host_network_card_count), for the reader to set one against the other: which of them the collective
    used is the framework's choice, not something the record knows."""
    if check.get("status") != "ok":
        return f"interconnect check: {check.get('status')}: {check.get('reason')}"
    largest, network = check["sizes"][-1], check["network"]
    beside = f"; each node's links: {links}" if links else ""
    return (f"interconnect: {check['implementation']} ({check['exchange']}) over {check['nodes']} node(s), "
            f"{check['ranks']} participants: bus bandwidth {largest['busbw_gb_s']:.3g} GB/s at "
            f"{largest['bytes'] / 1e6:.1f} MB; {network['bandwidth_gbit_s']:.3g} Gbit/s and "
            f"{network['latency_us']:.3g} us per hop{beside}")

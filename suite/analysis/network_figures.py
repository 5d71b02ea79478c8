"""The network figures of the scaling model from an all-reduce check: fitted from its sizes, and the
best measured ones among records (`suite predict`)."""


def network_figures(sizes: list[dict], ranks: int) -> dict:
    """The scaling model's two figures (suite/analysis/scaling.py, ring all-reduce): time = 2(n-1) x latency +
    2(n-1)/n x bytes / bandwidth, fitted by least squares over the sizes."""
    xs = [s["bytes"] * 2 * (ranks - 1) / ranks for s in sizes]
    ys = [s["latency_us"] * 1e-6 for s in sizes]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    per_byte = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    if per_byte <= 0:  # too noisy to fit: the largest message's bus bandwidth
        per_byte = ys[-1] / xs[-1]
    alpha = max(0.0, my - per_byte * mx)
    return {"bandwidth_gbit_s": round(8 / per_byte / 1e9, 4), "latency_us": round(alpha / (2 * (ranks - 1)) * 1e6, 2),
            "largest_busbw_gb_s": sizes[-1]["busbw_gb_s"]}


def measured_network(records: list[dict]) -> tuple[dict, str] | None:
    """The figures of the most recent ok check among `records` with the most nodes, and what they are."""
    checked = [r for r in records if (r["metrics"].get("interconnect") or {}).get("status") == "ok"]
    if not checked:
        return None
    best = max(checked, key=lambda r: (r["metrics"]["interconnect"]["nodes"], r["finished_at"]))
    check = best["metrics"]["interconnect"]
    return check["network"], (f"measured by the all-reduce check of run {best['run_id']} ({check['implementation']}, "
                              f"{check['ranks']} ranks on {check['nodes']} node(s))")

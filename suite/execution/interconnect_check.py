"""The interconnect check: before the timed repetitions of a point with more than one node (or of any
point with --precheck), an all-reduce sweep (suite/instack/allreduce_sweep.py) launched by the case's own launcher
and scheduler on the point's world, message sizes from 1 MiB up to the model's gradient; for a parameter-server
stack (MXNet over ps-lite) the sweep pushes and pulls each size through the servers instead. Its figures
go into the record's `metrics.interconnect` (its time there too, never in throughput) and `suite
predict` uses them. Bus bandwidth and latency as nccl-tests define them: algbw = bytes / time,
busbw = algbw x 2(n-1)/n (a parameter server's: x 2, a push and a pull over each worker's link), time = the
slowest rank's mean per exchange."""

import json
import time
from pathlib import Path

from suite.analysis.network_figures import link_traffic, network_figures
from suite.execution.plan import first_failure

SCRIPT = Path(__file__).parents[1] / "instack" / "allreduce_sweep.py"
MIB = 2**20
DEFAULT_GRADIENT = 100 * MIB  # a case without [scaling] parameters
TIMEOUT_S = 600
ITERATIONS = 3  # timed all-reduces per size, after one untimed
STALL_S = 300


def wanted(mode: str, nodes: int) -> bool:
    """mode: auto (more than one node), on (--precheck), off (--no-precheck)."""
    return mode == "on" or (mode == "auto" and nodes > 1)


def message_sizes(gradient_bytes: float) -> list[int]:
    """1 MiB, x4 each step, up to the gradient, which is the last size."""
    sizes, size = [], MIB
    while size < gradient_bytes:
        sizes.append(size)
        size *= 4
    return sizes + [max(int(gradient_bytes), MIB)]


def gradient_bytes(case_spec: dict) -> float:
    scaling = case_spec.get("scaling") or {}
    if "parameters" not in scaling:
        return DEFAULT_GRADIENT
    return scaling["parameters"] * scaling.get("bytes_per_parameter", 4)


def run_check(checked, world, run_dir: Path, log, plan_for) -> dict:
    """Runs the sweep for one point through the case's launcher and the run's scheduler;
    plan_for(folder, script, argv) plans a program of the stack on the point's world."""
    api = checked.stack.collective
    if api is None:
        return {"status": "not available", "reason": f"stack {checked.stack.name} names no collective to check "
                                                     f"(`collective` in {checked.stack.dir / 'container.toml'})"}
    if world.devices < 2:
        return {"status": "not available", "reason": "one rank: nothing to all-reduce with"}
    folder = run_dir / "precheck"
    folder.mkdir(parents=True)
    sizes = message_sizes(gradient_bytes(checked.case.spec))
    argv = ["--api", api, "--sizes", ",".join(map(str, sizes)), "--iters", str(ITERATIONS)]
    log(f"interconnect check: {api}'s exchange of {len(sizes)} sizes up to {sizes[-1] / 1e6:.1f} MB on "
        f"{world.devices} devices")
    started = time.monotonic()
    plan = plan_for(folder, str(SCRIPT), argv)
    results = checked.scheduler.execute(plan, folder / "logs", min(TIMEOUT_S, checked.timeout_s), STALL_S,
                                        cluster=checked.cluster_profile)
    seconds = round(time.monotonic() - started, 2)
    bad = first_failure(results)
    if bad:
        return {"status": "failed", "reason": f"{bad.name} on {bad.host}: exit {bad.returncode} {bad.reason or ''}; "
                                              f"log: {bad.log}", "seconds": seconds, "run_dir": str(folder)}
    return {**summarize(folder / "allreduce", world, plan.ranks), "seconds": seconds, "run_dir": str(folder)}


def summarize(folder: Path, world, processes: int) -> dict:
    """The figures of the timings that the `processes` timing the sweep wrote (a plan's ranks: a process per
    device, per node under tfdist, per worker under ps-lite)."""
    ranks = [json.loads(p.read_text()) for p in sorted(folder.glob("rank-*.json"))]
    if len(ranks) != processes:
        return {"status": "failed", "reason": f"{len(ranks)} of {processes} ranks wrote their timings"}
    first = ranks[0]
    n, exchange = first["size"], first.get("exchange", "ring")
    if n < 2:
        return {"status": "not available", "reason": f"one participant in the {exchange} exchange "
                                                     f"({first['implementation']}): nothing crosses a link"}
    sizes = []
    for per_rank in zip(*(r["timings"] for r in ranks)):
        nbytes, seconds = per_rank[0]["bytes"], max(t["seconds"] for t in per_rank)
        link_bytes, _ = link_traffic(exchange, nbytes, n)
        algbw, busbw = nbytes / seconds / 1e9, link_bytes / seconds / 1e9
        sizes.append({"bytes": nbytes, "latency_us": round(seconds * 1e6, 1), "algbw_gb_s": round(algbw, 4),
                      "busbw_gb_s": round(busbw, 4)})
    return {"status": "ok", "reason": None, "implementation": first["implementation"], "device": first["device"],
            "exchange": exchange, "ranks": n, "nodes": world.nodes, "iterations": first["iters"], "sizes": sizes,
            "network": network_figures(sizes, n, exchange)}

"""Sweeps: the records of one `run` over several NODES x GPUS_PER_NODE combinations, and their
speedup and efficiency against a baseline (the smallest device count that succeeded, or --baseline)."""

import secrets
import time
from pathlib import Path

from suite.base.errors import UsageError
from suite.base.jsonfile import write_json_atomic
from suite.base.stats import speedup_efficiency
from suite.records.read import Point, load_point


def new_sweep_id(case: str) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{case}-sweep-{secrets.token_hex(3)}"


def load_baseline(path: str | None) -> Point | None:
    if not path:
        return None
    problems = []
    point = load_point(Path(path), warn=problems.append) if Path(path).is_file() else None
    if point is None:
        why = problems[0] if problems else "not a file, or a failed run"
        raise UsageError(f"--baseline {path} is not a successful result record ({why})")
    return point


def summarize_sweep(sweep_id: str, written: list[tuple[dict, Path]], baseline: Point | None) -> dict:
    ok = [(record, path) for record, path in written if record["status"] == "ok"]
    if baseline is None and ok:
        baseline = Point(*min(ok, key=lambda rp: (rp[0]["world"]["devices"], rp[0]["world"]["nodes"])))
    rows = []
    for record, path in written:
        tp = record["metrics"]["throughput"]
        row = {"run_id": record["run_id"], "record": str(path), "status": record["status"],
               "reason": record["reason"], "nodes": record["world"]["nodes"], "devices": record["world"]["devices"],
               "throughput": tp["mean"], "ci95": tp["ci95"], "per_device": tp["per_device"],
               "speedup": None, "efficiency_pct": None}
        if baseline and tp["mean"]:
            [(row["speedup"], row["efficiency_pct"])] = speedup_efficiency(
                [(row["devices"], tp["mean"])], (baseline.devices, baseline.throughput["mean"]))
        rows.append(row)
    first = written[0][0]
    return {"sweep_id": sweep_id, "case": first["case"], "cluster": first["world"].get("cluster"),
            "scaling_rule": first["config"].get("lr_rule"),
            "baseline": {"run_id": baseline.record["run_id"], "devices": baseline.devices,
                         "throughput": baseline.throughput["mean"]} if baseline else None,
            "rows": rows}


def write_sweep(summary: dict, folder: Path) -> Path:
    path = folder / f"{summary['sweep_id']}.json"
    write_json_atomic(path, summary, overwrite=False)
    return path


def print_sweep(summary: dict, path: Path) -> None:
    base = summary["baseline"]
    print(f"\n== sweep {summary['sweep_id']}: speedup against "
          + (f"{base['devices']} device(s), {base['throughput']:.2f} img/s ({base['run_id']})"
             if base else "nothing (no point succeeded)"))
    print(f"   {'nodes':>5} {'devices':>7} {'img/s':>10} {'± 95% CI':>9} {'per device':>10} {'speedup':>8} "
          f"{'efficiency':>10}  status")
    for r in summary["rows"]:
        def fmt(value, spec):
            return format(value, spec) if value is not None else "-"
        print(f"   {r['nodes']:>5} {r['devices']:>7} {fmt(r['throughput'], '10.2f')} {fmt(r['ci95'], '9.2f')} "
              f"{fmt(r['per_device'], '10.2f')} {fmt(r['speedup'], '8.2f')} {fmt(r['efficiency_pct'], '9.1f')}%  "
              f"{r['status']}")
    print(f"   summary: {path}")

"""Sweeps: the records of one `run` over several NODES x GPUS_PER_NODE combinations, and their
speedup and efficiency against a baseline (the smallest device count that succeeded, or --baseline);
the sweep's plan, written before its first point runs, so that a resume knows every point.

A plan (reports/sweeps/<sweep_id>.plan.json) is shaped as a record where a resume reads it as one
(`provenance`: the command line, the request, the checkout and, once prepared, the stack; `execution`;
`config.options`), and holds the points, each with the records written for it so far."""

import json
import re
import secrets
import time
from pathlib import Path

from suite.analysis.what_ran import unit_of
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
            "unit": unit_of(Point(*written[0])),
            "scaling_rule": first["config"].get("lr_rule"),
            "baseline": {"run_id": baseline.record["run_id"], "devices": baseline.devices,
                         "throughput": baseline.throughput["mean"]} if baseline else None,
            "rows": rows}


def write_sweep(summary: dict, folder: Path, overwrite: bool = False) -> Path:
    path = folder / f"{summary['sweep_id']}.json"
    write_json_atomic(path, summary, overwrite=overwrite)
    return path


def sweeps_folder(results_dir: Path) -> Path:
    """Where a results folder's sweep tables and plans go: sweeps/ beside it."""
    return Path(results_dir).parent / "sweeps"


def point_of(record: dict) -> tuple[int, int]:
    """A sweep's point as a record has it: (nodes, devices)."""
    return record["world"]["nodes"], record["world"]["devices"]


def new_plan(sweep_id: str, case: str, points: list[tuple[int, int]], provenance: dict, execution: dict,
             options: dict, baseline: str | None, started_at: str) -> dict:
    """A sweep's plan: its points, (nodes, devices) smallest first, none run yet; `provenance` holds at least
    the command line (argv) and the request as records keep them (suite.execution.request.recorded)."""
    return {"sweep_id": sweep_id, "case": case, "started_at": started_at, "baseline": baseline,
            "provenance": provenance, "execution": execution, "config": {"options": options},
            "points": [{"nodes": nodes, "devices": devices, "records": []} for nodes, devices in points],
            "resumes": []}


def note_record(plan: dict, record: dict, path: Path) -> None:
    """A record written for one of the plan's points."""
    entry = {"run_id": record["run_id"], "status": record["status"], "record": str(path)}
    for point in plan["points"]:
        if (point["nodes"], point["devices"]) == point_of(record):
            point["records"].append(entry)
            return
    plan["points"].append({"nodes": record["world"]["nodes"], "devices": record["world"]["devices"],
                           "records": [entry]})


def plan_path(folder: Path, sweep_id: str) -> Path:
    return folder / f"{sweep_id}.plan.json"


def write_plan(plan: dict, folder: Path) -> Path:
    path = plan_path(folder, plan["sweep_id"])
    write_json_atomic(path, plan)
    return path


def read_plan(folder: Path, sweep_id: str) -> dict | None:
    """The sweep's plan; None where it has none (a sweep made before plans were written)."""
    path = plan_path(folder, sweep_id)
    if not path.is_file():
        return None
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"sweep plan {path} cannot be read: {exc}") from None
    if not isinstance(plan, dict) or plan.get("sweep_id") != sweep_id or not isinstance(plan.get("points"), list):
        raise UsageError(f"{path} is not the plan of sweep {sweep_id}")
    return plan


def sweep_records(results_dir: Path, sweep_id: str) -> list[tuple[dict, Path]]:
    """The records of a results folder that carry the sweep's id, in the order they finished."""
    if not re.fullmatch(r"[\w.-]+", sweep_id):
        raise UsageError(f"not a sweep id: '{sweep_id}' (a sweep's id is a word such as "
                         "20260101T120000Z-pytorch-ddp-sweep-a1b2c3)")
    found = []
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            text = path.read_text()
            record = json.loads(text) if sweep_id in text else None
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("sweep_id") == sweep_id and isinstance(record.get("world"), dict):
            found.append((record, path))
    return sorted(found, key=lambda rp: str(rp[0].get("finished_at")))


def print_sweep(summary: dict, path: Path) -> None:
    base, unit = summary["baseline"], summary["unit"]
    print(f"\n== sweep {summary['sweep_id']}: speedup against "
          + (f"{base['devices']} device(s), {base['throughput']:.2f} {unit} ({base['run_id']})"
             if base else "nothing (no point succeeded)"))
    print(f"   {'nodes':>5} {'devices':>7} {unit:>10} {'± 95% CI':>9} {'per device':>10} {'speedup':>8} "
          f"{'efficiency':>10}  status")
    for r in summary["rows"]:
        def fmt(value, spec):
            return format(value, spec) if value is not None else "-"
        print(f"   {r['nodes']:>5} {r['devices']:>7} {fmt(r['throughput'], '10.2f')} {fmt(r['ci95'], '9.2f')} "
              f"{fmt(r['per_device'], '10.2f')} {fmt(r['speedup'], '8.2f')} {fmt(r['efficiency_pct'], '9.1f')}%  "
              f"{r['status']}")
    print(f"   summary: {path}")

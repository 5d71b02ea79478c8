"""The resume engine behind `suite resume SWEEP_ID`: the points of a sweep that have no ok record (failed, cut
short, among them a SLURM job ended by its time limit, scancel or a node failure, or never started) run again
with the sweep's own request, as the same sweep, and its table is written again from the old records and the new
together.

The points come from the sweep's plan (reports/sweeps/<sweep_id>.plan.json, written before its first point ran;
suite/analysis/sweeps.py), or for a sweep older than plans from its records and their request as this checkout
resolves it. Before launch, the stack, the suite's checkout, the case options and the device type are checked
against the sweep's latest record (its plan where it has none) as `suite rerun` checks a record
(suite/execution/rerun.py): each difference is a `drift:` line, and the resume is refused (exit 2) unless
--allow-drift. So is a sweep that is not there, and one whose every point has an ok record."""

import sys
from dataclasses import replace

from suite.analysis.sweeps import new_plan, note_record, point_of, read_plan, sweep_records, sweeps_folder
from suite.base.errors import UsageError
from suite.execution.plugins import ENDED_BY_SCHEDULER
from suite.execution.request import SUITE, RunRequest, from_record
from suite.execution.rerun import differences
from suite.execution.run import Checked, Sweep, check, run
from suite.records.write import utc_now

# What a plan made from a record keeps of its provenance (the rest is the record's own: hosts, versions).
LEFT_OUT = ("host_info", "system_description", "versions", "environment")


def resume(asked) -> int:
    """`asked`: the resume command's request (suite/commands/resume.py: sweep_id, argv, allow_drift, folders,
    dry_run)."""
    sweep_id = asked.sweep_id
    records = sweep_records(asked.results_dir, sweep_id)
    plan = read_plan(sweeps_folder(asked.results_dir), sweep_id)
    if plan is None and not records:
        raise UsageError(f"no sweep {sweep_id}: no plan {sweeps_folder(asked.results_dir)}/{sweep_id}.plan.json and "
                         f"no record in {asked.results_dir} with that sweep_id")
    reference = latest(records, "ok") or latest(records) or plan
    original = from_record(plan or reference)
    plan = plan or plan_of_records(sweep_id, reference, records, planned_now(sweep_id, original, asked))
    points = [(p["nodes"], p["devices"]) for p in plan["points"]]
    ok = {point_of(r): (r, path) for r, path in records if r["status"] == "ok"}  # the latest ok one of each point
    todo = [p for p in points if p not in ok]
    if not todo:
        raise UsageError(f"sweep {sweep_id}: nothing to resume, all {len(points)} points have an ok record "
                         f"({', '.join(show(p) for p in points)})")
    req = request(original, todo, asked, plan.get("baseline"))
    checked = possible(sweep_id, lambda: check(req))
    drift = possible(sweep_id, lambda: [*differences(reference, req, checked, world=False),
                                        *point_drift(todo, checked, bool(original.gpus_per_node))])
    if drift and not asked.allow_drift:
        for line in drift:
            print(f"drift: {line}", file=sys.stderr)
        raise UsageError(f"resume of sweep {sweep_id} refused: {len(drift)} difference(s) from its "
                         f"{'record ' + reference['run_id'] if 'run_id' in reference else 'plan'}, one per 'drift:' "
                         "line above; remove them or resume with --allow-drift (Make: ALLOW_DRIFT=1)")
    for line in drift:
        print(f"drift (allowed): {line}")
    if any(p not in {(w.nodes, w.devices) for w in checked.worlds} for p in todo):
        req.gpus_per_node = ",".join(sorted({str(d // n) for n, d in todo}, key=int))  # the sweep's counts, as asked
    kept = [p for p in points if p in ok]
    print(f"sweep {sweep_id}: {len(todo)} of {len(points)} points to run again, "
          + "; ".join(f"{show(p)} ({why(p, records, plan)})" for p in todo)
          + (f"; kept: {', '.join(map(show, kept))}" if kept else ""))
    if not asked.dry_run:
        plan["resumes"].append({"at": utc_now(), "argv": [*SUITE, *asked.argv], "points": [list(p) for p in todo],
                                "drift": drift})
    return run(req, Sweep(sweep_id, plan, set(todo), [ok[p] for p in kept]))


def latest(records: list[tuple[dict, object]], status: str | None = None) -> dict | None:
    """The last record to finish (of that status)."""
    return next((r for r, _ in reversed(records) if status in (None, r["status"])), None)


def show(point: tuple[int, int]) -> str:
    nodes, devices = point
    return f"{nodes} node(s) x {devices} device(s)"


def why(point: tuple[int, int], records: list[tuple[dict, object]], plan: dict) -> str:
    """Why a point runs again: its last record failed (and why), or it has none here (the plan may name one
    written elsewhere, or since removed)."""
    failed = [r for r, _ in records if point_of(r) == point]
    if not failed:
        named = [e for p in plan["points"] if (p["nodes"], p["devices"]) == point for e in p["records"]]
        return f"its record {named[-1]['run_id']} is not in the results folder" if named else "never started"
    last = failed[-1]
    state = (last["execution"].get("slurm") or {}).get("state")
    if state in ENDED_BY_SCHEDULER:
        return f"{state}: {last['run_id']}"
    reason = last["reason"] or ""
    return f"failed: {last['run_id']}: {reason[:120]}{'...' if len(reason) > 120 else ''}"


def possible(sweep_id: str, step):
    """A step that may find the resume impossible here (UsageError): says so naming the sweep."""
    try:
        return step()
    except UsageError as exc:
        raise UsageError(f"cannot resume sweep {sweep_id}: {exc}") from None


def request(original: RunRequest, todo: list[tuple[int, int]], asked, baseline: str | None) -> RunRequest:
    """The sweep's request for the points to run: its node counts and, where it gave them, devices per node,
    narrowed to those points (run keeps only them), this invocation's folders."""
    per_node = sorted({d // n for n, d in todo})
    return replace(original, nodes=",".join(str(n) for n in sorted({n for n, _ in todo})),
                   gpus_per_node=",".join(map(str, per_node)) if original.gpus_per_node else None,
                   results_dir=asked.results_dir, runs_dir=asked.runs_dir, dry_run=asked.dry_run, run_id=None,
                   baseline=baseline, argv=[], rerun_of=None)


def point_drift(todo: list[tuple[int, int]], checked: Checked, counts_given: bool) -> list[str]:
    """Points whose devices per node came from the hostfile or profile (no GPUS_PER_NODE) and that it
    no longer gives (with --allow-drift the sweep's count is asked for)."""
    now = {(w.nodes, w.devices): w for w in checked.worlds}
    by_nodes = {w.nodes: w for w in checked.worlds}
    return [f"devices per node: {d // n} for {n} node(s) in the sweep, {by_nodes[n].devices // n} from "
            f"{by_nodes[n].source} now" for n, d in todo
            if (n, d) not in now and not counts_given and n in by_nodes]


def planned_now(sweep_id: str, original: RunRequest, asked) -> list[tuple[int, int]]:
    """The points of a sweep without a plan: what its request resolves to here and now."""
    req = replace(original, results_dir=asked.results_dir, runs_dir=asked.runs_dir, dry_run=True, baseline=None)
    return [(w.nodes, w.devices) for w in possible(sweep_id, lambda: check(req).worlds)]


def plan_of_records(sweep_id: str, record: dict, records: list[tuple[dict, object]],
                    planned: list[tuple[int, int]]) -> dict:
    """The plan of a sweep made before plans were written: its points are those of its records and those its
    request resolves to now; its provenance is its latest record's."""
    points = sorted({*planned, *(point_of(r) for r, _ in records)}, key=lambda p: (p[1], p[0]))
    plan = new_plan(sweep_id, record["case"], points,
                    {k: v for k, v in record["provenance"].items() if k not in LEFT_OUT},
                    {"stack": record["execution"]["stack"], "runtime": record["execution"]["runtime"],
                     "scheduler": record["execution"]["scheduler"]}, record["config"]["options"], None,
                    records[0][0]["started_at"])
    for r, path in records:
        note_record(plan, r, path)
    return plan

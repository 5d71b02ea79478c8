"""Run directory -> one result record (schema: suite/schema/record.schema.json, docs/record.md)."""

import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from suite import __version__, paths
from suite.errors import RunFailed
from suite.jsonfile import write_json_atomic
from suite.procenv import recorded_env
from suite.stats import mean_ci95

SCHEMA_VERSION = 2  # 2: provenance.git_diff_sha256 and rerun_of; version 1 records still validate
SCHEMA = json.loads((Path(__file__).parent / "schema" / "record.schema.json").read_text())


@dataclass
class Repetition:
    """What one launch measured: throughput samples (img/s, all devices) per timed iteration."""

    index: int
    run_dir: str
    status: str = "ok"
    reason: str | None = None
    samples: list[float] = field(default_factory=list)
    images: int = 0
    seconds: float = 0.0
    warmup: dict = field(default_factory=dict)
    starts: list[dict] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)
    results: dict = field(default_factory=dict)
    exit_codes: dict = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    launched_at: float | None = None

    def summary(self) -> dict:
        mean = sum(self.samples) / len(self.samples) if self.samples else None
        return {"index": self.index, "status": self.status, "reason": self.reason, "run_dir": self.run_dir,
                "throughput": mean, "images": self.images, "timed_seconds": self.seconds,
                "warmup": self.warmup, "epochs": self.epochs, "results": self.results,
                "exit_codes": self.exit_codes, "command": self.command, "processes": self.processes,
                "launched_at": self.launched_at,
                "cpus": [s.get("binding", {}).get("cpus") for s in self.starts]}  # per rank, read back by the probe


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_run_id(case: str, nodes: int, devices: int) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{case}-{nodes}n{devices}d-{secrets.token_hex(3)}"


def read_rank_events(run_dir: Path) -> dict[int, list[dict]]:
    events: dict[int, list[dict]] = {}
    for path in sorted((run_dir / "ranks").glob("rank-*.jsonl")):
        lines = path.read_text().splitlines()
        # A rank killed mid-write may leave a partial last line; everything before it is sound.
        parsed = []
        for line in lines:
            try:
                parsed.append(json.loads(line))
            except ValueError:
                break
        events[int(path.stem.split("-")[1])] = parsed
    return events


def measure(rep: Repetition, expected_ranks: int) -> None:
    """Fill the repetition from its rank files. Per timed unit (iteration or epoch): images of all
    ranks / the slowest rank's time. The first epoch of an epoch-based case is its warmup."""
    events = read_rank_events(Path(rep.run_dir))
    if sorted(events) != list(range(expected_ranks)):
        raise RunFailed(f"expected probe files of ranks 0..{expected_ranks - 1}, found ranks {sorted(events)}")
    if any(not ev or ev[-1]["event"] != "end" for ev in events.values()):
        unfinished = [r for r, ev in events.items() if not ev or ev[-1]["event"] != "end"]
        raise RunFailed(f"rank(s) {unfinished} did not finish (no end line in their probe files)")
    rep.starts = [next(e for e in events[r] if e["event"] == "start") for r in sorted(events)]
    rep.results = {k: v for r in sorted(events) for e in events[r] if e["event"] == "result"
                   for k, v in e["metrics"].items()}
    units = _aligned(events, "iteration")
    epochs = _aligned(events, "epoch")
    if epochs:
        rep.epochs = [_combine(unit, with_metrics=True) for unit in epochs]
        rep.warmup = {k: rep.epochs[0][k] for k in ("images", "seconds")}
        units = epochs[1:]
        if not units:
            raise RunFailed("an epoch-based case needs at least 2 epochs: the first is not timed")
    else:
        warmups = [e for ev in events.values() for e in ev if e["event"] == "warmup"]
        if warmups:
            rep.warmup = {"images": sum(e["images"] for e in warmups), "seconds": max(e["seconds"] for e in warmups)}
    if not units:
        raise RunFailed("the case reported no timed iterations or epochs")
    for unit in units:
        combined = _combine(unit)
        rep.samples.append(combined["throughput"])
        rep.images += combined["images"]
        rep.seconds += combined["seconds"]


def _aligned(events: dict[int, list[dict]], kind: str) -> list[tuple[dict, ...]]:
    per_rank = [[e for e in events[r] if e["event"] == kind] for r in sorted(events)]
    counts = {len(units) for units in per_rank}
    if len(counts) != 1:
        raise RunFailed(f"ranks reported different numbers of {kind}s: {[len(u) for u in per_rank]}")
    return list(zip(*per_rank))


def _combine(unit: tuple[dict, ...], with_metrics: bool = False) -> dict:
    images = sum(e["images"] for e in unit)
    seconds = max(e["seconds"] for e in unit)
    combined = {"index": unit[0]["index"], "images": images, "seconds": seconds, "throughput": images / seconds}
    if with_metrics:
        combined["metrics"] = unit[0].get("metrics", {})
    return combined


def throughput_metrics(reps: list[Repetition], devices: int) -> dict:
    """Mean ± 95% CI: over repetition means when there are several, else over iteration samples."""
    measured = [r for r in reps if r.status == "ok" and r.samples]
    if not measured:
        return {"unit": "img/s", "mean": None, "per_device": None, "ci95": None, "ci95_basis": None,
                "samples": [], "repetitions": [], "n": 0}
    rep_means = [sum(r.samples) / len(r.samples) for r in measured]
    samples = [s for r in measured for s in r.samples]
    basis = rep_means if len(rep_means) > 1 else samples
    mean, ci = mean_ci95(basis)
    return {
        "unit": "img/s",
        "mean": mean,
        "per_device": mean / devices,
        "ci95": ci,
        "ci95_basis": "repetitions" if len(rep_means) > 1 else "iterations",
        "n": len(basis),
        "samples": samples,
        "repetitions": rep_means,
    }


def git_state() -> dict:
    def git(*args):
        out = subprocess.run(["git", "-C", str(paths.ROOT), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    # Identifies the uncommitted changes, so a rerun can tell an identical dirty checkout from another.
    diff = subprocess.run(["git", "-C", str(paths.ROOT), "diff", "HEAD", "--binary"], capture_output=True).stdout \
        if dirty else None
    return {"git_commit": commit, "git_dirty": bool(dirty) if commit else None,
            "git_diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None}


_VALIDATOR = None  # built on first use by validate()


def validate(record: dict) -> None:
    """Raises jsonschema.ValidationError (the most relevant error, as jsonschema.validate picks it)
    when `record` does not satisfy the record schema. The validator is built, and the schema itself
    checked, once per process: jsonschema.validate() re-checks the schema on every call, which made
    `report` over 10,000 records take over two minutes (issue 19)."""
    global _VALIDATOR
    import jsonschema  # imported on first use: keeps the runner's start-up short

    if _VALIDATOR is None:
        cls = jsonschema.validators.validator_for(SCHEMA)  # the draft the schema's $schema names (2020-12)
        cls.check_schema(SCHEMA)
        _VALIDATOR = cls(SCHEMA)
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(record))
    if error is not None:
        raise error


def write_record(record: dict, results_dir: Path) -> Path:
    validate(record)
    path = results_dir / f"{record['run_id']}.json"
    write_json_atomic(path, record, overwrite=False)
    return path


# Variables that change how frameworks, launchers and schedulers behave: recorded for reproducibility.
def suite_provenance(argv: list[str]) -> dict:
    return {"argv": argv, "suite_version": __version__, "runner_python": sys.version.split()[0],
            "user": os.environ.get("USER"), "environment": recorded_env(os.environ), **git_state()}


@dataclass
class RunContext:
    """What the runner knows before launch, and the record's fixed parts."""

    run_id: str
    case: object
    options: dict
    world: object
    runtime: str
    scheduler: str
    argv: list[str]
    started_at: str
    sweep_id: str | None = None
    cluster: str | None = None
    rerun_of: dict | None = None  # set by `suite rerun`: the record this run repeats
    cpu_bind: str = "none"  # the policy the ranks were asked to bind by (suite/binding.py)


def build_record(ctx: RunContext, reps: list[Repetition], stack_provenance: dict, plan_details: dict,
                 failure: str | None) -> dict:
    starts = [s for r in reps for s in r.starts]
    first = starts[0] if starts else {}
    spec = ctx.case.record_spec
    reported = first.get("config", {})
    batch = reported.get("batch_per_device") or ctx.options.get(spec.get("batch_per_device"))
    failed = [r for r in reps if r.status != "ok"]
    reason = failure or (f"repetition {failed[0].index}: {failed[0].reason}" if failed else None)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": ctx.run_id,
        "sweep_id": ctx.sweep_id,
        "case": ctx.case.name,
        "status": "failed" if reason else "ok",
        "reason": reason,
        "started_at": ctx.started_at,
        "finished_at": utc_now(),
        "config": {
            "model": reported.get("model_name") or spec.get("model"),
            "data": reported.get("data") or spec.get("data"),
            "batch_per_device": batch,
            "global_batch": reported.get("global_batch") or (batch * ctx.world.devices if batch else None),
            "image_size": reported.get("image_size") or ctx.options.get(spec.get("image_size")),
            "dtype": reported.get("dtype"),
            "parameters": reported.get("parameters"),
            "lr_rule": spec.get("lr_rule"),
            "repeat": len(reps),
            "options": ctx.options,
            "reported_by_case": reported,
        },
        "world": {
            "nodes": ctx.world.nodes,
            "devices": ctx.world.devices,
            "hosts": ctx.world.hostnames,
            "slots": {h.name: h.slots for h in ctx.world.hosts},
            "hostfile": ctx.world.source,
            "cluster": ctx.cluster or Path(ctx.world.source).stem,
            "device_type": reported.get("device_type"),
            "binding": binding(ctx.cpu_bind, reps),
        },
        "execution": {"runtime": ctx.runtime, "scheduler": ctx.scheduler, "stack": ctx.case.stack,
                      **plan_details},
        "metrics": {
            "throughput": throughput_metrics(reps, ctx.world.devices),
            "timed_images": sum(r.images for r in reps),
            "timed_seconds": sum(r.seconds for r in reps),
            "epochs": [{"repetition": r.index, **e} for r in reps for e in r.epochs],
            "results": [{"repetition": r.index, **r.results} for r in reps if r.results],
        },
        "repetitions": [r.summary() for r in reps],
        "provenance": {
            **suite_provenance(ctx.argv),
            **stack_provenance,
            "stack_lock_sha256": stack_provenance.get("stack_lock_sha256"),
            "versions": first.get("versions", {}),
            "host_info": _host_info(starts),
            "rerun_of": ctx.rerun_of,
        },
    }


def binding(policy: str, reps: list[Repetition]) -> dict:
    """The policy, and the cpus each rank had in the first repetition that started (its probe read them back)."""
    starts = next((r.starts for r in reps if r.starts), [])
    ranks = [{"rank": s["rank"], "host": s["host"], "cpus": s.get("binding", {}).get("cpus")} for s in starts]
    return {"policy": policy, "ranks": ranks}


def _host_info(starts: list[dict]) -> dict:
    from suite.probe import host_info

    found = {s["host"]: s["host_info"] for s in starts if s.get("host_info")}
    return found or {"launch-host": host_info()}

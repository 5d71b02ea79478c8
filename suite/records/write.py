"""One run point -> one result record (schema: suite/records/record.schema.json, docs/record.md): what
the runner knew before launch, what each repetition measured and the provenance of stack and suite,
checked against the schema and written atomically."""

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from suite.base.env_policy import masked_env
from suite.base.jsonfile import write_json_atomic
from suite.records.measure import Repetition, throughput_metrics
from suite.records.provenance import suite_provenance
from suite.records.schema import SCHEMA_VERSION, validate


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_run_id(case: str, nodes: int, devices: int) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{case}-{nodes}n{devices}d-{secrets.token_hex(3)}"


def write_record(record: dict, results_dir: Path) -> Path:
    validate(record)
    path = results_dir / f"{record['run_id']}.json"
    write_json_atomic(path, record, overwrite=False)
    return path


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
    cpu_bind: str = "none"  # the policy the ranks were asked to bind by (suite/instack/cpu_binding.py)
    request: dict | None = None  # the request as asked (suite.execution.request.recorded): what a rerun reads back
    device_asked: str | None = None  # "cuda": GPUs were there and asked for; ranks on another device fail the run
    cluster_env: dict = field(default_factory=dict)  # the cluster profile's [env] as the run applied it


def build_record(ctx: RunContext, reps: list[Repetition], stack_provenance: dict, plan_details: dict,
                 failure: str | None) -> dict:
    starts = [s for r in reps for s in r.starts]
    first = starts[0] if starts else {}
    spec = ctx.case.record_spec
    reported = first.get("config", {})
    batch = reported.get("batch_per_device") or ctx.options.get(spec.get("batch_per_device"))
    failed = [r for r in reps if r.status != "ok"]
    reason = failure or trained_elsewhere(ctx.device_asked, starts) \
        or (f"repetition {failed[0].index}: {failed[0].reason}" if failed else None)
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
                      "cluster_env": masked_env(ctx.cluster_env),
                      "cluster_env_not_seen": env_not_seen(ctx.cluster_env, starts), **plan_details},
        "metrics": {
            "throughput": throughput_metrics(reps, ctx.world.devices, ctx.case.throughput_unit),
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
            "request": ctx.request,
            "rerun_of": ctx.rerun_of,
        },
    }


def env_not_seen(planned: dict, starts: list[dict]) -> list[str]:
    """Each rank that saw a variable of the cluster profile's [env] otherwise than the run set it (a container
    or a remote host that did not pass it on), in words; at most 20 lines."""
    lines = []
    for start in starts:
        seen = start.get("site_env") or {}
        lines += [f"rank {start.get('rank')} on {start.get('host')}: {name}={seen.get(name) or '(unset)'}, set to "
                  f"{value!r}" for name, value in sorted(planned.items()) if seen.get(name) != value]
    return list(dict.fromkeys(lines))[:20]


def trained_elsewhere(asked: str | None, starts: list[dict]) -> str | None:
    """Why a run asked on GPUs fails where a rank reports another device (a CPU build of the
    framework, a driver older than its CUDA): its figure is not a GPU's."""
    other = next((s for s in starts if asked and s.get("config", {}).get("device_type") != asked), None)
    if other is None:
        return None
    config = other.get("config", {})
    return (f"asked to train on {asked} (GPUs are present and were asked for) but rank {other.get('rank')} on "
            f"{other.get('host')} trained on {config.get('device_name') or config.get('device_type')}")


def binding(policy: str, reps: list[Repetition]) -> dict:
    """The policy, and the cpus each rank had in the first repetition that started (its probe read them back)."""
    starts = next((r.starts for r in reps if r.starts), [])
    ranks = [{"rank": s["rank"], "host": s["host"], "cpus": s.get("binding", {}).get("cpus")} for s in starts]
    return {"policy": policy, "ranks": ranks}


def _host_info(starts: list[dict]) -> dict:
    from suite.instack.probe import host_info

    found = {s["host"]: s["host_info"] for s in starts if s.get("host_info")}
    return found or {"launch-host": host_info()}

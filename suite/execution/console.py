"""What a run prints on the console: a dry run's plans, as the run engine (suite/execution/run.py) gathers
them without starting anything, and each point's summary once its record is written (what trained and where,
the throughput with its 95% interval, the diagnosis, the interconnect check, utilisation, peak memory and published
comparison)."""

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from suite.analysis.diagnosis import summary_line
from suite.analysis.network_figures import summary_line as interconnect_line
from suite.analysis.references import summary_line as published_line
from suite.analysis.utilisation import summary_line as utilisation_line
from suite.analysis.what_ran import all_settings, settings_of
from suite.base.env_policy import masked_env
from suite.execution.plan import Plan
from suite.records.read import Point
from suite.records.write import RunContext


@dataclass(frozen=True)
class DryRunPoint:
    """One point of a dry run: its context, the plan of its first repetition and how the scheduler would
    start it."""

    ctx: RunContext
    launcher: str
    plan: Plan
    precheck: bool  # the interconnect check runs before the timed run
    started_as: str  # the scheduler's description (Scheduler.describe)


@dataclass(frozen=True)
class DryRun:
    """What a dry run shows: the stack as this machine has it, what a real run would refuse here (a plan for
    a cluster is often written elsewhere), what every process starts after, and each point's plan."""

    stack: dict | None  # the prepared stack's provenance (None: it could not be prepared here)
    on_this_machine: list[str]
    runtime: str
    setup: list[str]  # the runtime's lines before every process
    telemetry_interval: float | None
    points: list[DryRunPoint]


def print_dry_run(dry: DryRun) -> None:
    """Prints every point's plan (each process with its host, argv and environment) and how the
    scheduler would start it; what a real run would refuse on this machine is said in warning lines."""
    if dry.stack is not None:
        print(f"stack {dry.stack.get('stack')}/{dry.stack.get('stack_flavour') or 'site environment'}: "
              f"{dry.stack.get('stack_location')}")
    for warning in dry.on_this_machine:
        print(f"warning: on this machine: {warning}")
    if dry.setup:
        print(f"every process of runtime {dry.runtime} starts after:\n" + "\n".join(f"  {line}" for line in dry.setup))
    for point in dry.points:
        ctx, world = point.ctx, point.ctx.world
        print(f"== {ctx.run_id}: {ctx.case.name} on {world.nodes} node(s), {world.devices} device(s) "
              f"from {world.source}; runtime {ctx.runtime}, scheduler {ctx.scheduler}, launcher {point.launcher}")
        for p in point.plan.processes:
            env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in masked_env(p.env).items())
            print(f"process {p.name} on {p.host}\n  argv: {shlex.join(p.argv)}\n  env: {env}\n  cwd: {p.cwd}")
        if dry.telemetry_interval:
            print("beside them: a telemetry sampler on each host (suite/instack/telemetry_sampler.py, "
                  f"every {dry.telemetry_interval:g} s)")
        if point.precheck:
            print("before the timed run: the interconnect check (suite/instack/allreduce_sweep.py) "
                  "through the same launcher")
        print(point.started_as)
    print("dry run: nothing was started and no record was written")


def configuration(cfg: dict) -> str:
    """What trained, from the record's config: the values the case reported, else those asked for; a value
    neither says (a run that failed before its first step, an option left to the case) is left out."""
    parts = [cfg.get("model"), cfg.get("batch_per_device") and f"batch {cfg['batch_per_device']}/device",
             cfg.get("image_size") and f"{cfg['image_size']} px", cfg.get("dtype"),
             cfg.get("data") and f"{cfg['data']} data"]
    return ", ".join(str(part) for part in parts if part) or "nothing reported by the case"


def settings_line(record: dict, path: Path) -> str | None:
    """The settings that change the work or the speed (parallel mode, compilation and its mode, preset,
    optimizer implementation, ...), in the words the report's hover gives them, or None where the case
    has none of them."""
    shown = all_settings(settings_of(Point(record, str(path))))
    return f"settings: {', '.join(shown)}" if shown else None


def peak_memory_line(record: dict) -> str | None:
    """The ranks' peak memory as the case measured it (its results' peak_memory_bytes), or None."""
    for results in record["metrics"].get("results") or []:
        if peaks := results.get("peak_memory_bytes"):
            basis = f": {results['peak_memory_basis']}" if results.get("peak_memory_basis") else ""
            return (f"peak memory per device: {max(peaks) / 2**20:,.1f} MiB at most, {min(peaks) / 2**20:,.1f} MiB "
                    f"at least, over {len(peaks)} device(s){basis}")
    return None


def time_line(record: dict) -> str | None:
    """Where the first launch's wall time went (its repetition's timeline), or None where it has none."""
    reps = record.get("repetitions") or []
    phases = (reps[0].get("timeline") or {}) if reps else {}
    if "total_s" not in phases:
        return None
    of = f" (repetition 1 of {len(reps)})" if len(reps) > 1 else ""
    text = timeline_text(phases)
    return f"time: {phases['total_s']:.1f} s from launch to exit{of}" + (f": {text}" if text else "")


TIMELINE_WORDS = (("to_start_line_s", "to the start line"), ("to_warmup_s", "to the warmup"), ("warmup_s", "warmup"),
                  ("window_s", "timed window"), ("after_window_s", "after it"), ("to_exit_s", "to the exit"))
TIMELINE_INSIDE = (("compile_s", "compile"), ("matmul_peak_s", "matmul peak"))


def timeline_text(phases: dict) -> str:
    """A launch's timeline (suite.records.measure.timeline) in words, the case's compilation and matmul
    peak inside the phase before the warmup."""
    inside = ", ".join(f"{what} {phases[key]:.1f}" for key, what in TIMELINE_INSIDE if key in phases)
    return ", ".join(f"{what} {phases[key]:.1f}" + (f" ({inside})" if key == "to_warmup_s" and inside else "")
                     for key, what in TIMELINE_WORDS if key in phases)


def batch_search_line(search: dict | None) -> str | None:
    """What --batch-size max chose and why: the largest batch that trained and what stopped the next one."""
    if not search:
        return None
    tried = f"{len(search['trials'])} trial(s) in {search['seconds']:.0f} s"
    bound = search.get("bound")
    if search["found"] is None:
        return f"batch search: no batch trained ({bound['why'] if bound else 'stopped'}); {tried}"
    stop = f"; {bound['batch']} did not: {bound['why']}" if bound else ""
    return f"batch search: --{search['option']} max chose {search['found']}, the largest that trained{stop}; {tried}"


def nccl_conf_line(record: dict) -> str | None:
    """What NCCL's configuration files set on the run's hosts (provenance.host_info's nccl_conf), each file's
    settings once with the hosts that have them; None where no host has such a file."""
    hosts_of: dict[str, list[str]] = {}
    for host, info in ((record.get("provenance") or {}).get("host_info") or {}).items():
        for path, settings in (info.get("nccl_conf") or {}).items():
            hosts_of.setdefault(nccl_file_text(path, settings), []).append(host)
    if not hosts_of:
        return None
    files = "; ".join(f"{said} (on {', '.join(hosts)})" for said, hosts in hosts_of.items())
    return f"NCCL's files: {files}; NCCL takes each setting that the environment leaves unset"


def nccl_file_text(path: str, settings: dict) -> str:
    return f"{path} sets {', '.join(f'{name}={value}' for name, value in settings.items())}"


def nccl_files_text(files: dict) -> str:
    """NCCL's files of one host (probe.nccl_conf), each with its settings, or "none"."""
    return "; ".join(nccl_file_text(path, settings) for path, settings in files.items()) or "none"


def print_summary(record: dict, path: Path) -> None:
    cfg, world, tp = record["config"], record["world"], record["metrics"]["throughput"]
    print(f"\n== {record['case']}: {configuration(cfg)}")
    device = f" ({world['device_type']})" if world.get("device_type") else ""
    print(f"   {world['nodes']} node(s), {world['devices']} device(s){device}, hosts {', '.join(world['hosts'])}")
    if tp["mean"] is not None:
        ci = f" ± {tp['ci95']:.2f}" if tp["ci95"] is not None else ""
        unit = tp.get("unit", "img/s")
        print(f"   throughput: {tp['mean']:.2f}{ci} {unit} total, {tp['per_device']:.2f} {unit} per device "
              f"(mean{' ± 95% CI' if ci else ''}, n={tp['n']} {tp['ci95_basis']})")
    if settings := settings_line(record, path):
        print(f"   {settings}")
    # what the case says a setting did at this size (world size 1 ...)
    for note in (cfg.get("reported_by_case") or {}).get("notes") or []:
        print(f"   note: {note}")
    if nccl := nccl_conf_line(record):
        print(f"   {nccl}")
    if diagnosis := record["metrics"].get("diagnosis"):
        print(f"   {summary_line(diagnosis)}")
    if check := record["metrics"].get("interconnect"):
        links = (record["provenance"].get("system_description") or {}).get("host_network_card_count")
        print(f"   {interconnect_line(check, links)}")
    if used := record["metrics"].get("utilisation"):
        print(f"   {utilisation_line(used)}")
    if memory := peak_memory_line(record):
        print(f"   {memory}")
    if took := time_line(record):
        print(f"   {took}")
    if searched := batch_search_line(record["metrics"].get("batch_search")):
        print(f"   {searched}")
    if published := record["metrics"].get("published"):
        print(f"   {published_line(published)}")
    if record["status"] != "ok":
        print(f"   FAILED: {record['reason']}", file=sys.stderr)
    print(f"   record: {path}")

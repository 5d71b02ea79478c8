"""`suite run`: check every input, then install the stack, launch each repetition and write one record."""

import re
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from suite import paths, plugins
from suite.clusters import Cluster, load_cluster
from suite.cases import Case, load_case
from suite.errors import RunFailed, UsageError
from suite.hostfile import World, positive_int, positive_ints, read_hostfile, select_world
from suite.plan import Launch
from suite.records import Point
from suite.results import (Repetition, RunContext, build_record, masked_env, measure, new_run_id, utc_now,
                           write_record)
from suite.stacks import Stack, load_stack
from suite.sweeps import load_baseline, new_sweep_id, print_sweep, summarize_sweep, write_sweep

INTERRUPTED = "interrupted (SIGINT/SIGTERM on the runner)"


@dataclass
class RunRequest:
    case: str
    nodes: str
    gpus_per_node: str | None
    hostfile: str | None
    runtime: str | None
    scheduler: str | None
    repeat: str
    timeout: str | None
    case_args: list[str]
    results_dir: Path
    runs_dir: Path
    data_dir: Path | None
    argv: list[str]
    baseline: str | None = None
    cluster: str | None = None
    stall: str | None = None
    dry_run: bool = False
    run_id: str | None = None  # set by the slurm scheduler for the run inside its batch job


def log(message: str) -> None:
    print(f"suite: {message}", flush=True)


@dataclass
class Checked:
    """Everything `run` needs, checked before anything is launched."""

    case: Case
    options: dict
    worlds: list[World]
    repeat: int
    timeout_s: float
    stall_s: float
    runtime: ModuleType
    launcher: ModuleType
    scheduler: ModuleType
    stack: Stack
    baseline: Point | None
    cluster: str
    data_dir: Path
    image_dir: Path | None
    cluster_profile: Cluster | None = None


def check(req: RunRequest) -> Checked:
    case = load_case(req.case)
    options = case.parse_options(req.case_args)
    cluster = load_cluster(req.cluster) if req.cluster else None
    nodes = positive_ints(req.nodes, "NODES")
    gpus_text = req.gpus_per_node or (cluster and cluster.devices_per_node)
    gpus = positive_ints(gpus_text, "GPUS_PER_NODE") if gpus_text else [None]
    if cluster and cluster.devices_per_node and max(g or 0 for g in gpus) > cluster.devices_per_node:
        raise UsageError(f"GPUS_PER_NODE={max(gpus)} but cluster {cluster.name} has {cluster.devices_per_node} "
                         f"device(s) per node ({cluster.path})")
    repeat = positive_int(req.repeat, "REPEAT")
    timeout_s = float(positive_int(req.timeout, "TIMEOUT")) if req.timeout else case.timeout_s
    stall_s = float(positive_int(req.stall, "STALL")) if req.stall else case.stall_s
    runtime = plugins.load("runtimes", req.runtime or (cluster.runtime if cluster else "local"))
    scheduler = plugins.load("schedulers", req.scheduler or (cluster.scheduler if cluster else "local"))
    if hasattr(scheduler, "check"):  # the scheduler's settings in the profile, and its commands
        scheduler.check(cluster, req.dry_run)
    hostfile = str(req.hostfile or (cluster and cluster.hostfile) or paths.HOSTFILES / "localhost")
    # A scheduler may know the hosts itself (slurm: the allocation's nodes); else the hostfile's.
    hosts, hostfile, cluster_name = (scheduler.hosts(max(nodes)) if hasattr(scheduler, "hosts")
                                     else (read_hostfile(hostfile), hostfile, None))
    worlds = sorted((select_world(hosts, n, g, hostfile) for n in nodes for g in gpus),
                    key=lambda w: (w.devices, w.nodes))
    if req.run_id and (len(worlds) > 1 or not re.fullmatch(r"[\w.-]+", req.run_id)):
        raise UsageError(f"--run-id names one run point: a word for a single NODES and GPUS_PER_NODE, got '{req.run_id}'")
    data_dir = Path(req.data_dir or (cluster and cluster.data_dir) or paths.data_dir())
    checked = Checked(case, options, worlds, repeat, timeout_s, stall_s, runtime,
                      plugins.load("launchers", case.launcher), scheduler,
                      load_stack(case.stack), load_baseline(req.baseline),
                      cluster.name if cluster else cluster_name or Path(hostfile).stem, data_dir,
                      cluster.container_dir if cluster else None, cluster)
    case.check_data(options, data_dir)
    return checked


def plugin_name(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


def run(req: RunRequest) -> int:
    """One launch per repetition of every NODES x GPUS_PER_NODE combination, smallest first; one
    record per combination; with several combinations, a sweep summary with speedup at the end."""
    checked = check(req)
    sweep_id = new_sweep_id(checked.case.name) if len(checked.worlds) > 1 else None
    stack_env, failure = None, None
    try:
        stack_env = checked.runtime.prepare(checked.stack, log, binds=(req.runs_dir, checked.data_dir),
                                            image_dir=checked.image_dir)
    except KeyboardInterrupt:
        failure = INTERRUPTED
    except (RuntimeError, OSError) as exc:
        failure = f"stack {checked.stack.name} could not be prepared: {exc}"
    if req.dry_run:
        return dry_run(req, checked, stack_env, failure)
    written = []
    for world in checked.worlds:
        record, path = run_point(req, checked, world, stack_env, failure, sweep_id)
        written.append((record, path))
        if record["reason"] == INTERRUPTED:
            break
    if sweep_id:
        summary = summarize_sweep(sweep_id, written, checked.baseline)
        print_sweep(summary, write_sweep(summary, req.results_dir.parent / "sweeps"))
    return 0 if all(record["status"] == "ok" for record, _ in written) else 1


def run_point(req: RunRequest, checked: Checked, world: World, stack_env, failure: str | None,
              sweep_id: str | None) -> tuple[dict, Path]:
    case = checked.case
    ctx = run_context(req, checked, world, sweep_id)
    log(f"run {ctx.run_id}: {case.name} on {world.nodes} node(s), {world.devices} device(s) "
        f"[{', '.join(f'{h.name}:{h.slots}' for h in world.hosts)}], runtime {ctx.runtime}")
    reps: list[Repetition] = []
    details = {}
    provenance = stack_env.provenance if stack_env else {"stack": checked.stack.name,
                                                         "stack_lock_sha256": checked.stack.lock_sha256}
    # A scheduler may take the whole point over (slurm outside an allocation: a batch job).
    take_over = getattr(checked.scheduler, "run_point", None)
    if take_over and stack_env and not failure and (record := take_over(req, checked, ctx, stack_env)):
        path = write_record(record, req.results_dir)
        print_summary(record, path)
        return record, path
    try:
        for index in range(checked.repeat if stack_env else 0):
            rep_dir = req.runs_dir / ctx.run_id / f"rep-{index}"
            rep_dir.mkdir(parents=True)
            plan = checked.launcher.plan(Launch(str(case.script), req.case_args, world, stack_env, str(rep_dir),
                                                str(checked.data_dir)))
            details = plan.details
            log(f"repetition {index + 1}/{checked.repeat}: {' '.join(plan.processes[0].argv[:8])} ...")
            reps.append(run_repetition(index, plan, checked.scheduler, rep_dir, checked.timeout_s, checked.stall_s,
                                       checked.cluster_profile))
    except KeyboardInterrupt:
        failure = INTERRUPTED
    except (RunFailed, RuntimeError, OSError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    record = build_record(ctx, reps, provenance, details, failure)
    path = write_record(record, req.results_dir)
    print_summary(record, path)
    return record, path


def run_repetition(index, plan, scheduler, rep_dir: Path, timeout_s: float, stall_s: float,
                   cluster: Cluster | None = None) -> Repetition:
    rep = Repetition(index=index, run_dir=str(rep_dir), command=plan.processes[0].argv,
                     processes=[{"name": p.name, "host": p.host, "argv": p.argv, "env": masked_env(p.env)}
                                for p in plan.processes])
    rep.launched_at = time.time()
    results = scheduler.execute(plan, rep_dir / "logs", timeout_s, stall_s, cluster=cluster)
    rep.exit_codes = {r.name: r.returncode for r in results}
    # The process that failed by itself, rather than one stopped because of it.
    bad = next((r for r in results if not r.ok and r.reason is None), None) or next((r for r in results if not r.ok), None)
    if bad:
        rep.status = "failed"
        last = next((line for line in reversed(bad.tail) if line.strip()), "")
        how = bad.reason or exit_description(bad.returncode)
        said = f"first error: {bad.first_error!r}" if bad.first_error else f"last output: {last!r}"
        rep.reason = f"{bad.name} on {bad.host} {how}; {said}; log: {bad.log}"
        return rep
    try:
        measure(rep, plan.ranks)
    except RunFailed as exc:
        rep.status, rep.reason = "failed", str(exc)
    return rep


def run_context(req: RunRequest, checked: Checked, world: World, sweep_id: str | None) -> RunContext:
    case = checked.case
    return RunContext(req.run_id or new_run_id(case.name, world.nodes, world.devices), case, checked.options, world,
                      plugin_name(checked.runtime), plugin_name(checked.scheduler), req.argv, utc_now(), sweep_id,
                      checked.cluster)


def dry_run(req: RunRequest, checked: Checked, stack_env, failure: str | None) -> int:
    """Prints every point's plan (each process with its host, argv and environment) and how the
    scheduler would start it; starts nothing and writes no record."""
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    for world in checked.worlds:
        ctx = run_context(req, checked, world, None)
        rep_dir = req.runs_dir / ctx.run_id / "rep-0"
        plan = checked.launcher.plan(Launch(str(checked.case.script), req.case_args, world, stack_env, str(rep_dir),
                                            str(checked.data_dir)))
        print(f"== {ctx.run_id}: {checked.case.name} on {world.nodes} node(s), {world.devices} device(s) "
              f"from {world.source}; runtime {ctx.runtime}, scheduler {ctx.scheduler}, launcher {checked.case.launcher}")
        for p in plan.processes:
            env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in masked_env(p.env).items())
            print(f"process {p.name} on {p.host}\n  argv: {shlex.join(p.argv)}\n  env: {env}\n  cwd: {p.cwd}")
        if hasattr(checked.scheduler, "describe"):
            print(checked.scheduler.describe(req, checked, ctx, plan))
    print("dry run: nothing was started and no record was written")
    return 0


def exit_description(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"was killed by signal {-returncode} ({signal.Signals(-returncode).name})"
    return f"exited with {returncode}"


def print_summary(record: dict, path: Path) -> None:
    cfg, world, tp = record["config"], record["world"], record["metrics"]["throughput"]
    print(f"\n== {record['case']}: {cfg['model']}, batch {cfg['batch_per_device']}/device, "
          f"{cfg['image_size']} px, {cfg['dtype']}, {cfg['data']} data")
    print(f"   {world['nodes']} node(s), {world['devices']} device(s) ({world['device_type']}), "
          f"hosts {', '.join(world['hosts'])}")
    if tp["mean"] is not None:
        ci = f" ± {tp['ci95']:.2f}" if tp["ci95"] is not None else ""
        print(f"   throughput: {tp['mean']:.2f}{ci} img/s total, {tp['per_device']:.2f} img/s per device "
              f"(mean{' ± 95% CI' if ci else ''}, n={tp['n']} {tp['ci95_basis']})")
    if record["status"] != "ok":
        print(f"   FAILED: {record['reason']}", file=sys.stderr)
    print(f"   record: {path}")

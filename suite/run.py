"""`suite run`: check every input, then install the stack, launch each repetition and write one record."""

import sys
from dataclasses import dataclass
from pathlib import Path

from suite import plugins
from suite.cases import load_case
from suite.errors import RunFailed, UsageError
from suite.hostfile import positive_int, read_hostfile, select_world
from suite.plan import Launch
from suite.results import Repetition, RunContext, build_record, measure, new_run_id, utc_now, write_record
from suite.stacks import load_stack


@dataclass
class RunRequest:
    case: str
    nodes: str
    gpus_per_node: str | None
    hostfile: str
    runtime: str
    scheduler: str
    repeat: str
    timeout: str | None
    case_args: list[str]
    results_dir: Path
    runs_dir: Path
    data_dir: Path
    argv: list[str]


def log(message: str) -> None:
    print(f"suite: {message}", flush=True)


def run(req: RunRequest) -> int:
    case = load_case(req.case)
    options = case.parse_options(req.case_args)
    nodes = positive_int(req.nodes, "NODES")
    gpus = positive_int(req.gpus_per_node, "GPUS_PER_NODE") if req.gpus_per_node else None
    repeat = positive_int(req.repeat, "REPEAT")
    timeout_s = float(positive_int(req.timeout, "TIMEOUT")) if req.timeout else case.timeout_s
    world = select_world(read_hostfile(req.hostfile), nodes, gpus, req.hostfile)
    runtime = plugins.load("runtimes", req.runtime)
    launcher = plugins.load("launchers", case.launcher)
    scheduler = plugins.load("schedulers", req.scheduler)
    stack = load_stack(case.stack)
    case.check_data(options, req.data_dir)

    ctx = RunContext(new_run_id(case.name, world.nodes, world.devices), case, options, world,
                     req.runtime, req.scheduler, req.argv, utc_now())
    run_root = req.runs_dir / ctx.run_id
    log(f"run {ctx.run_id}: {case.name} on {world.nodes} node(s), {world.devices} device(s) "
        f"[{', '.join(f'{h.name}:{h.slots}' for h in world.hosts)}], runtime {req.runtime}")
    reps: list[Repetition] = []
    stack_provenance, details, failure = {"stack": stack.name, "stack_lock_sha256": stack.lock_sha256}, {}, None
    try:
        stack_env = runtime.prepare(stack, log)
        stack_provenance = stack_env.provenance
        for index in range(repeat):
            rep_dir = run_root / f"rep-{index}"
            rep_dir.mkdir(parents=True)
            plan = launcher.plan(Launch(str(case.script), req.case_args, world, stack_env, str(rep_dir),
                                        str(req.data_dir)))
            details = plan.details
            log(f"repetition {index + 1}/{repeat}: {' '.join(plan.processes[0].argv[:8])} ...")
            reps.append(run_repetition(index, plan, scheduler, rep_dir, timeout_s))
    except KeyboardInterrupt:
        failure = "interrupted (SIGINT/SIGTERM on the runner)"
    except (RunFailed, RuntimeError, OSError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    record = build_record(ctx, reps, stack_provenance, details, failure)
    path = write_record(record, req.results_dir)
    print_summary(record, path)
    return 0 if record["status"] == "ok" else 1


def run_repetition(index, plan, scheduler, rep_dir: Path, timeout_s: float) -> Repetition:
    rep = Repetition(index=index, run_dir=str(rep_dir), command=plan.processes[0].argv)
    results = scheduler.execute(plan, rep_dir / "logs", timeout_s)
    rep.exit_codes = {r.name: r.returncode for r in results}
    bad = next((r for r in results if not r.ok), None)
    if bad:
        rep.status = "failed"
        last = next((line for line in reversed(bad.tail) if line.strip()), "")
        how = bad.reason or f"exited with {bad.returncode}"
        said = f"first error: {bad.first_error!r}" if bad.first_error else f"last output: {last!r}"
        rep.reason = f"{bad.name} on {bad.host} {how}; {said}; log: {bad.log}"
        return rep
    try:
        measure(rep, plan.ranks)
    except RunFailed as exc:
        rep.status, rep.reason = "failed", str(exc)
    return rep


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

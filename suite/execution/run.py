"""The run engine behind `suite run`, `suite rerun` and `suite compare-frameworks`: a request's inputs checked,
its stack installed, each repetition of each point launched and one record written per point. What the console
shows, a dry run's plans and each point's summary, is printed by suite/execution/console.py."""

import math
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from suite.analysis.diagnosis import diagnose
from suite.analysis.references import comparison
from suite.analysis.sweeps import (
    load_baseline,
    new_plan,
    new_sweep_id,
    note_record,
    print_sweep,
    summarize_sweep,
    sweeps_folder,
    write_plan,
    write_sweep,
)
from suite.analysis.utilisation import utilisation
from suite.base import paths
from suite.base.env_policy import masked_env
from suite.base.errors import INTERRUPTED, RunFailed, UsageError
from suite.base.log import log
from suite.execution import batch_search, plugins, strays
from suite.execution.clusters import Cluster, applied_env, interface_settings, load_cluster
from suite.execution.console import DryRun, DryRunPoint, print_dry_run, print_summary
from suite.execution.interconnect_check import run_check, wanted
from suite.execution.plan import Launch, Plan, StackEnv, StackRequest, first_failure
from suite.execution.plugins import BatchJob
from suite.execution.request import SUITE, RunRequest, recorded, to_argv
from suite.execution.samplers import with_samplers
from suite.inputs.cases import Case, load_case
from suite.inputs.counts import positive_int, positive_ints
from suite.inputs.host_gpus import PROBE_SCRIPT, check_devices, count_from_probe
from suite.inputs.host_network import INTERFACE_VARIABLES, INTERFACES_SCRIPT, refuse_missing_interfaces
from suite.inputs.hostfiles import Host, World, read_hostfile, select_world
from suite.instack import matmul_peak
from suite.instack.cpu_binding import POLICIES
from suite.instack.probe import announced
from suite.records.measure import Repetition, measure, read_rank_events, starts_of, timeline
from suite.records.provenance import git_state
from suite.records.read import Point
from suite.records.system_description import system_description
from suite.records.telemetry_window import summarize as summarize_telemetry
from suite.records.write import RunContext, build_record, new_run_id, utc_now, write_record
from suite.stacks import build_needs
from suite.stacks.recipes import Stack, load_stack

# Each host's GPUs, network interfaces and InfiniBand devices, read by one step there before launch.
HOST_PROBE = ("sh", "-c", f"{PROBE_SCRIPT}; {INTERFACES_SCRIPT}")


@dataclass
class Checked:
    """Everything `run` needs, checked before anything is launched."""

    case: Case
    options: dict
    worlds: list[World]
    repeat: int
    timeout_s: float
    stall_s: float
    runtime: plugins.Runtime
    launcher: plugins.Launcher
    scheduler: plugins.Scheduler
    stack: Stack
    baseline: Point | None
    cluster: str
    data_dir: Path
    image_dir: Path | None
    cluster_profile: Cluster | None = None
    warnings: list[str] = field(default_factory=list)  # what a dry run found missing on this machine
    cpu_bind: str = "none"
    gpus: dict[str, int | None] = field(default_factory=dict)  # GPUs per host of the plan (None: not known)
    wheels: Path | None = None  # where a local stack installs from (None: the package index)
    search_asked: batch_search.Asked | None = None  # --batch-size max: searched per point before it is measured
    site_env: dict = field(default_factory=dict)  # the profile's [env] as this run applies it
    host_probes: dict = field(default_factory=dict)  # each host's HOST_PROBE output (None: not read before launch)


def check(req: RunRequest) -> Checked:
    case = load_case(req.case)
    options, search = case_options(case, req.case_args)
    cluster = load_cluster(req.cluster) if req.cluster else None
    nodes, gpus = positive_ints(req.nodes, "NODES"), gpus_asked(req, cluster)
    repeat = positive_int(req.repeat, "REPEAT")
    timeout_s, stall_s = time_limits(req, case)
    runtime = plugins.load("runtimes", req.runtime or (cluster.runtime if cluster else "local"))
    scheduler = plugins.load("schedulers", req.scheduler or (cluster.scheduler if cluster else "local"))
    scheduler.check(cluster, req.dry_run)
    site_options(req, runtime.name)
    hostfile = str(req.hostfile or (cluster and cluster.hostfile) or paths.HOSTFILES / "localhost")
    allocated = scheduler.hosts(max(nodes))
    hosts, hostfile, cluster_name = allocated or (read_hostfile(hostfile), hostfile, None)
    facts = host_facts(scheduler, [h.name for h in hosts[:max(nodes)]], cluster, req.dry_run)
    refuse_missing_interfaces(interface_settings(cluster, os.environ), facts)
    found = {host: None if out is None else count_from_probe(out, host) for host, out in facts.items()}
    if gpus == [None] and nodes == [1] and not (allocated or req.hostfile or (cluster and cluster.hostfile)) \
            and found.get(hosts[0].name):
        gpus = [found[hosts[0].name]]  # a GPU host's own count, where no hostfile or profile says otherwise
    worlds = checked_worlds(req, case, options, [select_world(hosts, n, g, hostfile) for n in nodes for g in gpus],
                            found, hostfile)
    cpu_bind = req.cpu_bind or (cluster.cpu_bind if cluster else "none")
    check_settings(req, worlds, cpu_bind)
    checked = Checked(case, options, worlds, repeat, timeout_s, stall_s, runtime,
                      plugins.load("launchers", case.launcher_name(options)), scheduler,
                      load_stack(case.stack), load_baseline(req.baseline),
                      cluster.name if cluster else cluster_name or Path(hostfile).stem,
                      Path(req.data_dir or (cluster and cluster.data_dir) or paths.data_dir()),
                      cluster.container_dir if cluster else None, cluster, cpu_bind=cpu_bind, gpus=found,
                      wheels=req.wheels or (cluster.wheels if cluster else None), search_asked=search,
                      site_env=applied_env(cluster, os.environ), host_probes=facts)
    try:
        case.check_data(options, checked.data_dir)
    except UsageError as exc:
        if not req.dry_run:
            raise
        checked.warnings.append(str(exc))
    placeholder = StackEnv(runtime.name, "/stack/bin")  # the real one exists only once the stack is prepared
    for world in worlds:  # a launcher's refusal must come now, not after earlier points ran
        plan_point(req, checked, world, placeholder, req.runs_dir / "check")
    check_folders(req, sweep=len(worlds) > 1)
    return checked


def gpus_asked(req: RunRequest, cluster: Cluster | None) -> list[int | None]:
    """GPUS_PER_NODE, else the profile's devices per node ([None]: neither says), within the profile's count."""
    gpus_text = req.gpus_per_node or (cluster and cluster.devices_per_node)
    gpus = positive_ints(gpus_text, "GPUS_PER_NODE") if gpus_text else [None]
    if cluster and cluster.devices_per_node and max(g or 0 for g in gpus) > cluster.devices_per_node:
        raise UsageError(f"GPUS_PER_NODE={max(gpus)} but cluster {cluster.name} has {cluster.devices_per_node} "
                         f"device(s) per node ({cluster.path})")
    return gpus


def time_limits(req: RunRequest, case: Case) -> tuple[float, float]:
    """A launch's timeout and stall limit in seconds (TIMEOUT, STALL, else the case's), with the sampler's
    interval checked beside them."""
    if req.telemetry_interval is not None and not 0 <= req.telemetry_interval <= 3600:
        raise UsageError("--telemetry-interval must be 0 (no sampler) or seconds up to 3600, "
                         f"got {req.telemetry_interval}")
    timeout_s = float(positive_int(req.timeout, "TIMEOUT")) if req.timeout else case.timeout_s
    stall_s = float(positive_int(req.stall, "STALL")) if req.stall else case.stall_s
    return timeout_s, stall_s


def checked_worlds(req: RunRequest, case: Case, options: dict, worlds: list[World], found: dict, hostfile: str
                   ) -> list[World]:
    """The run's points, smallest first, each checked against the GPUs its hosts have and the case's limits."""
    worlds = sorted(worlds, key=lambda w: (w.devices, w.nodes))
    for world in worlds:
        check_devices({h.name: h.slots for h in world.hosts}, found,
                      "GPUS_PER_NODE" if req.gpus_per_node else f"slots in {hostfile}")
        case.check_world(options, world)
    return worlds


def check_settings(req: RunRequest, worlds: list[World], cpu_bind: str) -> None:
    """--run-id, the CPU binding policy and the matmul peak's seconds, each refused in one line where wrong."""
    if req.run_id and (len(worlds) > 1 or not re.fullmatch(r"[\w.-]+", req.run_id)):
        raise UsageError("--run-id names one run point: a word for a single NODES and GPUS_PER_NODE, "
                         f"got '{req.run_id}'")
    if cpu_bind not in POLICIES:
        raise UsageError(f"CPU_BIND must be one of {', '.join(POLICIES)}, got '{cpu_bind}'")
    try:
        matmul_peak.configured_seconds()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def case_options(case: Case, case_args: list[str]) -> tuple[dict, batch_search.Asked | None]:
    """The case's options parsed and checked, and the batch search asked for (--batch-size max: the options
    then hold the batch the search starts from)."""
    search = batch_search.asked(case, case_args)
    return case.parse_options(search.args_at(case_args, search.start) if search else case_args), search


def check_folders(req: RunRequest, sweep: bool) -> None:
    """Records, run folders and a sweep's table can be written where they go: found out before anything runs
    (a dry run by the permissions alone: it writes nothing), not when the record of the work done cannot be
    written."""
    folders = [(req.results_dir, "--results-dir (Make: RESULTS)"), (req.runs_dir, "--runs-dir (Make: RUNS)")]
    if sweep:
        folders.append((sweeps_folder(req.results_dir), "the sweep's table, beside --results-dir (Make: RESULTS),"))
    for folder, what in folders:
        paths.refuse_unwritable(folder, what, try_a_file=not req.dry_run)


def site_options(req: RunRequest, runtime: str) -> None:
    """MODULES, SOURCE and PYTHON describe a site's environment: another runtime would ignore them."""
    given = [f"--{name}" for name in ("modules", "source", "python") if getattr(req, name) is not None]
    if given and runtime != "modules":
        raise UsageError(f"{', '.join(given)} (Make: MODULES, SOURCE, PYTHON) choose the environment of "
                         f"RUNTIME=modules; runtime {runtime} brings its own stack (add RUNTIME=modules, or leave "
                         "them out)")


def host_facts(scheduler, hosts: list[str], cluster, dry_run: bool) -> dict[str, str | None]:
    """Each host's GPUs and network interfaces as one short probe through the scheduler prints them (None
    where it cannot run now; a dry run reads this machine only)."""
    run_on_hosts = plugins.SchedulerDefaults().run_on_hosts if dry_run else scheduler.run_on_hosts
    return run_on_hosts(list(dict.fromkeys(hosts)), HOST_PROBE, cluster)


def plan_point(req: RunRequest, checked: Checked, world: World, stack_env: StackEnv, rep_dir: Path,
               script: str | None = None, argv: list[str] | None = None) -> Plan:
    """The launch of the case (or of another program of its stack: the interconnect check) on a world."""
    launch = Launch(script or str(checked.case.script), req.case_args if argv is None else argv, world, stack_env,
                    str(rep_dir), str(checked.data_dir), checked.options,
                    checked.scheduler.placement(checked.cluster_profile), checked.cpu_bind,
                    device_asked(checked, world), checked.site_env)
    checked.launcher.check(launch)
    return named(checked.launcher.plan(launch))


def device_asked(checked: Checked, world: World) -> str | None:
    """"cuda" where every host of the world has GPUs (the devices asked for are GPUs there: a count
    given, or a GPU host's own) and the case was not told to stay on the CPU (--no-cuda)."""
    if checked.options.get("no-cuda") or not world.hosts:
        return None
    return "cuda" if all(checked.gpus.get(host.name) for host in world.hosts) else None


def named(plan: Plan) -> Plan:
    """Every process told its name (SUITE_PROCESS), which it writes with its host (suite.instack.probe.announce)."""
    return replace(plan, processes=tuple(replace(p, env={**p.env, "SUITE_PROCESS": p.name}) for p in plan.processes))


@dataclass
class Sweep:
    """A sweep as a run carries it on: its id, its plan (reports/sweeps/<sweep_id>.plan.json, written before
    the first point and after each) and, where it resumes a sweep (suite/execution/resume.py), the points to run
    and the ok records of the others, which its table keeps beside the new ones."""

    id: str
    plan: dict
    points: set[tuple[int, int]] | None = None  # (nodes, devices) to run; None: every point of the request
    kept: list[tuple[dict, Path]] = field(default_factory=list)


def run(req: RunRequest, sweep: Sweep | None = None, checked: Checked | None = None) -> int:
    """One launch per repetition of every NODES x GPUS_PER_NODE combination, smallest first; one
    record per combination; with several combinations (or a sweep resumed), a sweep: its plan written before
    the first point, its summary with speedup at the end. `checked`: check(req), where the caller has it."""
    checked = checked or check(req)
    if sweep and sweep.points is not None:
        checked.worlds = [w for w in checked.worlds if (w.nodes, w.devices) in sweep.points]
    if req.dry_run:
        print_dry_run(dry_run_plan(req, checked))
        return 0
    if sweep is None and len(checked.worlds) > 1:
        sweep_id = new_sweep_id(checked.case.name)
        sweep = Sweep(sweep_id, sweep_plan(sweep_id, req, checked))
    folder = sweeps_folder(req.results_dir)
    if sweep:
        sweep.plan["points"].sort(key=lambda p: (p["devices"], p["nodes"]))
        log(f"sweep {sweep.id}: {len(checked.worlds)} point(s) to run; plan {write_plan(sweep.plan, folder)}")
    stack_env, failure = None, None
    req.runs_dir.mkdir(parents=True, exist_ok=True)  # a container runtime binds it, so it must exist now
    try:
        stack_env = prepare(req, checked)
    except KeyboardInterrupt:
        failure = INTERRUPTED
    except (RuntimeError, OSError) as exc:
        failure = f"stack {checked.stack.name} could not be prepared: {exc}"
    if stack_env:
        check_stack(req, checked, stack_env)
        if sweep and "stack_location" not in sweep.plan["provenance"]:  # the sweep's stack (a resume keeps it)
            sweep.plan["provenance"].update(stack_env.provenance)
            write_plan(sweep.plan, folder)
    written = []
    for world in checked.worlds:
        record, path = run_point(req, checked, world, stack_env, failure, sweep.id if sweep else None)
        written.append((record, path))
        if sweep:
            note_record(sweep.plan, record, path)
            write_plan(sweep.plan, folder)
        if record["reason"] == INTERRUPTED:
            break
    if sweep:
        rows = sorted([*sweep.kept, *written], key=lambda rp: (rp[0]["world"]["devices"], rp[0]["world"]["nodes"]))
        summary = summarize_sweep(sweep.id, rows, checked.baseline)
        summary["resumes"] = sweep.plan["resumes"]
        print_sweep(summary, write_sweep(summary, folder, overwrite=bool(sweep.plan["resumes"])))
    return 0 if all(record["status"] == "ok" for record, _ in written) else 1


def sweep_plan(sweep_id: str, req: RunRequest, checked: Checked) -> dict:
    """A new sweep's plan: every point, and what a resume needs to ask for them again and to check that they
    run as the sweep did (the stack is added once prepared)."""
    return new_plan(sweep_id, checked.case.name,
                    [(w.nodes, w.devices) for w in checked.worlds],
                    {"argv": req.provenance_argv(), "request": recorded(req), **git_state()},
                    {"stack": checked.stack.name, "runtime": checked.runtime.name, "scheduler": checked.scheduler.name},
                    checked.options, req.baseline, utc_now())


def prepare(req: RunRequest, checked: Checked, install: bool = True) -> StackEnv:
    return checked.runtime.prepare(stack_request(req, checked, install), log)


def stack_request(req: RunRequest, checked: Checked, install: bool = True) -> StackRequest:
    """What the runtime is asked for: the stack, where it comes from, and where the run's first host is."""
    first = checked.worlds[0].hosts[0].name

    def words(text: str | None) -> tuple[str, ...] | None:
        return None if text is None else tuple(text.split())

    return StackRequest(checked.stack, req.flavour, checked.wheels, (str(req.runs_dir), str(checked.data_dir)),
                        checked.image_dir, checked.cluster_profile, checked.gpus.get(first), install,
                        words(req.modules), words(req.source), req.python, checked.scheduler.name, first)


def check_stack(req: RunRequest, checked: Checked, stack_env: StackEnv) -> None:
    """What the prepared stack must have for the case and its launcher (framework versions, launcher
    options, on every host the interfaces that its loading names), for every point, before any is launched."""
    refuse_missing_interfaces(loaded_interface_settings(checked, stack_env), checked.host_probes)
    refuse_missing_host_needs(checked, stack_env)
    if stack_env.provenance.get("stack_packages") is not None:  # None: not read before launch (a batch job reads them)
        location = stack_env.provenance.get("stack_location")
        checked.case.check_requirements(stack_env, f"runtime {stack_env.runtime}{f', {location}' if location else ''}")
    for world in checked.worlds:
        plan_point(req, checked, world, stack_env, req.runs_dir / "check")


def refuse_missing_host_needs(checked: Checked, stack_env: StackEnv) -> None:
    """What the case's options need of the host beyond the stack (its [[host_needs]]: torch.compile's compilers and
    Python headers), where the runtime lets the runner look before launch (a stack's Python of this host)."""
    if stack_env.python_include is None:
        return
    include = Path(stack_env.python_include)
    for needs, why in checked.case.host_needs(checked.options):
        if missing := build_needs.lacking(needs, include=include):
            lacks, installs = build_needs.described(missing, include), build_needs.installs(missing)
            raise UsageError(f"case {checked.case.name}: {why}, and this host lacks {lacks}; install them ({installs})")


def loaded_interface_settings(checked: Checked, stack_env: StackEnv) -> dict[str, tuple[str, str]]:
    """The interface variables that loading the stack sets (runtime modules: a module's setenv, which wins over
    the run's own value), each with its value and where it was set."""
    loaded = stack_env.provenance.get("environment_set_by_loading") or {}
    whence = f"set by loading the stack on {checked.worlds[0].hosts[0].name}, runtime {stack_env.runtime}"
    return {name: (value, whence) for name, value in loaded.items() if name in INTERFACE_VARIABLES and value.strip()}


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
    if stack_env and not failure and (taken := checked.scheduler.take_over(batch_job(req, checked, ctx))):
        record = taken_over_record(ctx, taken, provenance, checked.scheduler.name)
        path = write_record(record, req.results_dir)
        print_summary(record, path)
        return record, path
    interconnect, search, argv = None, None, req.case_args
    try:
        if stack_env and not failure and wanted(req.precheck, world.nodes):
            interconnect = run_check(checked, world, req.runs_dir / ctx.run_id, log,
                                     lambda *program: plan_point(req, checked, world, stack_env, *program))
        if stack_env and not failure and checked.search_asked:
            search = batch_search.Search(checked.search_asked)
            argv = searched_argv(req, checked, world, stack_env, search, req.runs_dir / ctx.run_id / "batch-search")
            ctx = replace(ctx, options=case.parse_options(argv))
        for index in range(checked.repeat if stack_env else 0):
            rep, details = repetition(req, checked, world, stack_env, index, req.runs_dir / ctx.run_id / f"rep-{index}",
                                      argv)
            while index == 0 and search and (smaller := search.smaller_after(rep)):
                log(f"batch search: the measurement at {smaller + 1} ran out of memory; measuring at {smaller}")
                argv = search.asked.args_at(req.case_args, smaller)
                ctx = replace(ctx, options=case.parse_options(argv))
                rep, details = repetition(req, checked, world, stack_env, index,
                                          req.runs_dir / ctx.run_id / f"rep-{index}-batch-{smaller}", argv)
            reps.append(rep)
    except KeyboardInterrupt:
        failure = INTERRUPTED
    except (RunFailed, RuntimeError, OSError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        if stack_env:
            checked.runtime.cleanup(stack_env, log)  # after the interconnect check too
    record = build_record(ctx, reps, provenance, details, failure)
    add_findings(record, req, checked, reps, world, interconnect, search)
    if unseen := record["execution"]["cluster_env_not_seen"]:
        log(f"warning: the cluster profile's [env] did not reach every rank: {'; '.join(unseen)}")
    path = write_record(record, req.results_dir)
    print_summary(record, path)
    return record, path


def add_findings(record: dict, req: RunRequest, checked: Checked, reps: list[Repetition], world: World,
                 interconnect: dict | None, search: batch_search.Search | None) -> None:
    """What a record says beside its repetitions: the scheduler's facts, the hardware's figures, the batch search;
    for a run that worked, its diagnosis, utilisation and published figure; the system it ran on."""
    if facts := checked.scheduler.execution_facts(checked.cluster_profile):
        record["execution"][checked.scheduler.name] = facts
    record["metrics"].update(hardware_metrics(reps, world, req.telemetry_interval, interconnect))
    if search:
        record["metrics"]["batch_search"] = search.as_record()
    if record["status"] == "ok":
        record["metrics"]["diagnosis"] = diagnose(record, checked.case.spec.get("hints"))
        if used := utilisation(record):
            record["metrics"]["utilisation"] = used
        if published := comparison(record):
            record["metrics"]["published"] = published
    record["provenance"]["system_description"] = system_description(record)


def repetition(req: RunRequest, checked: Checked, world: World, stack_env: StackEnv, index: int, rep_dir: Path,
               argv: list[str]) -> tuple[Repetition, dict]:
    """One launch of the case, its samplers beside it; the repetition and the plan's details."""
    rep_dir.mkdir(parents=True)
    plan = with_samplers(plan_point(req, checked, world, stack_env, rep_dir, argv=argv), world, rep_dir,
                         req.telemetry_interval)
    log(f"repetition {index + 1}/{checked.repeat}: {' '.join(plan.processes[0].argv[:8])} ...")
    try:
        return run_repetition(index, plan, checked.scheduler, rep_dir, checked.timeout_s, checked.stall_s,
                              checked.cluster_profile), plan.details
    finally:
        strays.end(rep_dir, log)
        checked.runtime.cleanup(stack_env, log)


def searched_argv(req: RunRequest, checked: Checked, world: World, stack_env: StackEnv,
                  search: batch_search.Search, folder: Path) -> list[str]:
    """The case arguments with the largest batch that trains on this point (suite/execution/batch_search.py):
    each trial one short launch of the case, without telemetry, its folder kept under `folder`."""
    asked = search.asked

    def launch(batch: int, run_dir: Path) -> Repetition:
        run_dir.mkdir(parents=True)
        argv = [*asked.args_at(req.case_args, batch), *asked.trial_args]
        plan = plan_point(req, checked, world, stack_env, run_dir, argv=argv)
        try:
            return run_repetition(0, plan, checked.scheduler, run_dir,
                                  min(checked.timeout_s, batch_search.TRIAL_TIMEOUT_S), checked.stall_s,
                                  checked.cluster_profile)
        finally:
            strays.end(run_dir, log)
            checked.runtime.cleanup(stack_env, log)

    on_cpus = device_asked(checked, world) is None
    host_limit = batch_search.host_bytes_per_rank(checked.scheduler, world, checked.cluster_profile) if on_cpus \
        else None
    return asked.args_at(req.case_args, batch_search.run_search(search, launch, folder, host_limit, log))


def hardware_metrics(reps: list[Repetition], world: World, interval: float | None, interconnect: dict | None) -> dict:
    """metrics.telemetry and metrics.interconnect, where they were taken."""
    try:
        telemetry = summarize_telemetry(reps, world, interval)
    except Exception as exc:  # any kind: the sampler's figures must never cost the run its record
        telemetry = {"interval_s": interval, "hosts": {}, "energy_j": None, "joules_per_image": None,
                     "error": f"{type(exc).__name__}: {exc}"}
    found = {"telemetry": telemetry, "interconnect": interconnect}
    return {k: v for k, v in found.items() if v is not None}


def batch_job(req: RunRequest, checked: Checked, ctx: RunContext) -> BatchJob:
    """The point as a scheduler that runs it whole sees it: plain data and the runner's command for it,
    every value resolved (the job runs where this machine's defaults may not hold)."""
    runs_dir = Path(req.runs_dir).resolve()
    run_dir = runs_dir / ctx.run_id
    inner = replace(req, case=checked.case.name, nodes=str(ctx.world.nodes),
                    gpus_per_node=str(ctx.world.hosts[0].slots),
                    hostfile=None, runtime=ctx.runtime, scheduler=ctx.scheduler, repeat=str(checked.repeat),
                    timeout=str(math.ceil(checked.timeout_s)), stall=str(math.ceil(checked.stall_s)), baseline=None,
                    results_dir=run_dir / "record", runs_dir=runs_dir, data_dir=Path(checked.data_dir).resolve(),
                    dry_run=False, run_id=ctx.run_id, cpu_bind=checked.cpu_bind, argv=[], rerun_of=None)
    return BatchJob(ctx.run_id, checked.case.name, ctx.world, (sys.executable, *SUITE[1:], *to_argv(inner)),
                    checked.timeout_s, checked.stall_s, checked.repeat, run_dir, checked.cluster_profile,
                    tuple(checked.runtime.job_lines(stack_request(req, checked))))


def taken_over_record(ctx: RunContext, taken: plugins.TakenOver, provenance: dict, scheduler: str) -> dict:
    record = taken.record
    if record is None:
        world = ctx.world
        if taken.hostnames:
            world = World(tuple(Host(name, world.hosts[0].slots) for name in taken.hostnames), world.source)
        record = build_record(replace(ctx, world=world), [], provenance, {}, taken.failure)
    record["sweep_id"] = ctx.sweep_id
    record["provenance"]["argv"] = ctx.argv
    record["provenance"]["request"] = ctx.request
    record["provenance"]["rerun_of"] = ctx.rerun_of
    record["execution"][scheduler] = {**record["execution"].get(scheduler, {}), **taken.execution}
    return record


def run_repetition(index, plan, scheduler, rep_dir: Path, timeout_s: float, stall_s: float,
                   cluster: Cluster | None = None) -> Repetition:
    rep = Repetition(index=index, run_dir=str(rep_dir), command=plan.processes[0].argv,
                     processes=[{"name": p.name, "host": p.host, "argv": p.argv, "env": masked_env(p.env),
                                 "launch": scheduler.how_started(p, cluster)} for p in plan.processes if not p.daemon])
    rep.launched_at = time.time()
    results = scheduler.execute(plan, rep_dir / "logs", timeout_s, stall_s, cluster=cluster)
    rep.ended_at = time.time()
    events = read_rank_events(rep_dir)
    rep.timeline = timeline(events.get(0, []), rep.launched_at, rep.ended_at)
    rep.exit_codes = {r.name: r.returncode for r in results}
    rep.ran_on = announced(str(rep_dir))
    bad = first_failure(results)
    if bad:
        rep.status = "failed"
        last = next((line for line in reversed(bad.tail) if line.strip()), "")
        how = bad.reason or exit_description(bad.returncode)
        said = f"first error: {bad.first_error!r}" if bad.first_error else f"last output: {last!r}"
        rep.reason = f"{bad.name} on {bad.host} {how}; {said}; log: {bad.log}"
        rep.starts = starts_of(events)  # what the ranks that started ran on: a wrong device explains the failure
        return rep
    try:
        measure(rep, plan.ranks, events)
    except RunFailed as exc:
        rep.status, rep.reason = "failed", str(exc)
    return rep


def run_context(req: RunRequest, checked: Checked, world: World, sweep_id: str | None) -> RunContext:
    case = checked.case
    return RunContext(req.run_id or new_run_id(case.name, world.nodes, world.devices), case, checked.options, world,
                      checked.runtime.name, checked.scheduler.name, req.provenance_argv(), utc_now(), sweep_id,
                      checked.cluster, req.rerun_of, checked.cpu_bind, recorded(req), device_asked(checked, world),
                      checked.site_env)


def dry_run_plan(req: RunRequest, checked: Checked) -> DryRun:
    """What a dry run shows (suite.execution.console.print_dry_run): the stack prepared without installing,
    what a real run would refuse on this machine (no container tool or image, no data), and every point's plan
    with how the scheduler would start it; starts nothing and writes no record."""
    stack, refused = None, []
    try:
        stack_env = prepare(req, checked, install=False)
        stack = stack_env.provenance
        check_stack(req, checked, stack_env)
    except (UsageError, RuntimeError, OSError) as exc:
        refused.append(str(exc))
        stack_env = StackEnv(checked.runtime.name, f"<{checked.runtime.name} stack {checked.stack.name}>/bin")
    setup = list(checked.runtime.job_lines(stack_request(req, checked, install=False)))
    points = []
    for world in checked.worlds:
        ctx = run_context(req, checked, world, None)
        plan = plan_point(req, checked, world, stack_env, req.runs_dir / ctx.run_id / "rep-0")
        points.append(DryRunPoint(ctx, checked.launcher.name, plan, wanted(req.precheck, world.nodes),
                                  checked.scheduler.describe(plan, batch_job(req, checked, ctx))))
    return DryRun(stack, [*refused, *checked.warnings], checked.runtime.name, setup, req.telemetry_interval, points)


def exit_description(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        # Not sent by the suite (that sets a reason): most often the kernel's out-of-memory killer.
        oom = " (out of memory? lower the batch or image size)" if -returncode == signal.SIGKILL else ""
        return f"was killed by signal {-returncode} ({signal.Signals(-returncode).name}){oom}"
    return f"exited with {returncode}"

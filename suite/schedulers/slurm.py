"""SLURM. Outside an allocation, each run point becomes a batch job: the runner writes
runs/<run_id>/job.sbatch (nodes, tasks per node, GPUs, CPUs per task, time limit, partition,
account, reservation, QoS, modules: from the world and the cluster profile's [slurm] table),
submits it with sbatch, follows it (state, elapsed time, its output shown live) and afterwards
takes the record the job wrote, adding `execution.slurm` (job id, node list, state, elapsed). The
job itself runs `python -m suite run` again with the same case and options.

Inside an allocation (SLURM_JOB_NODELIST set: that batch job, or `salloc`), the hosts are the
allocation's nodes (expanded with python-hostlist) and every process of the plan starts as a job
step, `srun --overlap --nodes=1 --ntasks=1 --nodelist=HOST ... ARGV`: an argv list, environment
passed by srun. No hostfile is needed. Ending a job: srun passes SIGTERM on to its step; the steps
of this launch (named hpcdl-<token>-<process>) are then cancelled with scancel, which also ends
what their processes started."""

import json
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import hostlist

from suite import paths
from suite.errors import UsageError
from suite.hostfile import Host, World
from suite.plan import Plan, Process, ProcessResult
from suite.schedulers.local import Placement, run_plan

POLL_S = 2.0  # the job's output; its state every POLL_S for the first minute, then every STATE_POLL_S
STATE_POLL_S = 15.0
GIVE_UP_S = 600  # scontrol failing (not "no such job") this long: stop following
MARGIN_S = 600  # job time limit beyond TIMEOUT x REPEAT: stack check, start-up, record
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
TEXT_KEYS = ("partition", "account", "reservation", "qos", "constraint", "gres", "time_limit")
TIME_LIMIT = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^\d+-\d+$")
WORD = re.compile(r"^[^\s'\"\\#]+$")  # one word sbatch reads as it is


# --- the allocation -------------------------------------------------------------------------------

def inside_allocation() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_JOB_NODELIST"))


def expand_nodelist(text: str) -> list[str]:
    """node[01-04] -> node01..node04; gpu[1,3-5],login1 -> gpu1, gpu3, gpu4, gpu5, login1."""
    try:
        return hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as exc:
        raise UsageError(f"cannot expand the SLURM node list '{text}': {exc}") from None


def expand_counts(text: str) -> list[int]:
    """SLURM's per-node counts, e.g. SLURM_TASKS_PER_NODE=2(x3),1 -> [2, 2, 2, 1]."""
    counts = []
    for part in filter(None, text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise UsageError(f"cannot read the SLURM per-node count '{text}'")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def allocation_hosts() -> list[Host]:
    """The allocation's nodes; slots = GPUs on the node where there are any, else tasks per node."""
    names = expand_nodelist(os.environ["SLURM_JOB_NODELIST"])
    gpus = int(os.environ.get("SLURM_GPUS_ON_NODE") or 0)
    tasks = expand_counts(os.environ.get("SLURM_TASKS_PER_NODE", ""))
    if gpus:
        return [Host(name, gpus) for name in names]
    if len(tasks) != len(names):
        tasks = [1] * len(names)
    return [Host(name, count) for name, count in zip(names, tasks)]


def hosts(nodes: int) -> tuple[list[Host], str, str | None]:
    """Hook for `suite run`: (hosts, where they come from, cluster name). Outside an allocation the
    nodes are not known before the job starts: placeholders stand for them."""
    if inside_allocation():
        return allocation_hosts(), f"SLURM_JOB_NODELIST={os.environ['SLURM_JOB_NODELIST']}", \
            os.environ.get("SLURM_CLUSTER_NAME")
    return [Host(f"slurm-node-{i}", 1) for i in range(1, nodes + 1)], "sbatch", None


# --- settings -------------------------------------------------------------------------------------

def settings(cluster) -> dict:
    """The profile's [slurm] table, checked: every value must go into the job script as it is."""
    spec = dict(cluster.slurm) if cluster else {}
    where = f"cluster profile {cluster.path}: [slurm]" if cluster else "[slurm]"
    for key in TEXT_KEYS:
        if key in spec and not (isinstance(spec[key], str) and WORD.match(spec[key])):
            raise UsageError(f"{where} {key} must be one word without spaces or quotes, got {spec[key]!r}")
    if "time_limit" in spec and not TIME_LIMIT.match(spec["time_limit"]):
        raise UsageError(f"{where} time_limit must be a SLURM time such as 00:30:00 or 1-00:00:00, got {spec['time_limit']!r}")
    cpus = spec.get("cpus_per_task")
    if cpus is not None and (not isinstance(cpus, int) or isinstance(cpus, bool) or cpus < 1):
        raise UsageError(f"{where} cpus_per_task must be a positive integer, got {cpus!r}")
    for key, pattern, hint in (("modules", WORD, "module names"), ("extra_directives", re.compile(r"^--[^\s'\"\\]+$"),
                                                                   "sbatch options such as \"--exclusive\"")):
        values = spec.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) and pattern.match(v) for v in values):
            raise UsageError(f"{where} {key} must be a list of {hint}, one word each, got {values!r}")
    return spec


def check(cluster, dry_run: bool = False) -> None:
    settings(cluster)
    if dry_run:
        return
    needed = ("srun", "squeue", "scancel") if inside_allocation() else ("sbatch", "scontrol", "scancel")
    missing = [c for c in needed if not shutil.which(c)]
    if missing:
        raise UsageError(f"SCHEDULER=slurm needs {', '.join(missing)} on PATH (a SLURM login node, or `salloc`)")


# --- inside an allocation: job steps --------------------------------------------------------------

def srun_argv(spec: Process, step: str) -> list[str]:
    return ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1", f"--nodelist={spec.host}",
            f"--job-name={step}", f"--chdir={spec.cwd}", "--kill-on-bad-exit=1", "--quiet", *spec.argv]


class SrunPlacement(Placement):
    def __init__(self):
        self.token = f"hpcdl-{secrets.token_hex(3)}"

    def step(self, spec: Process) -> str:
        return f"{self.token}-{spec.name}"

    def popen_args(self, spec: Process) -> tuple[list[str], dict, str | None]:
        return srun_argv(spec, self.step(spec)), {**os.environ, **spec.env}, spec.cwd

    def signal(self, running: list, sig: int) -> None:
        if sig == signal.SIGKILL:
            self.cancel_steps()
        super().signal(running, sig)

    def cancel_steps(self) -> None:
        """scancel this launch's steps that are still there (srun itself may be gone)."""
        listed = subprocess.run(["squeue", "--steps", "--noheader", "--jobs", os.environ["SLURM_JOB_ID"],
                                 "--format=%i %j"], capture_output=True, text=True, check=False, timeout=60)
        ours = [line.split()[0] for line in listed.stdout.splitlines()
                if len(line.split()) == 2 and line.split()[1].startswith(self.token + "-")]
        if ours:
            subprocess.run(["scancel", "--quiet", *ours], capture_output=True, check=False, timeout=60)


def execute(plan: Plan, log_dir: Path, timeout_s: float, stall_s: float | None = None,
            cluster=None) -> list[ProcessResult]:
    if not inside_allocation():
        raise RuntimeError("the slurm scheduler starts processes inside an allocation only (SLURM_JOB_NODELIST unset)")
    return run_plan(plan, log_dir, timeout_s, stall_s, SrunPlacement())


# --- outside an allocation: a batch job per run point ---------------------------------------------

def time_limit(spec: dict, timeout_s: float, repeat: int) -> str:
    if spec.get("time_limit"):
        return spec["time_limit"]
    minutes = math.ceil((timeout_s * repeat + MARGIN_S) / 60)
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else f"{rest // 60:02d}:{rest % 60:02d}:00"


def gres(spec: dict, devices_per_node: int) -> str | None:
    """The profile's GPU gres with the count this run uses: gpu:4 -> gpu:2 for GPUS_PER_NODE=2."""
    value = spec.get("gres")
    if not value:
        return None
    match = re.fullmatch(r"gpu(:[A-Za-z][\w.-]*)?(:\d+)?", value)
    return f"gpu{match.group(1) or ''}:{devices_per_node}" if match else value


def inner_argv(req, checked, ctx) -> list[str]:
    """The `suite run` the job runs: this point only, with this run id, its record into the run folder."""
    run_dir = Path(req.runs_dir).resolve() / ctx.run_id
    argv = [sys.executable, "-m", "suite", "run", "--case", checked.case.name,
            "--nodes", str(ctx.world.nodes), "--gpus-per-node", str(ctx.world.hosts[0].slots),
            "--repeat", str(checked.repeat), "--timeout", str(math.ceil(checked.timeout_s)),
            "--stall", str(math.ceil(checked.stall_s)), "--runtime", ctx.runtime, "--scheduler", "slurm",
            "--data-dir", str(Path(checked.data_dir).resolve()), "--runs-dir", str(Path(req.runs_dir).resolve()),
            "--results-dir", str(run_dir / "record"), "--run-id", ctx.run_id]
    if req.cluster:
        argv += ["--cluster", req.cluster]
    return [*argv, "--", *req.case_args]


def job_script(req, checked, ctx) -> str:
    spec = settings(checked.cluster_profile)
    world = ctx.world
    per_node = world.hosts[0].slots
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", checked.case.name)
    directives = [f"--job-name=hpcdl-{name}", f"--nodes={world.nodes}", f"--ntasks-per-node={per_node}",
                  f"--time={time_limit(spec, checked.timeout_s, checked.repeat)}", "--output=job-%j.out"]
    if spec.get("cpus_per_task"):
        directives.append(f"--cpus-per-task={spec['cpus_per_task']}")
    if gpus := gres(spec, per_node):
        directives.append(f"--gres={gpus}")
    directives += [f"--{key}={spec[key]}" for key in ("partition", "account", "reservation", "qos", "constraint")
                   if spec.get(key)]
    directives += spec.get("extra_directives", [])
    lines = ["#!/bin/bash", f"# {ctx.case.name} run {ctx.run_id}, written by hpc-dl-bench (suite/schedulers/slurm.py)"]
    lines += [f"#SBATCH {d}" for d in directives]
    if spec.get("modules"):
        modules = shlex.join(spec["modules"])
        lines.append(f"module load {modules} || {{ echo {shlex.quote('module load ' + modules + ' failed')} >&2; exit 1; }}")
    lines += [f"cd {shlex.quote(str(paths.ROOT))}", f"exec {shlex.join(inner_argv(req, checked, ctx))}", ""]
    return "\n".join(lines)


def describe(req, checked, ctx, plan: Plan) -> str:
    """For --dry-run: the srun command of each process, or the batch job that will run the point."""
    if inside_allocation():
        placement = SrunPlacement()
        return "started as:\n" + "\n".join(f"  {p.name}: {shlex.join(placement.popen_args(p)[0])}"
                                            for p in plan.processes)
    run_dir = Path(req.runs_dir).resolve() / ctx.run_id
    return (f"submitted as: cd {shlex.quote(str(run_dir))} && sbatch --parsable job.sbatch\n"
            f"(the hosts above stand for the job's nodes)\n--- {run_dir / 'job.sbatch'} ---\n"
            f"{job_script(req, checked, ctx)}--- end ---")


def run_point(req, checked, ctx, stack_env) -> dict | None:
    """Hook for `suite run`: outside an allocation, run the point as a batch job and return its
    record; inside one, None (the point runs here, its processes as job steps)."""
    if inside_allocation():
        return None
    from suite.results import build_record
    from suite.run import INTERRUPTED, log

    run_dir = Path(req.runs_dir).resolve() / ctx.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "job.sbatch").write_text(job_script(req, checked, ctx))
    try:
        submitted = subprocess.run(["sbatch", "--parsable", "job.sbatch"], cwd=run_dir, capture_output=True,
                                   text=True, check=False, timeout=300)
    except subprocess.TimeoutExpired:
        return build_record(ctx, [], stack_env.provenance, {}, "sbatch did not answer within 300 s")
    if submitted.returncode != 0:
        said = ((submitted.stderr or submitted.stdout).strip().splitlines() or [f"exit {submitted.returncode}"])[-1]
        return build_record(ctx, [], stack_env.provenance, {}, f"sbatch refused the job: {said}")
    job_id = submitted.stdout.strip().split(";")[0]
    log(f"slurm job {job_id} submitted: {run_dir / 'job.sbatch'}")
    interrupted = False
    try:
        info = follow(job_id, run_dir, log)
    except KeyboardInterrupt:
        interrupted = True
        subprocess.run(["scancel", job_id], capture_output=True, check=False)
        try:
            info = follow(job_id, run_dir, log, quiet=True, limit_s=60)
        except KeyboardInterrupt:
            info = job_info(job_id) or {}
    slurm = {"job_id": job_id, "nodelist": info.get("NodeList"), "state": info.get("JobState"),
             "elapsed": info.get("RunTime"), "exit_code": info.get("ExitCode"), "script": str(run_dir / "job.sbatch")}
    record = inner_record(run_dir)
    if record is None or interrupted:
        output = run_dir / f"job-{job_id}.out"
        why = INTERRUPTED if interrupted else (f"slurm job {job_id} ended {slurm['state']} (exit code "
                                               f"{slurm['exit_code']}) without a record; last output: "
                                               f"{last_line(output)!r}; output: {output}")
        record = build_record(replace(ctx, world=job_world(ctx.world, slurm["nodelist"])), [],
                              stack_env.provenance, {}, why)
    record["sweep_id"] = ctx.sweep_id
    record["provenance"]["argv"] = ctx.argv
    record["execution"]["slurm"] = slurm
    return record


def job_info(job_id: str) -> dict | None:
    """scontrol's view of the job (it keeps finished jobs for MinJobAge), else sacct's once scontrol
    no longer knows the job, else state UNKNOWN; None when the controller did not answer."""
    try:
        shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True,
                               check=False, timeout=60)
    except subprocess.TimeoutExpired:
        return None
    if shown.returncode == 0 and shown.stdout.strip():
        return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)
    if "Invalid job id" not in shown.stderr:
        return None
    try:
        acct = subprocess.run(["sacct", "--noheader", "--parsable2", "--allocations", "--jobs", job_id,
                               "--format=State,Elapsed,NodeList,ExitCode"], capture_output=True, text=True,
                              check=False, timeout=60)
    except (subprocess.TimeoutExpired, FileNotFoundError):
        return {"JobState": "UNKNOWN"}
    if acct.returncode == 0 and acct.stdout.strip():
        state, elapsed, nodes, code = acct.stdout.splitlines()[0].split("|")
        return {"JobState": state.split()[0], "RunTime": elapsed, "NodeList": nodes, "ExitCode": code}
    return {"JobState": "UNKNOWN"}


def follow(job_id: str, run_dir: Path, log, quiet: bool = False, limit_s: float | None = None) -> dict:
    """Waits for the job to end (or limit_s), saying when its state changes and showing its output."""
    output, offset, last_state, info = run_dir / f"job-{job_id}.out", 0, None, {}
    started = last_answer = next_poll = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_poll:
            next_poll = now + (POLL_S if now - started < 60 else STATE_POLL_S)
            answer = job_info(job_id)
            if answer is None and now - last_answer > GIVE_UP_S:
                answer = {"JobState": "UNKNOWN"}
            if answer is not None:
                info, last_answer = answer, now
        state = info.get("JobState")
        if state and state != last_state and not quiet:
            log(f"slurm job {job_id}: {state}{state_detail(info)}")
        last_state = state
        offset = show_new_output(output, offset, quiet)
        if state in TERMINAL or state == "UNKNOWN" or (limit_s and now - started > limit_s):
            show_new_output(output, offset, quiet)
            return info
        time.sleep(POLL_S)


def state_detail(info: dict) -> str:
    if info.get("JobState") == "RUNNING":
        return f" on {info.get('NodeList')}"
    reason = info.get("Reason")
    return f" ({reason})" if reason not in (None, "None") else ""


def show_new_output(path: Path, offset: int, quiet: bool) -> int:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return offset
    if data and not quiet:
        sys.stdout.write(data.decode(errors="replace"))
        sys.stdout.flush()
    return offset + len(data)


def inner_record(run_dir: Path) -> dict | None:
    found = sorted((run_dir / "record").glob("*.json"))
    return json.loads(found[0].read_text()) if found else None


def job_world(world: World, nodelist: str | None) -> World:
    """The world of a job that wrote no record: its nodes where SLURM named them."""
    if not nodelist or nodelist in ("(null)", "None"):
        return world
    names = expand_nodelist(nodelist)
    slots = world.hosts[0].slots
    return World(tuple(Host(n, slots) for n in names), world.source)


def last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1] if lines else ""

"""SLURM. Outside an allocation, each run point becomes a batch job: the runner writes
runs/<run_id>/job.sbatch (nodes, tasks per node, GPUs, CPUs per task, time limit, partition,
account, reservation, QoS, modules: from the world and the cluster profile's [slurm] table; then
the runtime's own lines, e.g. runtime modules' `module load`),
submits it with sbatch, follows it (state, elapsed time, its output shown live) and afterwards
takes the record the job wrote, adding `execution.slurm` (job id, node list, state, reason, time limit,
elapsed). A job SLURM ended (its time limit, scancel, a node failure) fails its record with one line
saying so, first in its reason (cut_message). The job itself runs `python -m suite run` again with the
same case and options.

Inside an allocation (SLURM_JOB_NODELIST set: that batch job, or `salloc`), the hosts are the
allocation's nodes (expanded with python-hostlist) and every process of the plan starts as a job
step, `srun --overlap --nodes=1 --ntasks=1 --nodelist=HOST ... ARGV`: an argv list, environment
passed by srun. No hostfile is needed, and no ssh: launchers plan one process per rank, per agent or
per ps-lite role (Launch.placement is "srun"), or one MPI step of all ranks (Process.mpi_tasks:
`srun --mpi=<[slurm] mpi>` over the nodes). Ending a job: srun passes SIGTERM on to its step; the steps
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hostlist

from suite.base import paths
from suite.base.errors import INTERRUPTED, UsageError
from suite.base.log import log
from suite.execution.plan import Plan, Process, ProcessResult
from suite.execution.plugins import ENDED_BY_SCHEDULER, BatchJob, Setting, TakenOver, command_line, output_here
from suite.inputs.hostfiles import Host
from suite.schedulers.local import Placement, run_plan

POLL_S = 2.0  # the job's output; its state every POLL_S for the first minute, then every STATE_POLL_S
STATE_POLL_S = 15.0
GIVE_UP_S = 600  # scontrol failing (not "no such job") this long: stop following
MARGIN_S = 600  # job time limit beyond TIMEOUT x REPEAT: stack check, start-up, record
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
TEXT_KEYS = ("partition", "account", "reservation", "qos", "constraint", "gres", "time_limit", "mpi")
TIME_LIMIT = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^\d+-\d+$")
WORD = re.compile(r"^[^\s'\"\\#]+$")  # one word sbatch reads as it is
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "srun")
REACH_TIMEOUT_S = 15
PROFILE = {
    "partition": Setting(str, None, "partition (queue) of the jobs"),
    "account": Setting(str, None, "account charged"),
    "reservation": Setting(str, None, "reservation to run in"),
    "qos": Setting(str, None, "quality of service"),
    "constraint": Setting(str, None, "node features, e.g. a GPU model"),
    "gres": Setting(str, None, "generic resources per node, e.g. gpu:4 (the count follows GPUS_PER_NODE)"),
    "time_limit": Setting(str, None, "job time limit (default: TIMEOUT x REPEAT + 10 min)"),
    "cpus_per_task": Setting(int, None, "CPUs per task"),
    "modules": Setting(list, [], "environment modules loaded in the job"),
    "extra_directives": Setting(list, [], "further sbatch options, e.g. [\"--exclusive\"]"),
    "mpi": Setting(str, "pmix", "srun's MPI plugin for MPI programs (Horovod built with MPI): one that "
                   "`srun --mpi=list` shows here, e.g. pmix or pmi2"),
}


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
    spec = dict(cluster.section("slurm")) if cluster else {}
    where = f"cluster profile {cluster.path}: [slurm]" if cluster else "[slurm]"
    for key in TEXT_KEYS:
        if key in spec and not (isinstance(spec[key], str) and WORD.match(spec[key])):
            raise UsageError(f"{where} {key} must be one word without spaces or quotes, got {spec[key]!r}")
    if "time_limit" in spec and not TIME_LIMIT.match(spec["time_limit"]):
        raise UsageError(f"{where} time_limit must be a SLURM time such as 00:30:00 or 1-00:00:00, "
                         f"got {spec['time_limit']!r}")
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

def srun_argv(spec: Process, step: str, mpi: str = PROFILE["mpi"].default) -> list[str]:
    if spec.mpi_tasks:
        tasks = spec.mpi_tasks
        where = [f"--nodes={len(tasks)}", f"--ntasks={sum(tasks.values())}", f"--ntasks-per-node={max(tasks.values())}",
                 f"--nodelist={','.join(tasks)}", f"--mpi={mpi}"]
    else:
        where = ["--nodes=1", "--ntasks=1", "--ntasks-per-node=1", f"--nodelist={spec.host}"]
    # With --cpu-bind the ranks bind themselves to their share of the node (suite/instack/cpu_binding.py): SLURM's
    # own binding of a step would narrow what they split.
    bind = ["--cpu-bind=none"] if spec.env.get("SUITE_CPU_BIND", "none") != "none" else []
    return ["srun", "--overlap", *where, *bind, f"--job-name={step}", f"--chdir={spec.cwd}", "--kill-on-bad-exit=1",
            "--quiet", *spec.argv]


class SrunPlacement(Placement):
    def __init__(self, mpi: str | None = None):
        self.token = f"hpcdl-{secrets.token_hex(3)}"
        self.mpi = mpi or PROFILE["mpi"].default

    def step(self, spec: Process) -> str:
        return f"{self.token}-{spec.name}"

    def popen_args(self, spec: Process) -> tuple[list[str], dict, str | None]:
        return srun_argv(spec, self.step(spec), self.mpi), {**os.environ, **spec.env}, spec.cwd

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
    return run_plan(plan, log_dir, timeout_s, stall_s, SrunPlacement(settings(cluster).get("mpi")))


def placement(cluster) -> str:
    return "srun"


def run_on_hosts(hosts: list[str], argv: tuple[str, ...], cluster) -> dict[str, str | None]:
    """Inside an allocation: one step on each node at once. Outside one the nodes are not known yet
    (the batch job's own run reads them)."""
    if not inside_allocation():
        return {host: None for host in hosts}
    step = f"hpcdl-probe-{secrets.token_hex(3)}"

    def one(host: str) -> str | None:
        return output_here(["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={host}", f"--job-name={step}",
                            "--quiet", *argv], REACH_TIMEOUT_S * 4)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(hosts, pool.map(one, hosts)))


def execution_facts(cluster) -> dict | None:
    """A point run inside an allocation: the allocation (a batch job adds its own facts on top)."""
    if not inside_allocation():
        return None
    return {"job_id": os.environ["SLURM_JOB_ID"], "nodelist": os.environ["SLURM_JOB_NODELIST"],
            "inside_allocation": True}


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


def job_script(job: BatchJob) -> str:
    spec = settings(job.profile)
    world = job.world
    per_node = world.hosts[0].slots
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", job.case)
    directives = [f"--job-name=hpcdl-{name}", f"--nodes={world.nodes}", f"--ntasks-per-node={per_node}",
                  f"--time={time_limit(spec, job.timeout_s, job.repeat)}", "--output=job-%j.out"]
    if spec.get("cpus_per_task"):
        directives.append(f"--cpus-per-task={spec['cpus_per_task']}")
    if gpus := gres(spec, per_node):
        directives.append(f"--gres={gpus}")
    directives += [f"--{key}={spec[key]}" for key in ("partition", "account", "reservation", "qos", "constraint")
                   if spec.get(key)]
    directives += spec.get("extra_directives", [])
    lines = ["#!/bin/bash", f"# {job.case} run {job.run_id}, written by hpc-dl-bench (suite/schedulers/slurm.py)"]
    lines += [f"#SBATCH {d}" for d in directives]
    if spec.get("modules"):
        modules = shlex.join(spec["modules"])
        failed = shlex.quote(f"module load {modules} failed")
        lines.append(f"module load {modules} || {{ echo {failed} >&2; exit 1; }}")
    lines += [*job.setup, f"cd {shlex.quote(str(paths.ROOT))}", f"exec {shlex.join(job.inner_argv)}", ""]
    return "\n".join(lines)


def describe(plan: Plan, job: BatchJob) -> str:
    """For --dry-run: the srun command of each process; outside an allocation also the batch job that
    will run the point, whose runner starts each process as that step on the job's nodes."""
    srun = SrunPlacement(settings(job.profile).get("mpi"))
    steps = "\n".join(f"  {p.name}: {shlex.join(srun.popen_args(p)[0])}" for p in plan.processes)
    if inside_allocation():
        return f"started as:\n{steps}"
    return (f"submitted as: cd {shlex.quote(str(job.run_dir))} && sbatch --parsable job.sbatch\n"
            f"(the hosts above stand for the job's nodes)\n--- {job.run_dir / 'job.sbatch'} ---\n"
            f"{job_script(job)}--- end ---\n"
            f"inside the job, its runner starts each process as a job step ({srun.token}: a name new to each "
            f"launch; the job's nodes in place of the hosts above):\n{steps}")


def take_over(job: BatchJob) -> TakenOver | None:
    """Outside an allocation, run the point as a batch job and hand back the record it wrote; inside
    one, None (the point runs here, its processes as job steps)."""
    if inside_allocation():
        return None
    job.run_dir.mkdir(parents=True)
    (job.run_dir / "job.sbatch").write_text(job_script(job))
    try:
        submitted = subprocess.run(["sbatch", "--parsable", "job.sbatch"], cwd=job.run_dir, capture_output=True,
                                   text=True, check=False, timeout=300)
    except subprocess.TimeoutExpired:
        return TakenOver(None, "sbatch did not answer within 300 s", {"script": str(job.run_dir / "job.sbatch")})
    if submitted.returncode != 0:
        said = ((submitted.stderr or submitted.stdout).strip().splitlines() or [f"exit {submitted.returncode}"])[-1]
        return TakenOver(None, f"sbatch refused the job: {said}", {"script": str(job.run_dir / "job.sbatch")})
    job_id = submitted.stdout.strip().split(";")[0]
    log(f"slurm job {job_id} submitted: {job.run_dir / 'job.sbatch'}")
    interrupted = False
    try:
        info = follow(job_id, job.run_dir, log)
    except KeyboardInterrupt:
        interrupted = True
        subprocess.run(["scancel", job_id], capture_output=True, check=False)
        try:
            info = follow(job_id, job.run_dir, log, quiet=True, limit_s=60)
        except KeyboardInterrupt:
            info = job_info(job_id) or {}
    slurm = {"job_id": job_id, "nodelist": info.get("NodeList"), "state": info.get("JobState"),
             "reason": given(info.get("Reason")), "time_limit": given(info.get("TimeLimit")),
             "elapsed": info.get("RunTime"), "exit_code": info.get("ExitCode"),
             "script": str(job.run_dir / "job.sbatch")}
    record = None if interrupted else inner_record(job.run_dir)
    cut = None if interrupted else cut_message(slurm)
    if record is not None:
        if cut and record["status"] != "ok":  # the runner's own record of the SIGTERM SLURM sent: SLURM says why
            record["reason"] = f"{cut}; the run said: {record['reason']}"
        return TakenOver(record, None, slurm)
    output = job.run_dir / f"job-{job_id}.out"
    said = f"last output: {last_line(output)!r}; output: {output}"
    why = INTERRUPTED if interrupted else (f"{cut}; the job wrote no record (exit code {slurm['exit_code']}); {said}"
                                           if cut else f"slurm job {job_id} ended {slurm['state']} (exit code "
                                           f"{slurm['exit_code']}) without a record; {said}")
    return TakenOver(None, why, slurm, job_nodes(slurm["nodelist"]))


def given(value: str | None) -> str | None:
    """A field of scontrol or sacct, None where SLURM says there is none."""
    return None if value in (None, "", "None", "(null)", "Unknown") else value


def in_minutes(limit: str) -> str:
    """SLURM's time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in words: 00:01:00 -> 1 min."""
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, mins, secs = (parts + [0, 0])[:3]
    else:  # MM, MM:SS, HH:MM:SS
        hours, mins, secs = [0, *parts] if len(parts) == 2 else [0, parts[0], 0] if len(parts) == 1 else parts
    total = (int(days or 0) * 24 + hours) * 60 + mins + secs / 60
    return f"{total:g} min"


def cut_message(slurm: dict) -> str | None:
    """The one line for a job SLURM ended before the run did (time limit, scancel, a node failure,
    preemption ...), None for a job that ended by itself (COMPLETED, FAILED)."""
    state = slurm.get("state")
    if state not in ENDED_BY_SCHEDULER:
        return None
    detail = []
    if state in ("TIMEOUT", "DEADLINE") and slurm.get("time_limit"):
        try:
            detail.append(f"time limit {in_minutes(slurm['time_limit'])}")
        except ValueError:
            detail.append(f"time limit {slurm['time_limit']}")
    if slurm.get("reason") and slurm["reason"] not in (state, "TimeLimit"):
        detail.append(f"reason {slurm['reason']}")
    said = f" ({', '.join(detail)})" if detail else ""
    return f"SLURM job {slurm['job_id']} ended {state}{said}: resume reruns this point"


def job_info(job_id: str) -> dict | None:
    """scontrol's view of the job (it keeps finished jobs for MinJobAge), else sacct's once scontrol
    no longer knows the job, else state UNKNOWN; None when the controller did not answer."""
    try:
        shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True,
                               check=False, timeout=60)
    except subprocess.TimeoutExpired:
        return None
    if shown.returncode == 0 and shown.stdout.strip():
        return scontrol_info(shown.stdout)
    if "Invalid job id" not in shown.stderr:
        return None
    try:
        acct = subprocess.run(["sacct", "--noheader", "--parsable2", "--allocations", "--jobs", job_id,
                               "--format=State,Elapsed,NodeList,ExitCode,Reason,TimeLimit"], capture_output=True,
                              text=True, check=False, timeout=60)
    except (subprocess.TimeoutExpired, FileNotFoundError):
        return {"JobState": "UNKNOWN"}
    return sacct_info(acct.stdout) if acct.returncode == 0 else {"JobState": "UNKNOWN"}


def scontrol_info(text: str) -> dict:
    """`scontrol show job --oneliner`'s KEY=VALUE fields."""
    return dict(field.split("=", 1) for field in text.split() if "=" in field)


def sacct_info(text: str) -> dict:
    """The job's line of `sacct --parsable2 --allocations -o State,Elapsed,NodeList,ExitCode,Reason,TimeLimit`
    in scontrol's names ("CANCELLED by 0" is CANCELLED); state UNKNOWN where it has none."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return {"JobState": "UNKNOWN"}
    fields = lines[0].split("|") + [""] * 6
    state, elapsed, nodes, code, reason, limit = fields[:6]
    return {"JobState": (state.split() or ["UNKNOWN"])[0], "RunTime": elapsed, "NodeList": nodes, "ExitCode": code,
            "Reason": reason, "TimeLimit": limit}


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


def job_nodes(nodelist: str | None) -> list[str] | None:
    """The nodes of a job that wrote no record, where SLURM named them."""
    if not nodelist or nodelist in ("(null)", "None"):
        return None
    return expand_nodelist(nodelist)


def last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1] if lines else ""


def doctor_lines(cluster) -> list[str]:
    """SLURM's commands, whether the controller answers for the partition, environment modules."""
    lines = [command_line(c, "scheduler slurm") for c in COMMANDS]
    spec = cluster.section("slurm") if cluster else {}
    if shutil.which("sinfo"):
        lines.append(controller_line(spec.get("partition")))
    if shutil.which("srun"):
        lines.append(mpi_line(spec.get("mpi") or PROFILE["mpi"].default))
    if spec.get("modules"):
        lines.append("ok: environment modules (`module`)" if os.environ.get("MODULESHOME") or os.environ.get("LMOD_CMD")
                     else "missing: environment modules (`module`, for the profile's [slurm] modules): "
                          "MODULESHOME/LMOD_CMD unset")
    return [*lines, "ok: hosts come from the SLURM allocation (no hostfile needed)"]


def mpi_line(mpi: str) -> str:
    """Whether srun has the MPI plugin the profile names (for Horovod built with MPI)."""
    try:
        shown = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=REACH_TIMEOUT_S,
                               check=False)
    except subprocess.TimeoutExpired:
        return "missing: srun --mpi=list did not answer"
    if shown.returncode != 0:
        return f"missing: srun --mpi=list failed: {(shown.stderr.strip().splitlines() or ['no output'])[-1]}"
    types = [line.strip().removeprefix("srun: ") for line in (shown.stdout + shown.stderr).splitlines()]
    if mpi in types:
        return f"ok: srun --mpi={mpi} (for MPI programs; [slurm] mpi)"
    listed = ", ".join(t for t in types if t.isidentifier()) or "nothing"
    return f"missing: srun --mpi={mpi} ([slurm] mpi): srun --mpi=list shows {listed}"


def controller_line(partition: str | None) -> str:
    argv = ["sinfo", "--noheader", "--format=%P %a %D %t"] + ([f"--partition={partition}"] if partition else [])
    try:
        shown = subprocess.run(argv, capture_output=True, text=True, timeout=REACH_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return "missing: SLURM controller (sinfo did not answer)"
    if shown.returncode != 0 or not shown.stdout.strip():
        detail = (shown.stderr.strip().splitlines() or ["no such partition"])[-1]
        return f"missing: SLURM partition {partition or '(default)'}: {detail}"
    return f"ok: SLURM answers: {'; '.join(shown.stdout.split(chr(10))[:3]).strip()}"

"""Runs the processes of a plan on this machine, each in its own process group, with their output
shown live and kept per process. The first failure or the time limit ends every process of the plan.

The machinery (`run_plan`) is shared with the ssh and slurm schedulers: a `Placement` says how a
process is started (here: as it is; there: wrapped in ssh or srun) and how signals reach it."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from suite.base.errors import UsageError
from suite.execution import strays
from suite.execution.plan import Plan, Process, ProcessResult
from suite.inputs.cases import known_cases
from suite.inputs.hostfiles import profile_hostfile, read_hostfile

GRACE_S = 10
DAEMON_GRACE_S = 3
TAIL_LINES = 20
# A Python exception line, also behind a launcher's rank prefix such as "[1]<stderr>:" or torch's "[rank0]:".
ERROR_LINE = re.compile(r"(?:^|>:|\]:)\s*([A-Za-z_.]*(?:Error|Exception|Interrupt)\b:?.*)$")
# A case script's own failure message (`raise SystemExit("pytorch-gpt: ...")`): the case's name first.
CASE_LINE = re.compile(rf"(?:^|>:|\]:)\s*((?:{'|'.join(map(re.escape, known_cases()))}): .*)$")
# A launcher's line that only reports that a child failed: the child's own line is the first error.
WRAPPER_LINE = re.compile(r"ChildFailedError|Horovod detected that one or more processes exited")
TORCH_RANK = re.compile(r"\[rank(\d+)\]:")  # torch's prefix of a rank's own lines under torchrun


# torchrun's report of a child that died without a word of its own (a signal): its "Root Cause" block
ROOT_CAUSE = "Root Cause (first observed failure)"
TRACEBACK_HINT = "To enable traceback see"  # torchrun's traceback field where the child recorded no error file
ROOT_CAUSE_FIELD = re.compile(r"^\s*(rank|exitcode|traceback)\s*:\s*(.*)$")


def failure_line(line: str) -> str | None:
    """The part of an output line that says why a process failed, where it is such a line."""
    if WRAPPER_LINE.search(line):
        return None
    match = ERROR_LINE.search(line) or CASE_LINE.search(line)
    return match.group(1) if match else None


def root_cause(lines: list[str]) -> tuple[int, str] | None:
    """The rank that torchrun's "Root Cause" block says failed first, and what it says of it (`rank 1
    (local_rank: 1): Signal 9 (SIGKILL) received by PID 14`), where the output holds one; else None."""
    if ROOT_CAUSE not in "\n".join(lines):
        return None
    block = lines[next(i for i, line in enumerate(lines) if ROOT_CAUSE in line):]
    fields = dict(m.groups() for line in block if (m := ROOT_CAUSE_FIELD.match(line)))
    traceback, exitcode = fields.get("traceback", ""), fields.get("exitcode")
    said = traceback if traceback and traceback != "<N/A>" and not traceback.startswith(TRACEBACK_HINT) else \
        f"exit code {exitcode}" if exitcode else None
    rank = re.match(r"\d+", fields.get("rank", ""))
    return (int(rank.group()), f"rank {fields['rank']}: {said}") if rank and said else None


def first_failure(errors: dict[int | None, str], tail: list[str]) -> str | None:
    """Why a process failed, from the first error line of each rank (`errors`, by torch's rank prefix, in the
    order seen; None for lines without one) and torchrun's report in its last lines. The rank that torchrun names
    the root cause comes first: a peer's error seen earlier (a connection reset by the rank that was killed) is
    its consequence."""
    first_rank = next(iter(errors), None)
    cause = root_cause(tail)
    if cause is None:
        return errors.get(first_rank)
    rank, said = cause
    if rank in errors:
        return errors[rank]
    if first_rank is None and errors:
        return errors[None]  # a line without a rank's prefix came first: the case's own message, say
    return said


class Placement:
    """Starts processes on this machine and signals their process groups."""

    def popen_args(self, spec: Process) -> tuple[list[str], dict, str | None]:
        """argv, environment and working directory of the local process that runs `spec`."""
        return spec.argv, {**os.environ, **spec.env}, spec.cwd

    def signal(self, running: list["_Running"], sig: int) -> None:
        for r in running:
            _signal_group(r.popen.pid, sig)


HERE = Placement()


class _Running:
    def __init__(self, spec, log_dir: Path, echo_prefix: str, placement: Placement = HERE):
        self.spec = spec
        self.log = log_dir / f"{spec.name}.log"
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.errors: dict[int | None, str] = {}  # the first error line of each rank (torch's prefix), None: no prefix
        argv, env, cwd = placement.popen_args(spec)
        self.popen = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            text=True, errors="replace", bufsize=1,
        )
        self.reader = threading.Thread(target=self._pump, args=(echo_prefix,), daemon=True)
        self.reader.start()
        self.reason: str | None = None
        self.last_output = time.monotonic()
        self.ended_at: float | None = None
        # Waiting in a thread of its own stamps each end as it happens; a poll every 0.2 s would see a
        # killed rank and the peer that aborted because of it end "together".
        self.waiter = threading.Thread(target=self._wait, daemon=True)
        self.waiter.start()

    def _wait(self) -> None:
        self.popen.wait()
        self.ended_at = time.monotonic()

    def failed(self) -> bool:
        """Ended (as the waiter saw) with a non-zero status."""
        return self.ended_at is not None and self.popen.returncode != 0

    def _pump(self, echo_prefix: str) -> None:
        with open(self.log, "w") as log:
            for line in self.popen.stdout:
                self.last_output = time.monotonic()
                log.write(line)
                log.flush()
                self.tail.append(line.rstrip("\n"))
                self._note_error(line.rstrip())
                sys.stdout.write(echo_prefix + line)
                sys.stdout.flush()

    def _note_error(self, line: str) -> None:
        if not (error := failure_line(line)):
            return
        rank = int(m.group(1)) if (m := TORCH_RANK.search(line)) else None
        self.errors.setdefault(rank, error)

    def result(self) -> ProcessResult:
        self.waiter.join()
        self.reader.join(timeout=5)
        first_error = first_failure(self.errors, list(self.tail))
        return ProcessResult(self.spec.name, self.spec.host, self.popen.returncode, str(self.log),
                             list(self.tail), self.reason, first_error, self.ended_at)


def _signal_group(pid: int, sig: int) -> None:
    """Signals the process group of `pid`; SIGKILL also every process left in its session. Each process
    is started as the leader of a session of its own, and what moved to a group of its own stays in that
    session: Apptainer's squashfuse_ll, mounting the SIF, outlives its starter killed mid-cleanup."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    if sig == signal.SIGKILL:
        strays.send(session_members(pid), sig)


def session_members(sid: int) -> list[int]:
    """The processes of session `sid`, from /proc (none where there is no /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[3] == str(sid):  # state, ppid, pgrp, session
            members.append(int(stat.parent.name))
    return members


def execute(plan: Plan, log_dir: Path, timeout_s: float, stall_s: float | None = None,
            cluster=None) -> list[ProcessResult]:
    """Runs the plan to its end; `timeout_s` bounds the whole, `stall_s` the silence of all processes.
    `cluster` (the cluster profile) is for schedulers that need its settings; this one does not."""
    return run_plan(plan, log_dir, timeout_s, stall_s, HERE)


def run_plan(plan: Plan, log_dir: Path, timeout_s: float, stall_s: float | None,
             placement: Placement) -> list[ProcessResult]:
    log_dir.mkdir(parents=True, exist_ok=True)
    several = sum(not p.daemon for p in plan.processes) > 1
    running: list[_Running] = []
    try:
        for p in plan.processes:
            running.append(_Running(p, log_dir, f"[{p.name}] " if several else "", placement))
        deadline = time.monotonic() + timeout_s
        while any(r.popen.poll() is None for r in running if not r.spec.daemon):
            reason = _reason_to_stop(running, deadline, timeout_s, stall_s)
            if reason:
                _stop_all(running, reason, placement)
                break
            time.sleep(0.2)
        _end_daemons(running, placement)
    except BaseException:
        _stop_all(running, "interrupted", placement)
        raise
    finally:
        _reap(running, placement)
    return [r.result() for r in running if not r.spec.daemon]


def _end_daemons(running: list[_Running], placement: Placement) -> None:
    """The job's own processes have ended: its helpers (Process.daemon) get SIGTERM and a moment."""
    daemons = [r for r in running if r.spec.daemon and r.popen.poll() is None]
    placement.signal(daemons, signal.SIGTERM)
    end = time.monotonic() + DAEMON_GRACE_S
    while time.monotonic() < end and any(r.popen.poll() is None for r in daemons):
        time.sleep(0.05)


def _reason_to_stop(running: list[_Running], deadline: float, timeout_s: float, stall_s: float | None) -> str | None:
    running = [r for r in running if not r.spec.daemon]  # a helper's exit or silence never ends the job
    failed = [r for r in running if r.failed()]
    if failed:
        return f"ended because {min(failed, key=lambda r: r.ended_at).spec.name} failed"
    now = time.monotonic()
    if now > deadline:
        return f"time limit of {timeout_s:.0f} s reached"
    if stall_s and now - max(r.last_output for r in running) > stall_s:
        return f"stall limit: no output from any process for {stall_s:.0f} s"
    return None


def _stop_all(running: list[_Running], reason: str, placement: Placement) -> None:
    live = [r for r in running if r.popen.poll() is None]
    for r in live:
        r.reason = reason
    placement.signal(live, signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    while time.monotonic() < end and any(r.popen.poll() is None for r in running):
        time.sleep(0.1)


def _reap(running: list[_Running], placement: Placement) -> None:
    """Leave nothing behind: the whole process group of each launched process goes (and whatever the
    placement knows of elsewhere)."""
    placement.signal(running, signal.SIGKILL)
    for r in running:
        r.popen.wait()


def doctor_lines(cluster) -> list[str]:
    hostfile = profile_hostfile(cluster)
    try:
        hosts = read_hostfile(hostfile)
    except UsageError as exc:
        return [f"missing: hostfile: {exc}"]
    return [f"ok: hostfile {hostfile} ({len(hosts)} host(s); scheduler local runs on this machine)"]

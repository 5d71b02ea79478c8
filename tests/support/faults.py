"""What fault tests share: start a real run, wait until every rank is training, and after the fault
check that the runner ends within the bound with a failed record and that nothing of the run is left,
looked for both among the runner's descendants (a snapshot taken while it ran) and among all
processes whose environment names the run's folder (which also finds those that escaped the tree).
When the runner overruns the bound, what it and its processes were doing is put in the failure, and
everything is killed, so that one overrun never leaks into the tests after it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, records_in

from suite.records.schema import validate
from support.processes import alive

BOUND_S = 60  # a fault (a dead rank, Ctrl-C, SIGTERM) ends the whole job within this, however loaded


STOP_SIGNALS = (signal.SIGINT, signal.SIGQUIT)  # what a non-interactive shell's background job inherits as ignored


def as_from_a_terminal() -> None:
    """In the child before exec: SIGINT and SIGQUIT back to their defaults, as a shell with job control
    starts a command (the tests themselves may run in the background of a non-interactive shell)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def with_sigint_ignored() -> None:
    """In the child before exec: SIGINT ignored, as `bash -c 'cmd &'` and many batch scripts start it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def ignored_signals(pid: int) -> set[int]:
    """The signals a process ignores (SigIgn of /proc/PID/status)."""
    mask = int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("SigIgn:")).split()[1], 16)
    return {sig for sig in range(1, 65) if mask & (1 << (sig - 1))}


def start_run(tmp_path: Path, *args: str, case_args=(), preexec=as_from_a_terminal) -> subprocess.Popen:
    """`python -m suite run ARGS -- CASE_ARGS` in a session of its own (so that it can be killed whole),
    its signal dispositions as a terminal gives them unless `preexec` sets others."""
    command = [sys.executable, "-m", "suite", "run", "--results-dir", str(tmp_path / "results"),
               "--runs-dir", str(tmp_path / "runs"), *args, "--", *case_args]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=preexec)


def wait_for_ranks(tmp_path: Path, ranks: int, timeout: float = 300) -> dict[int, int]:
    """rank -> pid, once every rank has finished a timed iteration."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = {}
        for path in tmp_path.glob("runs/*/rep-0/ranks/rank-*.jsonl"):
            events = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
            if any(e["event"] == "iteration" for e in events):
                pids[events[0]["rank"]] = events[0]["pid"]
        if len(pids) == ranks:
            return pids
        time.sleep(0.5)
    raise AssertionError("the run did not reach its timed iterations")


def descendants(pid: int) -> set[int]:
    """Every process whose parent chain leads to pid (read from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def with_environment(text: str) -> set[int]:
    """Live processes (not this one) whose environment holds `text` (e.g. the run folder)."""
    found = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if text.encode() in environ.read_bytes():
                found.add(int(environ.parent.name))
        except OSError:
            continue
    return {pid for pid in found if pid != os.getpid() and alive(pid)}


def of_the_run(tmp_path: Path) -> set[int]:
    """Processes of the run started in tmp_path: those that carry its run folder in their environment."""
    return with_environment(f"SUITE_RUN_DIR={tmp_path / 'runs'}")


def state_of(pids) -> str:
    """ps's view of processes (state, kernel wait channel, command), for a failure message."""
    shown = subprocess.run(["ps", "-o", "pid,ppid,pgid,stat,wchan:20,etime,args", "-p",
                            ",".join(map(str, sorted(pids))) or "0"], capture_output=True, text=True)
    return shown.stdout


def kill_all(runner: subprocess.Popen, pids) -> None:
    for pid in [runner.pid, *pids]:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    runner.wait()


def failed_record_after(runner: subprocess.Popen, tmp_path: Path, family: set[int] = frozenset(),
                        leftovers=None) -> dict:
    """Waits for the runner after a fault: it must end within the bound, with exit 1, nothing of the
    run left alive (its descendants seen before, processes carrying its run folder, and what
    `leftovers()` lists), and one valid failed record. On an overrun: what was running, then kill."""
    fault_at = time.monotonic()
    try:
        output, _ = runner.communicate(timeout=BOUND_S + 30)
    except subprocess.TimeoutExpired:
        stuck = {runner.pid, *family, *descendants(runner.pid), *of_the_run(tmp_path)}
        shown = state_of(p for p in stuck if alive(p))
        kill_all(runner, stuck)
        raise AssertionError(f"the runner did not end within {BOUND_S + 30} s of the fault; its processes were:\n"
                             f"{shown}") from None
    took = time.monotonic() - fault_at
    assert took < BOUND_S, f"{took:.0f} s\n{output[-3000:]}"
    assert runner.returncode == 1, output[-3000:]
    time.sleep(1)
    left = [p for p in family if alive(p)] + sorted(of_the_run(tmp_path)) + (leftovers() if leftovers else [])
    assert left == [], state_of(left)
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "failed"
    return record


class Load:
    """Busy CPUs and a busy disk beside a test, as on a shared login node: a CPU burner per usable
    core and one more, and a writer that rewrites a file with fsync in a loop. Ended (whole process
    groups) when the block ends."""

    def __init__(self, folder: Path):
        self.folder, self.popens = folder, []

    def __enter__(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        for _ in range(len(os.sched_getaffinity(0)) + 1):
            self.start([sys.executable, "-c", "while True: pass"])
        writer = (f"while :; do dd if=/dev/zero of={self.folder / 'disk-load'} bs=1M count=1024 conv=fsync "
                  "status=none; done")
        self.start(["sh", "-c", writer])
        time.sleep(2)
        assert all(p.poll() is None for p in self.popens)  # positive control: the load is on
        return self

    def start(self, argv):
        self.popens.append(subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))

    def __exit__(self, *exc):
        for popen in self.popens:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
        (self.folder / "disk-load").unlink(missing_ok=True)

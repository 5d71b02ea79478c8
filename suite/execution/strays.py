"""Processes of a repetition that outlived it on this machine.

The schedulers end a repetition by signalling the process group (or job step) of each process they
started; a descendant that made a session of its own (Horovod's middleman does, for every worker it
starts) is not in that group. Every case process carries SUITE_RUN_DIR=<repetition folder> in its
environment (suite/execution/plan.py), and so does whatever it starts: that finds them, wherever they moved."""

import os
import signal
import time
from pathlib import Path

from suite.instack.run_marker import carries

GRACE_S = 3


def of_repetition(rep_dir: Path | str) -> list[int]:
    """Live processes of this machine (not this one) whose environment holds SUITE_RUN_DIR=rep_dir."""
    variable = f"SUITE_RUN_DIR={rep_dir}".encode()
    pids = (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return [pid for pid in pids if pid != os.getpid() and carries(pid, variable)]


def end(rep_dir: Path | str, log) -> None:
    """SIGTERM to each stray, SIGKILL to those left after GRACE_S; says how many there were."""
    pids = of_repetition(rep_dir)
    if not pids:
        return
    send(pids, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while (left := of_repetition(rep_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    send(left, signal.SIGKILL)
    log(f"ended {len(pids)} process(es) of the repetition that outlived their process groups")


def send(pids: list[int], sig: int) -> None:
    """The signal to each of pids that is still there and ours to signal."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

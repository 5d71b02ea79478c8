"""Processes of a repetition that outlived it on this machine.

The schedulers end a repetition by signalling the process group (or job step) of each process they
started; a descendant that made a session of its own (Horovod's middleman does, for every worker it
starts) is not in that group. Every case process carries SUITE_RUN_DIR=<repetition folder> in its
environment (suite/plan.py), and so does whatever it starts: that finds them, wherever they moved."""

import os
import signal
import time
from pathlib import Path

GRACE_S = 3


def of_repetition(rep_dir: Path | str) -> list[int]:
    """Live processes of this machine (not this one) whose environment holds SUITE_RUN_DIR=rep_dir."""
    marker = f"SUITE_RUN_DIR={rep_dir}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except (OSError, ValueError):  # ended meanwhile, or not ours to read
            continue
    return [pid for pid in found if pid != os.getpid()]


def end(rep_dir: Path | str, log) -> None:
    """SIGTERM to each stray, SIGKILL to those left after GRACE_S; says how many there were."""
    pids = of_repetition(rep_dir)
    if not pids:
        return
    _send(pids, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while (left := of_repetition(rep_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    _send(left, signal.SIGKILL)
    log(f"ended {len(pids)} process(es) of the repetition that outlived their process groups")


def _send(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

"""The local scheduler with real processes: live output kept per process, first failure or the time
limit ends every process group, and nothing is left running."""

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.processes import alive

from suite.execution.plan import Plan, Process, first_failure
from suite.schedulers import local

MARGIN_S = 15  # beyond the grace a limit allows: a busy machine starts and ends processes slowly
LIMIT_S = 5  # the limits the tests set: room for a loaded machine to start Python and print before the limit

PY = sys.executable


def proc(name, code, tmp_path):
    return Process(name=name, host="localhost", argv=[PY, "-c", code], env={"MARK": name}, cwd=str(tmp_path))


def test_output_and_exit_codes(tmp_path):
    plan = Plan(ranks=1, processes=(proc("a", "import os; print('hello from', os.environ['MARK'])", tmp_path),))
    [result] = local.execute(plan, tmp_path / "logs", timeout_s=300)
    assert result.ok and result.returncode == 0
    assert result.tail == ["hello from a"]
    assert (tmp_path / "logs" / "a.log").read_text() == "hello from a\n"


def test_first_failure_ends_the_others_and_their_children(tmp_path):
    sleeper = ("import subprocess, sys, time; "
               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
               "print(c.pid, flush=True); time.sleep(600)")
    crasher = proc("crasher", "import time; time.sleep(1); raise SystemExit(3)", tmp_path)
    plan = Plan(ranks=2, processes=(proc("sleeper", sleeper, tmp_path), crasher))
    started = time.monotonic()
    sleeper_result, crasher_result = local.execute(plan, tmp_path / "logs", timeout_s=300)
    assert time.monotonic() - started < 30
    assert crasher_result.returncode == 3 and crasher_result.reason is None
    assert not sleeper_result.ok and sleeper_result.reason == "ended because crasher failed"
    grandchild = int(sleeper_result.tail[0])
    assert gone_within(grandchild, 10)  # SIGKILLed: it ends when the machine next runs it


def test_a_child_that_left_the_process_group_ends_with_the_job(tmp_path):
    """A rank's child in a group of its own (as Apptainer's squashfuse_ll, mounting the SIF, is) is out of
    reach of the group's signals but not of its session: it is killed with the job, not left behind."""
    leaver = ("import os, subprocess, sys, time; "
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], preexec_fn=os.setpgrp); "
              "print(c.pid, os.getpgid(c.pid), os.getpgid(0), flush=True); time.sleep(600)")
    crasher = proc("crasher", "import time; time.sleep(1); raise SystemExit(3)", tmp_path)
    leaver_result, _ = local.execute(Plan(ranks=2, processes=(proc("leaver", leaver, tmp_path), crasher)),
                                     tmp_path / "logs", timeout_s=300)
    child, child_group, leaver_group = map(int, leaver_result.tail[0].split())
    try:
        assert child_group != leaver_group  # positive control: a killpg of the rank's group misses it
        assert gone_within(child, 10)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return not alive(pid)


def test_the_first_to_end_is_the_failure_not_the_peer_that_aborted_because_of_it(tmp_path):
    # "peer" is listed first and aborts 0.1 s after "victim" is gone from /proc: closer than the scheduler's
    # 0.2 s poll, as a rank of a collective aborts when its peer's socket closes. It waits for the victim to be
    # reaped, not only for its death: the runner's waiter stamps the end right after reaping it, while a zombie
    # of a starved runner (the niced interpreter matrix) waited there past the peer's 0.1 s and was stamped after
    # it. It waits for the reaping itself, not for a sign the victim leaves first: a loaded machine holds it between.
    pid_file = tmp_path / "victim-pid"
    peer = proc("peer", "import os, pathlib, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                        f"pid_file = pathlib.Path({str(pid_file)!r})\n"
                        "while not pid_file.exists(): time.sleep(0.005)\n"
                        "stat = f'/proc/{pid_file.read_text()}/stat'\n"
                        "while os.path.exists(stat): time.sleep(0.005)\n"
                        "time.sleep(0.1); os.abort()", tmp_path)
    victim = proc("victim", "import os, pathlib, signal, time\n"
                            f"pathlib.Path({str(pid_file) + '.new'!r}).write_text(str(os.getpid()))\n"
                            f"os.rename({str(pid_file) + '.new'!r}, {str(pid_file)!r})\n"
                            "time.sleep(1); os.kill(os.getpid(), signal.SIGKILL)", tmp_path)
    results = local.execute(Plan(ranks=2, processes=(peer, victim)), tmp_path / "logs", timeout_s=120)
    peer_result, victim_result = results
    assert peer_result.returncode == -6 and victim_result.returncode == -9  # each ended by itself
    assert victim_result.ended_at < peer_result.ended_at
    assert first_failure(results) is victim_result


def run_watched(plan: Plan, log_dir, **limits):
    """Runs a one-process plan whose process prints its pid first; returns its result, the seconds the
    run took and the pid, which was seen alive while the run went on (the positive control)."""
    log = log_dir / f"{plan.processes[0].name}.log"
    pid = None
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(local.execute, plan, log_dir, **limits)
        while pid is None and not running.done():
            first = log.read_text().split("\n", 1) if log.exists() else []
            if len(first) == 2:  # a whole first line
                pid = int(first[0])
                assert alive(pid)
            time.sleep(0.05)
        [result] = running.result()
    assert pid is not None, "the process was never seen running"
    return result, time.monotonic() - started, pid


def test_time_limit(tmp_path):
    slow = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"
    plan = Plan(ranks=1, processes=(proc("slow", slow, tmp_path),))
    result, elapsed, pid = run_watched(plan, tmp_path / "logs", timeout_s=LIMIT_S)
    assert result.reason == f"time limit of {LIMIT_S} s reached" and not result.ok
    assert LIMIT_S <= elapsed < LIMIT_S + local.GRACE_S + MARGIN_S
    assert not alive(pid)


def test_first_error_line_is_kept_behind_rank_prefixes(tmp_path):
    code = ("print('[1]<stderr>:Traceback (most recent call last):'); "
            "print('[1]<stderr>:ValueError: bad shape'); print('RuntimeError: job terminated'); raise SystemExit(1)")
    [result] = local.execute(Plan(ranks=1, processes=(proc("launcher", code, tmp_path),)), tmp_path / "logs",
                             timeout_s=300)
    assert result.returncode == 1 and result.first_error == "ValueError: bad shape"


TORCHRUN_FAILURE = [
    "pytorch-gpt: data/tokens/train.bin holds token id 60000 (token 17), beyond the vocabulary of 50304",
    "E1125 19:00:00.000000 123 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)",
    "Traceback (most recent call last):",
    '  File "/stack/bin/torchrun", line 8, in <module>',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "train.py FAILED",
]
# torchrun's report when a rank died of a signal and wrote nothing itself: the first to fail is its root cause
TORCHRUN_ROOT_CAUSE = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "Failures:", "[1]:",
    "  rank      : 0 (local_rank: 0)", "  exitcode  : -15 (pid: 13)  (SIGTERM)",
    "  traceback : Signal 15 (SIGTERM) received by PID 13", "Root Cause (first observed failure):", "[0]:",
    "  rank      : 1 (local_rank: 1)", "  exitcode  : -9 (pid: 14)  (SIGKILL)", "  error_file: <N/A>",
    "  traceback : Signal 9 (SIGKILL) received by PID 14",
]


# a rank's exception as torch prints it ("[rank0]: ..."), then torchrun's report with no error file of the rank's
RANK_PREFIXED = [
    "[rank0]: Traceback (most recent call last):", "[rank0]:     raise exc.CppCompileError(cmd, output) from e",
    "[rank0]: torch._inductor.exc.InductorError: CppCompileError: C++ compile error",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "Root Cause (first observed failure):",
    "[0]:", "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 1489)", "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
]


# rank 0 seeing its peer go (rank 1 killed) before torchrun reports: the root cause is rank 1, not rank 0's error
PEER_RESET = "[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:38019: Connection reset"


@pytest.mark.parametrize("lines, first", [
    (TORCHRUN_FAILURE, TORCHRUN_FAILURE[0]),
    ([PEER_RESET, *TORCHRUN_ROOT_CAUSE], "rank 1 (local_rank: 1): Signal 9 (SIGKILL) received by PID 14"),
    ([PEER_RESET, "[rank1]: MemoryError: out of memory", *TORCHRUN_ROOT_CAUSE], "MemoryError: out of memory"),
    ([PEER_RESET, *RANK_PREFIXED[3:]], PEER_RESET.removeprefix("[rank0]: ")),
    (RANK_PREFIXED, "torch._inductor.exc.InductorError: CppCompileError: C++ compile error"),
    (RANK_PREFIXED[3:], "rank 0 (local_rank: 0): exit code 1 (pid: 1489)"),
    (TORCHRUN_FAILURE[1:], None),
    (TORCHRUN_ROOT_CAUSE, "rank 1 (local_rank: 1): Signal 9 (SIGKILL) received by PID 14"),
    ([TORCHRUN_FAILURE[0], *TORCHRUN_ROOT_CAUSE], TORCHRUN_FAILURE[0]),
    (["[1]<stderr>:mxnet-imagenet: --gpus 3 but this node has 2 GPU(s)", "RuntimeError: Horovod detected that "
      "one or more processes exited with non-zero status"], "mxnet-imagenet: --gpus 3 but this node has 2 GPU(s)"),
])
def test_first_error_is_the_rank_s_own_line_not_the_launcher_s(tmp_path, lines, first):
    code = f"print({chr(10).join(lines)!r}); raise SystemExit(1)"
    [result] = local.execute(Plan(ranks=1, processes=(proc("launcher", code, tmp_path),)), tmp_path / "logs",
                             timeout_s=300)
    assert result.returncode == 1 and result.first_error == first


def test_stall_limit_ends_a_silent_job(tmp_path):
    talker = proc("talker", "import os, time; print(os.getpid(), flush=True); time.sleep(600)", tmp_path)
    result, elapsed, pid = run_watched(Plan(ranks=1, processes=(talker,)), tmp_path / "logs", timeout_s=600,
                                       stall_s=LIMIT_S)
    assert result.reason == f"stall limit: no output from any process for {LIMIT_S} s"
    assert LIMIT_S <= elapsed < LIMIT_S + local.GRACE_S + MARGIN_S
    assert not alive(pid)


def test_a_process_that_ends_while_its_stat_is_read_is_not_alive(monkeypatch):
    """/proc/PID/stat opened before the process ended reads as ESRCH: ended, not an error (a race the fault
    tests hit when a worker is reaped between the two)."""
    class EndedMeanwhile:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr("builtins.open", lambda *a, **k: EndedMeanwhile())
    assert not alive(os.getpid())

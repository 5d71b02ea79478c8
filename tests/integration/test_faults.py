"""Faults during a real run: a worker dies, or the runner is told to stop (also on a machine busy
with CPU burners and a disk writer). The whole job must end within the bound, leave no process of
the run behind and leave a failed record that says why (tests/support/faults.py)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import installed_stack, tiny
from support.faults import (
    Load,
    alive,
    as_from_a_terminal,
    descendants,
    failed_record_after,
    ignored_signals,
    start_run,
    wait_for_ranks,
    with_environment,
    with_sigint_ignored,
)

LONG = tiny("pytorch-synthetic", num_iters=500)


def test_a_dying_worker_ends_the_job(tmp_path, pytorch_stack):
    runner = start_run(tmp_path, "--gpus-per-node", "2", case_args=LONG)
    pids = wait_for_ranks(tmp_path, 2)
    family = descendants(runner.pid)
    assert set(pids.values()) <= family and alive(pids[1])  # positive control: the victim is there, and ours
    os.kill(pids[1], signal.SIGKILL)
    record = failed_record_after(runner, tmp_path, family)
    assert record["reason"].startswith("repetition 0: horovodrun on localhost exited with 1;"), record["reason"]
    log = Path(record["repetitions"][0]["run_dir"], "logs", "horovodrun.log")  # kept for failed runs
    said = log.read_text()
    assert "Process name: 1" in said and "Exit code: 137" in said  # the rank killed, by SIGKILL (128 + 9)


@pytest.mark.parametrize("sig, busy, preexec", [(signal.SIGTERM, False, as_from_a_terminal),
                                                (signal.SIGINT, False, as_from_a_terminal),
                                                (signal.SIGINT, True, as_from_a_terminal),
                                                (signal.SIGINT, False, with_sigint_ignored)],
                         ids=["SIGTERM", "SIGINT", "SIGINT-on-a-busy-machine",
                              "SIGINT-to-a-runner-started-ignoring-it"])
def test_stopping_the_runner_cleans_up(tmp_path, pytorch_stack, sig, busy, preexec):
    runner = start_run(tmp_path, "--gpus-per-node", "2", case_args=LONG, preexec=preexec)
    pids = wait_for_ranks(tmp_path, 2)
    family = descendants(runner.pid)
    # Positive control: the ranks that must be gone afterwards are alive and part of the run now.
    assert set(pids.values()) <= family and all(alive(pid) for pid in pids.values())
    if busy:
        with Load(tmp_path / "load"):
            runner.send_signal(sig)
            record = failed_record_after(runner, tmp_path, family)
    else:
        runner.send_signal(sig)
        record = failed_record_after(runner, tmp_path, family)
    assert record["reason"].startswith("interrupted"), record["reason"]


def test_the_runners_of_the_tests_start_as_from_a_terminal_or_as_from_a_background_shell():
    """Positive control of the start-up above: the SIGINT a child is started with (a shell started in the
    background of a non-interactive one ignores SIGINT, as the tests' parent may)."""
    shown = {}
    for preexec in (as_from_a_terminal, with_sigint_ignored):
        child = subprocess.Popen(["sleep", "30"], preexec_fn=preexec)
        shown[preexec.__name__] = ignored_signals(child.pid)
        child.kill()
        child.wait()
    assert signal.SIGINT in shown["with_sigint_ignored"] and signal.SIGINT not in shown["as_from_a_terminal"]


def environ_of(pid: int) -> dict:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_a_dying_parameter_server_ends_the_job(tmp_path):
    installed_stack("mxnet")
    runner = start_run(tmp_path, "--case", "mxnet-imagenet", "--nodes", "2", "--hostfile", "hostfiles/loopback",
                       "--no-precheck",
                       case_args=tiny("mxnet-imagenet", benchmark=True, kv_store="dist_sync", num_batches=100000))
    wait_for_ranks(tmp_path, 2)
    family = descendants(runner.pid)
    servers = {pid: environ_of(pid) for pid in with_environment("DMLC_ROLE=server") & family}
    assert len(servers) == 2
    # Process listings come in no set order: name the server killed from its own environment.
    victim, env = min(servers.items(), key=lambda item: int(item[1]["DMLC_TASK_ID"]))
    name = f"server-{int(env['DMLC_TASK_ID']) - int(env['DMLC_NUM_WORKER'])}"
    assert alive(victim)
    os.kill(victim, signal.SIGKILL)
    record = failed_record_after(runner, tmp_path, family)
    assert record["reason"].startswith(
        f"repetition 0: {name} on {env['DMLC_NODE_HOST']} was killed by signal 9 (SIGKILL)")


def test_processes_of_a_repetition_that_left_its_process_groups_are_ended(tmp_path):
    """A descendant in a session of its own (as Horovod's middleman starts workers) is not reached by
    the signal to its scheduler's process group; the runner ends it by the repetition folder in its
    environment, SIGKILL where SIGTERM is ignored, and leaves other runs' processes alone."""
    from suite.execution import strays

    rep = tmp_path / "rep-0"
    ignores_term = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); "
                    "time.sleep(300)")
    started = [subprocess.Popen(argv, env={**os.environ, "SUITE_RUN_DIR": str(folder)}, start_new_session=True,
                                stdout=subprocess.PIPE)
               for argv, folder in [(["sleep", "300"], rep), ([sys.executable, "-c", ignores_term], rep),
                                    (["sleep", "300"], tmp_path / "rep-1")]]
    stray, stubborn, other = started
    stubborn.stdout.readline()  # its handler is set
    try:
        assert sorted(strays.of_repetition(rep)) == sorted([stray.pid, stubborn.pid])  # positive control
        said = []
        strays.end(rep, said.append)
        assert stray.wait(timeout=10) == -signal.SIGTERM and stubborn.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None and strays.of_repetition(rep) == []
        assert said == ["ended 2 process(es) of the repetition that outlived their process groups"]
    finally:
        for process in started:
            process.kill()

"""tools/python-matrix.sh around `make test`'s pytest: a SIGTERM to it (make passes one to its child alone) or a
Ctrl-C ends the test session as a terminal's Ctrl-C does, and the session's workers tear their fixtures down, also
where that takes longer than the 10 s pytest-xdist gives a worker once its controller stops (tests/support/
interrupt.py); nothing is left running."""

import os
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import ROOT
from support import interrupt
from support.cluster_fixtures import wait_for

# Two tests that each hold a fixture whose teardown must run (as the integration tests' daemons' do), one per
# pytest-xdist worker; they sleep far longer than this test waits. The teardown takes longer than pytest-xdist
# waits for a worker to end (10 s), as a SLURM cluster's can.
SLOW_TESTS = """
import os, pathlib, time
import pytest

MARKS = pathlib.Path(os.environ["MARKS"])


@pytest.fixture
def daemon():
    (MARKS / f"started-{os.getpid()}").touch()
    yield
    time.sleep(12)
    (MARKS / f"torn-down-{os.getpid()}").touch()


@pytest.mark.parametrize("n", [1, 2])
def test_sleeps(daemon, n):
    time.sleep(600)
"""


def still_running(path: str) -> list[str]:
    """Processes whose command line names `path`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if path in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


# SIGTERM: as make passes it on, to the script started with SIGINT ignored (`make test &` in a script, a CI
# runner's job): pytest must still take the interrupt. SIGINT: as a terminal's Ctrl-C reaches make and the script.
@pytest.mark.parametrize("sig, sigint", [(signal.SIGTERM, signal.SIG_IGN), (signal.SIGINT, signal.SIG_DFL)],
                         ids=["SIGTERM, started with SIGINT ignored", "SIGINT"])
def test_a_signal_to_the_script_interrupts_pytest_once_and_its_fixtures_are_torn_down(tmp_path, sig, sigint):
    marks = tmp_path / "marks"
    marks.mkdir()
    tests = tmp_path / "slow" / "test_slow.py"
    tests.parent.mkdir()
    tests.write_text(SLOW_TESTS)
    # The script in a checkout of its own (its logs there, not in the one whose `make test` may be running it
    # now), no other CPython beside it: the matrix's own runs are not what this checks.
    checkout = tmp_path / "checkout"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy2(ROOT / "tools" / "python-matrix.sh", checkout / "tools")
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    # The session loads the interrupt plugin of tests/conftest.py (the rest of it is not what this checks).
    env = {**os.environ, "MARKS": str(marks), "PYTHON_MATRIX": "", "CI": "", "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    script = subprocess.Popen(
        ["tools/python-matrix.sh", sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-p",
         "support.interrupt", "-q", "--basetemp", str(tmp_path / "basetemp"), str(tests)],
        cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    try:
        # a starved host (the niced interpreter matrix beside the integration tests) takes its time to start xdist
        wait_for(lambda: len(list(marks.glob("started-*"))) == 2, 240, "the two tests to start")
        script.send_signal(sig)
        out, _ = script.communicate(timeout=240)  # not the tests' 600 s sleep: ended by the signal
        assert script.returncode == 130, out
        torn_down = sorted(p.name.split("-")[-1] for p in marks.glob("torn-down-*"))
        assert torn_down == sorted(p.name.split("-")[-1] for p in marks.glob("started-*")), (torn_down, out)
        assert "received keyboard-interrupt" in out and interrupt.SAID in out, out
        wait_for(lambda: not still_running(str(tests)), 30, f"no process of {tests} left")
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(script.pid)], check=False)
        subprocess.run(["pkill", "-KILL", "-f", str(tests)], check=False)
        script.wait()

"""suite/instack/process_end.py: a case's process ends at once once its work is written (standard output
and logging files flushed, exit handlers skipped), and the usual way while it has multiprocessing children."""

import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = """
import atexit, logging, multiprocessing, sys, time
from suite.instack.process_end import end_process
log = logging.getLogger("case"); log.addHandler(logging.FileHandler(sys.argv[1])); log.setLevel(logging.INFO)
atexit.register(lambda: print("exit handlers ran"))
if sys.argv[2] == "child":
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
    child.start()
log.info("last line of the log")
sys.stdout.write("written, not yet flushed")
end_process()
print(" / still here")
"""


def run(tmp_path, mode: str) -> subprocess.CompletedProcess:
    """The script with standard output buffered, as a rank's is when PYTHONUNBUFFERED is not set."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "case.log"), mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_process_ends_at_once_with_its_output_and_log_written(tmp_path):
    done = run(tmp_path, "alone")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "written, not yet flushed"  # no exit handler ran, nothing after the call
    assert (tmp_path / "case.log").read_text() == "last line of the log\n"


def test_a_process_with_live_children_ends_the_usual_way(tmp_path):
    done = run(tmp_path, "child")  # Python's exit handlers stop its daemonic child
    assert done.returncode == 0, done.stderr
    assert done.stdout == "written, not yet flushed / still here\nexit handlers ran\n"

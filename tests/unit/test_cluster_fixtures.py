"""The cluster fixtures cannot let CI go green by skipping: a component that cannot be set up fails
the run under CI=true, skips elsewhere, and is named at the end of the session either way. The
fixtures' setup functions run in a pytest of their own, pointed at a daemon that does not exist (no
daemon is started)."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT

PROBE = """
from support.cluster_fixtures import require_{what}

def test_needs_{what}():
    require_{what}()
"""


@pytest.mark.parametrize("ci", ["true", None], ids=["CI=true", "no-CI"])
@pytest.mark.parametrize("what, variable", [("sshd", "SUITE_TEST_SSHD"), ("slurm", "SUITE_TEST_SLURMD")])
def test_a_missing_daemon_fails_under_ci_and_skips_elsewhere(tmp_path, what, variable, ci):
    probe = tmp_path / f"test_{what}_probe.py"
    probe.write_text(PROBE.format(what=what))
    missing = tmp_path / "no-such-daemon"
    env = {name: value for name, value in os.environ.items() if name != "CI"}
    # the checkout too: the other CPythons' environments hold its dependencies, not the runner itself
    path = os.pathsep.join((str(ROOT / "tests"), str(ROOT)))
    env.update({variable: str(missing), "PYTHONPATH": path, **({"CI": ci} if ci else {})})
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                           str(probe)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout
    if ci:
        assert done.returncode == 1 and "1 failed" in out, out
    else:
        assert done.returncode == 0 and "1 skipped" in out, out
    # The summary at the end names the component and why (the slurm fixture asks for root first).
    why = f"missing {missing} (from {variable})" if what == "sshd" or os.getuid() == 0 else "run the tests as root"
    summary = out.split("components not available", 1)[1]
    assert why in summary and ("(failed: CI=true)" if ci else "(skipped)") in summary, out

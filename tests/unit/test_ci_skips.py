"""The hook of tests/support/ci_skips.py: under CI=true a skip fails the run unless the test is allowed to."""

import os
import subprocess
import sys

from conftest import ROOT
from support.ci_skips import ALLOWED, verdict

SKIPPING = '''
import pytest


def test_skips():
    pytest.skip("nothing here")


@pytest.mark.skipif(True, reason="never on this machine")
def test_skipif():
    pass


def test_runs():
    assert True
'''


def run_pytest(folder, ci: bool):
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "true"} if ci else {})
    env["PYTHONPATH"] = str(ROOT / "tests")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "support.ci_skips", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(folder), str(folder / "test_example.py")], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_skip_fails_under_ci_and_skips_elsewhere(tmp_path):
    (tmp_path / "test_example.py").write_text(SKIPPING)
    elsewhere = run_pytest(tmp_path, ci=False)
    assert elsewhere.returncode == 0 and "1 passed, 2 skipped" in elsewhere.stdout, elsewhere.stdout
    in_ci = run_pytest(tmp_path, ci=True)
    assert in_ci.returncode == 1 and "1 failed, 1 passed, 1 error" in in_ci.stdout, in_ci.stdout  # skipif: at setup
    assert in_ci.stdout.count("not on the allow-list of tests/support/ci_skips.py") >= 2
    assert "nothing here" in in_ci.stdout and "never on this machine" in in_ci.stdout


def test_an_allowed_test_may_skip_in_ci_and_each_says_why():
    for nodeid, why in ALLOWED.items():
        assert verdict(f"{nodeid}[param]", ci=True) is None and why
        path, name = nodeid.split("::")
        assert f"def {name}(" in (ROOT / path).read_text()  # the list names tests that exist
    assert verdict("tests/test_x.py::test_y", ci=True) and verdict("tests/test_x.py::test_y", ci=False) is None

"""`suite check` for real on a narrow set of this host's paths: one cheap path that works (pytorch-ddp
with its ranks launcher on the local stack, at its tiny sizes) and the same path on a stack whose Python
was removed, which must show as failed with the run's own error; the same case in a site's environment
of Lmod modules (MODULES), and with a module that does not load (suite/commands/check.py)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from support.cluster_fixtures import ensure_installed as ensure_packages

from suite.stacks.locks import MARKER, ensure_installed, load_stack

PATH = "pytorch-ddp/local/ranks"
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


@pytest.fixture(scope="module")
def torch_stack():
    """The pytorch stack pytorch-ddp runs on, installed once."""
    return ensure_installed(load_stack("pytorch"))


def check(tmp_path, *args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite", "check", "--results-dir", str(tmp_path / "results"),
                           "--runs-dir", str(tmp_path / "runs"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)


def the_table(tmp_path) -> dict:
    [written] = (tmp_path / "site-checks").glob("*.json")
    return json.loads(written.read_text())


def test_a_path_that_works_is_ok_in_the_table_the_json_and_its_record(tmp_path, torch_stack):
    done = check(tmp_path, "--only", PATH)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    table = the_table(tmp_path)
    [row] = table["paths"]
    assert (row["case"], row["runtime"], row["launcher"], row["nodes"], row["devices"], row["outcome"]) == \
        ("pytorch-ddp", "local", "ranks", 1, 2, "ok")
    assert row["seconds"] > 0 and table["only"] == PATH and table["cluster"] == "localhost"
    record = json.loads(open(row["record"]).read())
    assert record["status"] == "ok" and record["world"]["devices"] == 2
    assert record["config"]["image_size"] == 32  # the case's [tiny] sizes
    assert "pytorch-ddp  local    ranks         1        2  ok" in done.stdout
    assert "1 ok, 0 failed, 0 not available here" in done.stdout


def test_a_stack_whose_python_was_removed_is_a_failed_path_with_the_runs_error(tmp_path, torch_stack):
    """A copy of the real stack's marker (packages, facts) in a stack home of its own, its Python gone."""
    home = tmp_path / "stacks"
    env = {**os.environ, "SUITE_STACK_HOME": str(home)}
    prefix = home / torch_stack.prefix.name
    (prefix / "bin").mkdir(parents=True)
    shutil.copy(torch_stack.prefix / MARKER, prefix / MARKER)
    (prefix / "bin" / "python").symlink_to(tmp_path / "removed-python")
    done = check(tmp_path, "--only", PATH, env=env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    [row] = the_table(tmp_path)["paths"]
    assert row["outcome"] == "failed" and "No such file or directory" in row["why"], row
    assert str(prefix / "bin" / "python") in row["why"] and "\n" not in row["why"]
    assert json.loads(open(row["record"]).read())["status"] == "failed"
    assert "0 ok, 1 failed, 0 not available here" in done.stdout


@pytest.fixture(scope="module")
def lmod_site(tmp_path_factory, torch_stack):
    """A Lua modulefile site-pytorch/2.13 that puts the pytorch stack's packages on the Python it was made
    from, as a site's EasyBuild module does; MODULEPATH names its folder."""
    ensure_packages((LMOD_INIT,), "lmod (environment modules, Debian package lmod)")
    code = ("import os, sys, sysconfig; print(os.path.realpath(sys._base_executable)); "
            "print(sysconfig.get_paths()['purelib'])")
    python, packages = subprocess.run([str(torch_stack.python), "-c", code], capture_output=True, text=True,
                                      check=True).stdout.split()
    root = tmp_path_factory.mktemp("lmod-site")
    (root / "python" / "bin").mkdir(parents=True)
    (root / "python" / "bin" / "python3").symlink_to(python)
    (root / "modulefiles" / "site-pytorch").mkdir(parents=True)
    (root / "modulefiles" / "site-pytorch" / "2.13.lua").write_text(
        f'prepend_path("PATH", "{root / "python" / "bin"}")\nprepend_path("PYTHONPATH", "{packages}")\n')
    return {**os.environ, "MODULEPATH": str(root / "modulefiles"), "OMP_NUM_THREADS": "1"}


def test_a_sites_modules_are_a_path_that_works_and_one_that_does_not_load_fails_with_lmods_words(tmp_path,
                                                                                                 lmod_site):
    done = check(tmp_path / "good", "--only", "pytorch-ddp/modules/ranks", "--modules", "site-pytorch/2.13",
                 env=lmod_site)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    [row] = the_table(tmp_path / "good")["paths"]
    assert (row["runtime"], row["outcome"]) == ("modules", "ok"), row
    record = json.loads(open(row["record"]).read())
    assert record["provenance"]["modules_loaded"] == ["site-pytorch/2.13"]
    done = check(tmp_path / "bad", "--only", "pytorch-ddp/modules/ranks", "--modules", "no-such-module/1.0",
                 env=lmod_site)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    [row] = the_table(tmp_path / "bad")["paths"]
    assert row["outcome"] == "failed" and "module no-such-module/1.0 does not load" in row["why"], row

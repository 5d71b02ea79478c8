"""`suite check` for real on narrow sets of paths: one cheap path that works (pytorch-ddp with its ranks
launcher on the local stack, at its tiny sizes) and the same path on a stack whose Python was removed,
which must show as failed with the run's own error; the same case in a site's environment of modules
(MODULES), with Lmod and with Environment Modules (the Tcl one), and with a module that does not load;
and on the two-node SLURM cluster of the tests, each path a batch job on one node and across two
(suite/execution/site_runner.py); and both JAX cases through their launcher on the local stack."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, component_unavailable, installed_stack
from support.cluster_fixtures import NODE_NAMES
from support.cluster_fixtures import ensure_installed as ensure_packages

from suite.base import paths
from suite.stacks.install import MARKER

PATH = "pytorch-ddp/local/ranks"
MODULES_PATH = "pytorch-ddp/modules/ranks"
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


@pytest.fixture(scope="module")
def torch_stack():
    """The pytorch stack pytorch-ddp runs on, installed once."""
    return installed_stack("pytorch")


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


def modules_over(root: Path, stack, modulefiles: dict[str, str]) -> dict:
    """Modulefiles that put the stack's packages on the Python it was made from, as a site's EasyBuild
    modules do (`{bin}`: a folder with that python3, `{packages}`: the stack's site-packages); the
    environment of a check that finds them on MODULEPATH."""
    code = ("import os, sys, sysconfig; print(os.path.realpath(sys._base_executable)); "
            "print(sysconfig.get_paths()['purelib'])")
    python, packages = subprocess.run([str(stack.python), "-c", code], capture_output=True, text=True,
                                      check=True).stdout.split()
    (root / "python" / "bin").mkdir(parents=True)
    (root / "python" / "bin" / "python3").symlink_to(python)
    for name, text in modulefiles.items():
        (root / "modulefiles" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "modulefiles" / name).write_text(text.format(bin=root / "python" / "bin", packages=packages))
    shell_module = [name for name in os.environ if name.startswith("BASH_FUNC_module")]  # a module system already set
    return {**{k: v for k, v in os.environ.items() if k not in shell_module}, "MODULEPATH": str(root / "modulefiles"),
            "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def lmod_site(tmp_path_factory, torch_stack):
    """A Lua modulefile site-pytorch/2.13 of Lmod."""
    ensure_packages((LMOD_INIT,), "lmod (environment modules, Debian package lmod)")
    env = modules_over(tmp_path_factory.mktemp("lmod-site"), torch_stack, {
        "site-pytorch/2.13.lua": 'prepend_path("PATH", "{bin}")\nprepend_path("PYTHONPATH", "{packages}")\n'})
    return {k: v for k, v in env.items() if k != "MODULESHOME"}  # Lmod from its usual place


def test_a_sites_modules_are_a_path_that_works_and_one_that_does_not_load_fails_with_lmods_words(tmp_path,
                                                                                                 lmod_site):
    done = check(tmp_path / "good", "--only", MODULES_PATH, "--modules", "site-pytorch/2.13", env=lmod_site)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    [row] = the_table(tmp_path / "good")["paths"]
    assert (row["runtime"], row["outcome"]) == ("modules", "ok"), row
    record = json.loads(open(row["record"]).read())
    assert record["provenance"]["modules_loaded"] == ["site-pytorch/2.13"]
    done = check(tmp_path / "bad", "--only", MODULES_PATH, "--modules", "no-such-module/1.0", env=lmod_site)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    [row] = the_table(tmp_path / "bad")["paths"]
    assert row["outcome"] == "failed" and "module no-such-module/1.0 does not load" in row["why"], row


@pytest.fixture(scope="module")
def tcl_site(tmp_path_factory, torch_stack):
    """Environment Modules, the Tcl system (tests/support/environment_modules.py), found as a site that
    uses it sets it up (MODULESHOME); Tcl modulefiles site-pytorch/2.13, which loads site-python/3.11."""
    from support.environment_modules import unpack

    try:
        init = unpack(paths.cache_home() / "test-deps" / "environment-modules")
    except (RuntimeError, subprocess.CalledProcessError, FileNotFoundError) as exc:
        component_unavailable("Environment Modules (Debian environment-modules, unpacked)", str(exc))
    env = modules_over(tmp_path_factory.mktemp("tcl-site"), torch_stack, {
        "site-python/3.11": "#%Module1.0\nprepend-path PATH {bin}\n",
        "site-pytorch/2.13": "#%Module1.0\nmodule load site-python/3.11\nprepend-path PYTHONPATH {packages}\n"})
    return {**env, "MODULESHOME": str(init.parents[1])}


def test_tcl_environment_modules_are_a_path_that_works_and_one_that_does_not_load_fails_with_their_words(
        tmp_path, tcl_site):
    done = check(tmp_path / "good", "--only", MODULES_PATH, "--modules", "site-pytorch/2.13", env=tcl_site)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    [row] = the_table(tmp_path / "good")["paths"]
    assert (row["runtime"], row["outcome"]) == ("modules", "ok"), row
    record = json.loads(open(row["record"]).read())
    assert record["provenance"]["modules_loaded"] == ["site-python/3.11", "site-pytorch/2.13"]
    done = check(tmp_path / "bad", "--only", MODULES_PATH, "--modules", "no-such-module/1.0", env=tcl_site)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    [row] = the_table(tmp_path / "bad")["paths"]
    assert row["outcome"] == "failed" and "module no-such-module/1.0 does not load" in row["why"], row
    assert "Unable to locate a modulefile for 'no-such-module/1.0'" in row["why"]  # the Tcl system's words, not Lmod's


def test_the_docker_path_runs_in_the_stacks_image(tmp_path, cpu_images):
    """The Docker engine and the cpu images of the session (tests/support/docker_fixtures.py)."""
    done = check(tmp_path / "image", "--only", "pytorch-ddp/docker/ranks")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    [row] = the_table(tmp_path / "image")["paths"]
    assert (row["runtime"], row["outcome"]) == ("docker", "ok"), row
    provenance = json.loads(open(row["record"]).read())["provenance"]
    assert (provenance["runtime"], provenance["image_sha256"]) == ("docker", cpu_images["pytorch"]["image_sha256"])


def test_a_jax_case_is_a_path_that_works(tmp_path):
    """A JAX case through its launcher on the local stack: a row like every framework's. jax-resnet's path is
    the same launcher and the same run (two processes, [tiny]) as test_jax_resnet.py's first test: checked once."""
    installed_stack("jax")
    done = check(tmp_path, "--only", "jax-gpt/local/")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    paths_checked = the_table(tmp_path)["paths"]
    rows = [(p["case"], p["runtime"], p["launcher"], p["nodes"], p["devices"], p["outcome"]) for p in paths_checked]
    assert rows == [("jax-gpt", "local", "jaxdist", 1, 2, "ok")]
    for row in paths_checked:
        record = json.loads(open(row["record"]).read())
        assert record["status"] == "ok" and record["config"]["reported_by_case"]["processes"] == 2


# Last in this module: the cluster's end kills every process that has its SLURM_CONF, as a Docker engine
# started by a later test would.
def test_on_two_slurm_nodes_each_path_is_a_batch_job_on_one_node_and_across_two(slurm_two_nodes, tmp_path,
                                                                                 torch_stack):
    """The profile `slurm` (any SLURM cluster, its default partition): the local path runs, the modules
    path (no environment of the site named) is not available and counts as no pass."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = check(tmp_path, "--cluster", "slurm", "--only", PATH, "--only", MODULES_PATH, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    table = the_table(tmp_path)
    assert (table["cluster"], table["scheduler"]) == ("slurm", "slurm")
    rows = [(p["runtime"], p["nodes"], p["devices"], p["outcome"]) for p in table["paths"]]
    assert rows == [("local", 1, 2, "ok"), ("local", 2, 2, "ok"), ("modules", 1, 2, "not available here"),
                    ("modules", 2, 2, "not available here")]
    assert all(p["why"].startswith("no environment of the site named") for p in table["paths"][2:])
    for row in table["paths"][:2]:
        record = json.loads(open(row["record"]).read())
        hosts = record["world"]["hosts"]
        assert len(hosts) == row["nodes"] and set(hosts) <= set(NODE_NAMES)  # nodes of the cluster, no placeholders
        assert record["execution"]["slurm"]["state"] == "COMPLETED"
        assert {p["launch"] for p in record["repetitions"][0]["processes"]} == {"srun"}
    assert "2 ok, 0 failed, 2 not available here" in done.stdout

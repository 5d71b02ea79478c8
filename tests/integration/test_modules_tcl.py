"""Runtime `modules` with Environment Modules, the Tcl module system (tests/support/environment_modules.py),
as test_modules.py does with Lmod: Tcl modulefiles over the built pytorch stack, found through the
profile's init or $MODULESHOME; a run, its fingerprint, and a module that does not load."""

import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, component_unavailable, installed_stack, records_in, tiny

from suite import cli
from suite.base import paths
from suite.records.schema import validate

DDP = tiny("pytorch-ddp")


def tcl_modulefile(folder: Path, name: str, *lines: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#%Module1.0\n" + "\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def tcl_site(tmp_path_factory):
    """Environment Modules' init file, and modulefiles site-python/3.11 and site-pytorch/2.13 (which
    loads site-python) over the pytorch stack, as a site's EasyBuild modules would be."""
    from support.environment_modules import unpack

    try:
        init = unpack(paths.cache_home() / "test-deps" / "environment-modules")
    except (RuntimeError, subprocess.CalledProcessError, FileNotFoundError) as exc:
        component_unavailable("Environment Modules (Debian environment-modules, unpacked)", str(exc))
    stack = installed_stack("pytorch")
    code = ("import os, sys, sysconfig; print(os.path.realpath(sys._base_executable)); "
            "print(sysconfig.get_paths()['purelib'])")
    python, packages = subprocess.run([str(stack.python), "-c", code], capture_output=True, text=True,
                                      check=True).stdout.split()
    root = tmp_path_factory.mktemp("tcl-site")
    (root / "python" / "bin").mkdir(parents=True)
    (root / "python" / "bin" / "python3").symlink_to(python)
    mf = root / "modulefiles"
    tcl_modulefile(mf, "site-python/3.11", f"prepend-path PATH {root / 'python' / 'bin'}")
    tcl_modulefile(mf, "site-pytorch/2.13", "module load site-python/3.11", f"prepend-path PYTHONPATH {packages}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODULEPATH", str(mf))
        patch.setenv("OMP_NUM_THREADS", "1")
        yield init, root


def profile(folder: Path, init: Path, load: str) -> None:
    """A profile tcl.toml in `folder` (the test's stand-in for hostfiles/): this machine, runtime modules, the
    Tcl system's init file and one module."""
    (folder / "tcl.toml").write_text(f'hostfile = "{ROOT / "hostfiles" / "localhost"}"\nruntime = "modules"\n'
                                     f'[modules]\ninit = "{init}"\nload = ["{load}"]\n')


def run_tcl(tmp: Path, monkeypatch, init: Path, load: str) -> int:
    """`suite run --cluster tcl --case pytorch-ddp` (tiny) in this process, the profile under tmp."""
    monkeypatch.setattr(paths, "HOSTFILES", tmp)
    profile(tmp, init, load)
    return cli.main(["run", "--cluster", "tcl", "--case", "pytorch-ddp", "--results-dir", str(tmp / "results"),
                     "--runs-dir", str(tmp / "runs"), "--", *DDP])


def test_pytorch_ddp_runs_in_tcl_modules_and_the_record_fingerprints_them(tcl_site, tmp_path, monkeypatch):
    init, root = tcl_site
    assert run_tcl(tmp_path, monkeypatch, init, "site-pytorch/2.13") == 0
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "ok", record["reason"]
    prov = record["provenance"]
    assert prov["modules_loaded"] == ["site-python/3.11", "site-pytorch/2.13"]
    mf = root / "modulefiles"
    assert sorted(prov["environment_files"]) == [str(mf / "site-python/3.11"), str(mf / "site-pytorch/2.13")]
    assert prov["stack_location"] == str(root / "python" / "bin" / "python3")
    [process] = record["repetitions"][0]["processes"]
    assert f". {init}" in process["argv"][2] and "module load site-pytorch/2.13" in process["argv"][2]


def test_a_module_that_does_not_load_is_refused_with_the_tcl_systems_own_error(tcl_site, tmp_path, monkeypatch,
                                                                               capsys):
    init, _ = tcl_site
    assert run_tcl(tmp_path, monkeypatch, init, "site-pytorch/9.9") == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: module site-pytorch/9.9 does not load on localhost: ")
    assert "Unable to locate a modulefile for 'site-pytorch/9.9'" in line
    assert not (tmp_path / "results").exists()

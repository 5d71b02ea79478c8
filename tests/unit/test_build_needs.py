"""What a stack's local build needs of the host (container.toml's build_needs) is looked for before anything is
downloaded: a host without patch, a compiler or the Python headers is refused in one line that names what is
missing and the packages that give it, where it would otherwise fail minutes into Horovod's build. What a case's
options need of the host (case.toml's [[host_needs]]: --compile's compilers and headers) is read the same way; its
refusal of a real run is in tests/integration/test_pytorch_gpt.py."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, path_without

from suite.base.errors import UsageError
from suite.execution.run import case_options
from suite.inputs.cases import known_cases, load_case
from suite.stacks import build_needs
from suite.stacks.install import require_build_needs
from suite.stacks.recipes import described_top, load_flavour, load_stack

ALL = ("c++", "cc", "make", "patch", "python-headers")


def programs(folder: Path, *names: str) -> Path:
    """A folder of executables with these names (a PATH holding them and nothing else)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    return folder


def headers(folder: Path, present: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if present:
        (folder / "Python.h").write_text("")
    return folder


def test_each_need_is_looked_for_where_a_build_looks(tmp_path):
    path = programs(tmp_path / "bin", "g++", "gcc", "make")
    assert build_needs.lacking(ALL, {"PATH": str(path)}, headers(tmp_path / "inc", True)) == ["patch"]
    bare = programs(tmp_path / "empty")
    assert build_needs.lacking(ALL, {"PATH": str(bare)}, headers(tmp_path / "none", False)) == list(ALL)
    # CXX and CC name the compilers a build takes, wherever they are; a command with options is its first word
    compilers = programs(tmp_path / "opt", "icpx", "icx")
    named = {"PATH": str(bare), "CXX": f"{compilers / 'icpx'} -O2", "CC": str(compilers / "icx")}
    assert build_needs.lacking(("c++", "cc"), named, headers(tmp_path / "inc", True)) == []
    # where CXX names a compiler that is not there, the build fails though g++ is on PATH
    assert build_needs.lacking(("c++",), {"PATH": str(path), "CXX": "absent-c++"}, tmp_path) == ["c++"]


def test_the_refusal_names_what_is_missing_and_the_packages_that_give_it(tmp_path):
    said = build_needs.refusal("pytorch-horovod/cpu", ["patch", "python-headers"], tmp_path)
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert "\n" not in said and said.startswith("stack pytorch-horovod/cpu: its local build (post-install.sh) needs")
    assert f"patch, the headers of {python} (no Python.h in {tmp_path})" in said
    assert f"apt install patch {python}-dev on Debian, Ubuntu; dnf install patch python3-devel on Fedora" in said
    assert "RUNTIME=apptainer or docker" in said and "RUNTIME=modules" in said


def test_a_stack_that_builds_from_source_says_what_it_needs_and_an_unknown_need_is_refused(tmp_path):
    horovod = load_stack("pytorch-horovod")
    assert horovod.post_install and set(horovod.build_needs) == set(ALL)
    assert all(not load_stack(name).build_needs for name in ("pytorch", "jax", "tensorflow", "mxnet"))
    toml = tmp_path / "container.toml"
    toml.write_text('build_needs = ["c++", "fortran"]\n')
    with pytest.raises(UsageError, match=r"build_needs \['fortran'\] are not ones the suite can look for \(c\+\+, cc"):
        described_top(toml)


def test_the_install_is_refused_where_the_host_lacks_a_need(monkeypatch, tmp_path):
    flavour = load_flavour(load_stack("pytorch-horovod"), "cpu")
    monkeypatch.setenv("PATH", str(programs(tmp_path / "bin", "c++", "cc", "make")))
    with pytest.raises(UsageError, match=r"needs what this host lacks: patch[;,]"):
        require_build_needs(flavour)
    require_build_needs(load_flavour(load_stack("pytorch"), "cpu"))  # pip alone builds it: nothing needed


def test_a_run_on_a_host_without_patch_is_refused_before_anything_is_downloaded(tmp_path):
    """`make run`'s own command on a host whose PATH has everything of this one's but patch, with no stack
    built yet: exit 2, one line naming patch, no stack folder begun, no record."""
    path = path_without(tmp_path / "bin", lambda name: name == "patch")
    assert shutil.which("patch", path=str(path)) is None
    env = {**os.environ, "PATH": str(path), "SUITE_STACK_HOME": str(tmp_path / "stacks")}
    result = subprocess.run([sys.executable, "-m", "suite", "run", "--case", "pytorch-synthetic",
                             "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: stack pytorch-horovod/cpu: its "
                                                                        "local build (post-install.sh) needs")
    assert "lacks: patch" in result.stderr and "apt install" in result.stderr
    assert not [p for p in (tmp_path / "stacks").glob("*") if not p.name.endswith(".lock")]
    assert not (tmp_path / "results").exists()


def test_every_cases_host_needs_are_ones_the_suite_can_look_for():
    cases = [load_case(name) for name in known_cases()]
    entries = [(case.name, entry) for case in cases for entry in case.spec.get("host_needs", [])]
    assert {name for name, _ in entries} >= {"pytorch-gpt", "pytorch-ddp"}
    for name, entry in entries:
        assert set(entry["needs"]) <= set(build_needs.NEEDS) and entry["why"], (name, entry)


@pytest.mark.parametrize("case, argv, asked", [
    ("pytorch-gpt", [], False),
    ("pytorch-gpt", ["--compile"], True),
    ("pytorch-gpt", ["--preset", "h100"], True),  # the preset compiles
    ("pytorch-ddp", ["--preset", "dle"], False),
    ("pytorch-ddp", ["--preset", "h100"], True),
])
def test_compiling_asks_for_the_compilers_and_headers(case, argv, asked):
    loaded = load_case(case)
    needs = loaded.host_needs(case_options(loaded, argv)[0])
    assert bool(needs) == asked and all(set(n) == {"c++", "cc", "python-headers"} for n, _ in needs)


def test_doctor_names_what_a_stack_not_yet_built_would_lack(monkeypatch, tmp_path):
    from suite.runtimes.local import doctor_lines

    monkeypatch.setenv("SUITE_STACK_HOME", str(tmp_path / "stacks"))  # nothing built there
    monkeypatch.setenv("PATH", str(programs(tmp_path / "bin", "c++", "cc", "make")))
    lines = doctor_lines(None, ["pytorch-horovod", "pytorch"], "cpu")
    lacking = [line for line in lines if "its local build" in line]
    assert len(lacking) == 1 and lacking[0].startswith("missing: stack pytorch-horovod/cpu: its local build")
    assert "lacks: patch" in lacking[0]

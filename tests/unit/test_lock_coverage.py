"""Every lock installs where its header says: for each CPython version and processor it claims, every pin
that applies there (its marker) has a file whose wheel tags install there, read from the file names
listed beside the lock; every other target is named with what lacks a file. Reads the locks only (no
network). And a stack is refused, before anything is built, with an interpreter its lock does not cover."""

import platform
import sys

import pytest
from conftest import ROOT
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from suite.base.errors import UsageError
from suite.stacks import install
from suite.stacks.install import require_covered
from suite.stacks.lock_targets import Target, files_cover, listed_files, read_coverage
from suite.stacks.locks import lock_entries, lock_pins
from suite.stacks.recipes import load_flavour, load_stack

LOCKS = sorted([*ROOT.glob("containers/*/requirements.lock"), *ROOT.glob("containers/*/cuda/requirements.lock")])
TARGETS = [Target(p, m) for m in ("x86_64", "aarch64") for p in ("3.10", "3.11", "3.12", "3.13")]


def lock_id(lock) -> str:
    return lock.parent.relative_to(ROOT / "containers").as_posix()


def lacking_files(lock, target: Target) -> list[str]:
    coverage, files = read_coverage(lock), listed_files(lock)
    return [f"{pin.name}=={pin.version}" for pin in lock_entries(lock) if pin.applies(target)
            and not files_cover([files[h] for h in pin.hashes], target, coverage.glibc)]


def test_every_lock_states_its_coverage_and_lists_its_files():
    assert len(LOCKS) == 10  # 5 stacks x (cpu, cuda)
    for lock in LOCKS:
        coverage = read_coverage(lock)
        assert coverage and coverage.covered, f"{lock}: no '# covers:' header (make locks writes it)"
        assert {h for pin in lock_entries(lock) for h in pin.hashes} == set(listed_files(lock)), lock


@pytest.mark.parametrize("lock", LOCKS, ids=lock_id)
def test_each_claimed_target_has_a_file_of_every_pin_that_applies_there(lock):
    for target in read_coverage(lock).covered:
        names = [canonicalize_name(pin.name) for pin in lock_entries(lock) if pin.applies(target)]
        assert len(names) == len(set(names)), f"{target.key}: a package pinned twice"
        assert {"mlperf-logging"} <= set(names)  # the cases' logger, in every lock
        assert lacking_files(lock, target) == [], target.key


@pytest.mark.parametrize("lock", LOCKS, ids=lock_id)
def test_each_target_it_does_not_claim_is_named_with_what_lacks_a_file(lock):
    coverage = read_coverage(lock)
    for target in set(TARGETS) - set(coverage.covered):
        lacking, said = lacking_files(lock, target), coverage.not_covered.get(target.key, "")
        if said.startswith("no file of "):
            assert lacking and said == f"no file of {', '.join(lacking)} for it"
        else:  # left out on purpose (tools/locks.toml says why), or a lock made for one image's Python
            assert said or lock_id(lock) == "mxnet/cuda", f"{target.key} is left out without a reason"


@pytest.mark.parametrize("lock", LOCKS, ids=lock_id)
def test_every_listed_file_is_of_its_pins_version(lock):
    files = listed_files(lock)
    for pin in lock_entries(lock):
        for sha in pin.hashes:
            assert parse_wheel_filename(files[sha])[1] == Version(pin.version), files[sha]


def test_what_the_frameworks_do_not_publish_is_named():
    mxnet, tensorflow = (read_coverage(ROOT / "containers" / s / "requirements.lock") for s in ("mxnet", "tensorflow"))
    assert mxnet.not_covered["3.12-x86_64"] == "no file of numpy==1.23.5 for it"
    assert "libarmpl_lp64_mp.so" in mxnet.not_covered["3.11-aarch64"]  # a wheel that does not import there
    assert tensorflow.not_covered["3.11-aarch64"] == "no file of tensorflow-cpu==2.21.0 for it"
    pytorch = read_coverage(ROOT / "containers" / "pytorch" / "requirements.lock")
    assert set(pytorch.covered) == set(TARGETS) and pytorch.glibc == "2.28"
    for flavour in ("", "cuda/"):  # jax: each interpreter the newest jax that supports it, both flavours
        assert set(read_coverage(ROOT / "containers" / "jax" / f"{flavour}requirements.lock").covered) == set(TARGETS)


def test_wheel_tags_decide_what_a_file_covers():
    numpy = "numpy-1.23.5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert files_cover([numpy], Target("3.11", "x86_64"), "2.28")
    assert not files_cover([numpy], Target("3.12", "x86_64"), "2.28")
    assert not files_cover([numpy], Target("3.11", "aarch64"), "2.28")
    assert not files_cover(["x-1.0-cp311-cp311-manylinux_2_34_x86_64.whl"], Target("3.11", "x86_64"), "2.28")
    assert files_cover(["x-1.0-py3-none-any.whl"], Target("3.13", "aarch64"), "2.28")
    assert not files_cover(["x-1.0.tar.gz"], Target("3.13", "aarch64"), "2.28")


def test_pins_follow_their_markers_per_interpreter_and_processor():
    lock = ROOT / "containers" / "pytorch" / "requirements.lock"
    assert lock_pins(lock, Target("3.11", "x86_64"))["torch"] == "2.13.0+cpu"  # the CPU build
    assert lock_pins(lock, Target("3.12", "aarch64"))["torch"] == "2.13.0"
    assert lock_pins(lock, Target("3.10", "x86_64"))["numpy"] == "2.2.6"  # numpy 2.4 needs Python >= 3.11
    assert "nvidia-nccl-cu13" not in lock_pins(lock, Target("3.11", "x86_64"))
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert lock_pins(lock) == lock_pins(lock, Target(here, platform.machine()))


def test_a_lock_line_without_hash_is_refused_naming_it(tmp_path):
    bad = tmp_path / "requirements.lock"
    bad.write_text("numpy==2.2.6 ; python_version < '3.11'\n")
    with pytest.raises(UsageError, match=r"requirements.lock:1: 'numpy==2.2.6 ; python_version < '3.11'' is not"):
        lock_entries(bad)
    bad.write_text("numpy>=2 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    with pytest.raises(UsageError, match="is not pinned"):
        lock_entries(bad)


def test_an_interpreter_the_lock_does_not_cover_is_refused_saying_what_is():
    mxnet = load_flavour(load_stack("mxnet"), "cpu")
    with pytest.raises(UsageError) as refused:
        require_covered(mxnet, Target("3.12", "x86_64"), "2.36")
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith("stack mxnet/cpu: containers/mxnet/requirements.lock covers CPython 3.10-x86_64 3.11-x86_64")
    assert "not CPython 3.12 on x86_64 (no file of numpy==1.23.5 for it)" in said
    assert "BOOTSTRAP_PYTHON=python3.11" in said and "RUNTIME=modules" in said and "RUNTIME=apptainer" in said
    require_covered(mxnet, Target("3.11", "x86_64"), "2.36")  # covered: no refusal


def test_a_processor_without_the_cpu_build_points_to_the_flavour_that_has_one():
    with pytest.raises(UsageError, match=r"not CPython 3\.12 on aarch64 .*use FLAVOUR=cuda \(its lock covers "
                                         r"3\.12-aarch64\), or the site's own framework \(RUNTIME=modules\)$"):
        require_covered(load_flavour(load_stack("tensorflow"), "cpu"), Target("3.12", "aarch64"), "2.39")


def test_an_older_glibc_than_the_files_need_is_refused():
    with pytest.raises(UsageError, match=r"not glibc 2\.17 \(its files need glibc >= 2\.28\); use the site's own"):
        require_covered(load_flavour(load_stack("pytorch"), "cpu"), Target("3.11", "x86_64"), "2.17")


def test_a_stacks_folder_names_its_interpreter_and_processor():
    name = install.local_prefix(load_flavour(load_stack("pytorch"), "cpu")).name
    here = f"py{sys.version_info.major}.{sys.version_info.minor}-{platform.machine()}-"
    assert name.startswith("pytorch-cpu-" + here) and len(name) == len("pytorch-cpu-" + here) + 16

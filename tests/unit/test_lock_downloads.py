"""tools/check-lock-downloads.py picks, from a lock's `.files` list, the files of one processor: what it
streams and hashes against the index (the network part is run by hand, see containers/README.md)."""

import importlib.util

from conftest import ROOT
from packaging.utils import parse_wheel_filename

from suite.stacks import lock_targets

spec = importlib.util.spec_from_file_location("check_lock_downloads", ROOT / "tools" / "check-lock-downloads.py")
check_lock_downloads = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_lock_downloads)

CUDA_LOCK = ROOT / "containers" / "pytorch" / "cuda" / "requirements.lock"


def test_the_aarch64_files_of_the_cuda_lock_are_its_aarch64_and_pure_wheels_with_their_hashes():
    picked = check_lock_downloads.wanted_files(CUDA_LOCK, "aarch64")
    listed = {name: sha for sha, name in lock_targets.listed_files(CUDA_LOCK).items()}
    assert not [name for name in picked if "x86_64" in name]
    assert [name for name in listed if "aarch64" in name and name not in picked] == []
    assert {name: listed[name] for name in picked} == picked
    platforms = {tag.platform for name in picked for tag in parse_wheel_filename(name)[3]}
    assert platforms - {"any"} and all(p == "any" or p.endswith("_aarch64") for p in platforms)


def test_every_covered_aarch64_interpreter_gets_its_torch():
    picked = check_lock_downloads.wanted_files(CUDA_LOCK, "aarch64")
    coverage = lock_targets.read_coverage(CUDA_LOCK)
    for target in (t for t in coverage.covered if t.machine == "aarch64"):
        tag = "cp" + target.python.replace(".", "")
        assert [name for name in picked if name.startswith("torch-") and f"-{tag}-" in name], target.key

import subprocess

import pytest

from suite.base import paths
from suite.base.errors import UsageError
from suite.stacks.install import ensure_installed, find_installed, local_prefix
from suite.stacks.locks import lock_pins
from suite.stacks.recipes import Stack, load_flavour, load_stack


@pytest.mark.parametrize("lock", sorted(paths.CONTAINERS.glob("*/*.lock")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_package_is_pinned_with_a_hash(lock):
    assert lock_pins(lock)


@pytest.mark.parametrize("text, line", [
    ("numpy==1.23.5\n", 1),                                            # hash removed by hand
    ("# pinned\nnumpy>=1.23 \\\n    --hash=sha256:" + "a" * 64 + "\n", 2),  # a range
    ("numpy==1.23.5 \\\n    --hash=sha256:abc\n", 1),                   # a malformed hash
])
def test_a_hand_edited_lock_is_refused_naming_the_line(tmp_path, monkeypatch, text, line):
    stack = tmp_path / "toy"
    stack.mkdir()
    (stack / "requirements.lock").write_text(text)
    pinned_as = r"is not pinned as 'name==version \[; marker\] --hash"
    with pytest.raises(UsageError, match=rf"requirements.lock:{line}: .* {pinned_as}"):
        lock_pins(stack / "requirements.lock")
    monkeypatch.setattr(paths, "CONTAINERS", tmp_path)
    with pytest.raises(UsageError, match="is not pinned"):
        load_stack("toy")


@pytest.fixture
def toy_stack(tmp_path, monkeypatch):
    monkeypatch.setenv("SUITE_STACK_HOME", str(tmp_path / "home"))
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "requirements.lock").write_text("# no packages\n")
    (folder / "post-install.sh").write_text(
        'echo run >> "$STACK_DIR/runs"\n'
        '[ -e "$STACK_DIR/fail" ] && exit 1\n'
        'python -c "import sys; assert sys.prefix == \'$STACK_PREFIX\'"\n'
        'echo \'{"built": true}\' > "$SUITE_FACTS_FILE"\n')
    return load_flavour(Stack("toy", folder), "cpu")  # a stack without container.toml: its lock, built here


def test_interrupted_install_is_not_taken_for_a_finished_one(toy_stack):
    """A build that fails removes what it made and says where the cause is; one killed midway (its folder
    left without the marker) is removed and made again by the next install."""
    (toy_stack.stack.dir / "fail").touch()
    with pytest.raises(RuntimeError, match=r"post-install.sh .* exit 1 \(its output above says why"):
        ensure_installed(toy_stack, log=lambda m: None)
    assert not local_prefix(toy_stack).exists() and find_installed(toy_stack) is None

    (toy_stack.stack.dir / "fail").unlink()
    (local_prefix(toy_stack) / "bin").mkdir(parents=True)  # as a killed install leaves it
    assert find_installed(toy_stack) is None
    messages = []
    installed = ensure_installed(toy_stack, log=messages.append)
    assert any("removing an unfinished install" in m for m in messages)
    assert installed.info["facts"] == {"built": True}
    assert installed.info["lock_sha256"] == toy_stack.lock_sha256 and installed.info["flavour"] == "cpu"

    again = ensure_installed(toy_stack, log=messages.append)
    assert again.prefix == installed.prefix
    assert (toy_stack.stack.dir / "runs").read_text().count("run") == 2  # the third call built nothing


def test_a_changed_recipe_gets_its_own_environment(toy_stack):
    before = local_prefix(toy_stack)
    (toy_stack.stack.dir / "requirements.lock").write_text("# changed\n")
    assert local_prefix(toy_stack) != before
    assert str(local_prefix(toy_stack)).startswith(str(paths.stack_home()))


def test_installed_pytorch_stack_matches_its_locks(pytorch_stack):
    expected = {}
    for lock in pytorch_stack.stack.dir.glob("*.lock"):
        expected.update(lock_pins(lock))
    installed = {name.replace("_", "-"): version for name, version in pytorch_stack.info["packages"].items()}
    for name, version in expected.items():
        assert installed.get(name.replace("_", "-")) == version, name
    assert pytorch_stack.info["facts"]["horovod_gloo"] is True


def test_horovod_is_built_without_debug_information(pytorch_stack):
    """post-install.sh asks Horovod's build for Release (patches/horovod-*-build-type.patch): the extension
    carries no DWARF sections (RelWithDebInfo's is thirty times the size and takes a quarter longer to build)."""
    assert pytorch_stack.info["facts"]["horovod_build_type"] == "Release"
    [extension] = (pytorch_stack.prefix / "lib").glob("python3*/site-packages/horovod/torch/mpi_lib_v2*.so")
    sections = subprocess.run(["readelf", "--section-headers", "--wide", str(extension)],
                              capture_output=True, text=True, check=True).stdout
    assert ".text" in sections and ".debug_info" not in sections

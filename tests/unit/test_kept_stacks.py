"""`suite stacks`: the stacks kept under the stack home, listed with their size and use, and --remove-unused-days
removing only those no recipe of this checkout makes and nothing used for that long, never one whose lock an
install holds."""

import fcntl
import os
import time

import pytest

from suite import cli
from suite.stacks.install import MARKER
from suite.stacks.kept import kept_stacks, key_of
from suite.stacks.recipes import described_flavours

DAY = 86400


def stack_folder(home, name: str, age_days: float, finished: bool = True, size: int = 4096):
    folder = home / name
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_bytes(b"x" * size)
    if finished:
        (folder / MARKER).write_text('{"built_at": "2026-01-01T00:00:00Z"}')
    lock = home / f"{name}.lock"
    lock.write_text("")
    then = time.time() - age_days * DAY
    for path in (folder, folder / MARKER, lock):
        if path.exists():
            os.utime(path, (then, then))
    return folder


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SUITE_STACK_HOME", str(tmp_path))
    return tmp_path


def test_folder_names_give_stack_flavour_and_recipe():
    assert key_of(type("P", (), {"name": "pytorch-horovod-cuda-py3.13-aarch64-0123456789abcdef"})) == (
        "pytorch-horovod", "cuda", "0123456789abcdef")
    assert key_of(type("P", (), {"name": "jax-cpu-pypy-3.11-x86_64-0123456789abcdef"}))[:2] == ("jax", "cpu")
    assert key_of(type("P", (), {"name": "notes"})) is None


def test_only_old_recipes_unused_for_the_days_given_are_removed_and_a_held_one_is_kept(home, capsys):
    current = described_flavours()[0]
    mine = stack_folder(home, f"{current.stack.name}-{current.name}-py3.12-x86_64-{current.recipe_sha256[:16]}", 90)
    old = stack_folder(home, "pytorch-cpu-py3.11-x86_64-00000000deadbeef", 40, size=1 << 20)
    recent = stack_folder(home, "jax-cpu-py3.11-x86_64-00000000feedface", 2)
    unfinished = stack_folder(home, "tensorflow-cpu-py3.11-x86_64-00000000cafebabe", 40, finished=False)
    held = stack_folder(home, "mxnet-cpu-py3.11-x86_64-00000000abad1dea", 40)

    listed = {s.prefix.name: s for s in kept_stacks()}
    assert listed[mine.name].of_this_checkout and not listed[old.name].of_this_checkout
    assert listed[old.name].size_bytes >= 1 << 20 and listed[unfinished.name].info == {}
    assert cli.main(["stacks"]) == 0
    out = capsys.readouterr().out
    assert f"{old.name}  " in out and "unfinished" in out and "5 stack(s)" in out and old.exists()

    with open(home / f"{held.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert cli.main(["stacks", "--remove-unused-days", "30"]) == 0
    out = capsys.readouterr().out
    assert not old.exists() and not (home / f"{old.name}.lock").exists() and not unfinished.exists()
    assert mine.exists() and recent.exists() and held.exists()
    assert f"removed {old.name}" in out and f"kept {held.name}: an install holds its lock now" in out


@pytest.mark.parametrize("days", ["0", "-3", "soon"])
def test_a_bad_number_of_days_is_refused_with_exit_2(home, capsys, days):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["stacks", "--remove-unused-days", days])
    assert stopped.value.code == 2 and f"must be a number of days above 0, got {days}" in capsys.readouterr().err

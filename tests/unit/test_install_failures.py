"""Install failures that say what happened, in one line, before anything large is downloaded: a build
only the flavour's extra index publishes, judged with pip's own settings (real pip against package
indexes served here), and a file whose hash the lock does not list (pip's own message, read back)."""

import os
import subprocess
import sys

import pytest

from suite.stacks import install, wheelhouse
from suite.stacks.recipes import load_flavour, load_stack

BUILD = (("toy", "1.0+cpu"),)
DEAD = "http://127.0.0.1:9/simple/"  # the discard port: nothing listens


def simple_index(root, name: str, files: list[str]):
    """A PEP 503 index of one project under root/simple (pip reads the page only)."""
    page = root / "simple" / name
    page.mkdir(parents=True)
    links = "".join(f'<a href="../../files/{f}">{f}</a>\n' for f in files)
    (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


@pytest.fixture
def pip_sees_only(tmp_path, monkeypatch):
    """pip with none of this host's settings but an index served here, holding what the test puts there."""
    wheelhouse.pip_offers.cache_clear()
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)

    def serve(host_files: list[str], extra_files: list[str]):
        simple_index(tmp_path / "host", "toy", host_files)
        simple_index(tmp_path / "extra", "toy", extra_files)
        return wheelhouse.served(tmp_path)

    yield serve
    wheelhouse.pip_offers.cache_clear()


def test_the_extra_index_is_named_only_for_a_build_this_hosts_pip_lacks(pip_sees_only, monkeypatch):
    with pip_sees_only(["toy-1.0-py3-none-any.whl"], ["toy-1.0+cpu-py3-none-any.whl"]) as url:
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}host/simple/")
        assert wheelhouse.sources(f"{url}extra/simple/", needs=BUILD) == ["--extra-index-url", f"{url}extra/simple/"]
        assert wheelhouse.sources(f"{url}extra/simple/", needs=()) == []  # nothing pinned from it


def test_a_build_this_hosts_pip_has_needs_no_extra_index(pip_sees_only, monkeypatch):
    with pip_sees_only(["toy-1.0+cpu-py3-none-any.whl"], []) as url:  # a mirror or find-links that has it
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}host/simple/")
        assert wheelhouse.sources(DEAD, needs=BUILD) == []


def test_an_extra_index_that_does_not_answer_stops_the_install_naming_it_and_the_ways_on(pip_sees_only, monkeypatch):
    with pip_sees_only(["toy-1.0-py3-none-any.whl"], []) as url:
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}host/simple/")
        asked, run = [], subprocess.run
        monkeypatch.setattr(wheelhouse.subprocess, "run", lambda argv, **kw: asked.append(argv) or run(argv, **kw))
        with pytest.raises(RuntimeError) as stopped:
            wheelhouse.sources(DEAD, needs=BUILD)
        assert [argv[-1] for argv in asked if "--index-url" in argv] == [DEAD]  # asked once
        for argv in asked:  # no retries, a short timeout: a dead index costs seconds, not minutes
            assert argv[argv.index("--retries") + 1] == "0" and int(argv[argv.index("--timeout") + 1]) <= 10
        with pytest.raises(RuntimeError, match="toy==1.0\\+cpu comes only from " + f"{url}extra/simple/"):
            wheelhouse.sources(f"{url}extra/simple/", needs=BUILD)  # answers, but lists no such build
    said = str(stopped.value)
    assert "\n" not in said and said.startswith(f"toy==1.0+cpu comes only from {DEAD}, which does not list it")
    assert "FLAVOUR=cuda" in said and "WHEELS=" in said and "PIP_EXTRA_INDEX_URL" in said


def test_a_wheel_folder_is_read_alone():
    cpu = load_flavour(load_stack("pytorch"), "cpu")
    argv = install.install_argv(cpu, "/py", wheels="/w")
    assert argv[argv.index("--no-index"):argv.index("--no-index") + 3] == ["--no-index", "--find-links", "/w"]
    assert "--extra-index-url" not in argv and argv[-2:] == ["-r", str(cpu.lock_path)]


# What pip 23-25 print when a file's hash is not in the lock (two hashes listed for the pin).
PIP_MISMATCH = """ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the \
package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have \
tampered with them.
    markupsafe==3.0.4 from https://files.example.org/packages/markupsafe-3.0.4-cp312-cp312-manylinux_2_17_x86_64.\
manylinux2014_x86_64.whl#sha256=8e12 (from -r /x/containers/pytorch/requirements.lock (line 14)):
        Expected sha256 6da83a088f8ef93b2d483a8232a4dbf4d69d3d8496b568a03c56becac43e1808
        Expected     or 0ab4b69f3ee03a62a002cfbf77b1ca5e88aceb4ea64cb4388bb28f638ddbb045
             Got        8e12000000000000000000000000000000000000000000000000000000000000
"""


def test_a_hash_mismatch_names_the_file_and_the_lock(capfd):
    cpu = load_flavour(load_stack("pytorch"), "cpu")
    pip = [sys.executable, "-c", f"import sys; sys.stderr.write({PIP_MISMATCH!r}); sys.exit(1)"]
    with pytest.raises(RuntimeError) as failed:
        install._checked_run(pip, cpu, None, pip=True)
    said = str(failed.value)
    assert "\n" not in said
    assert said.startswith("stack pytorch/cpu: pip got markupsafe-3.0.4-cp312-cp312-manylinux_2_17_x86_64."
                           "manylinux2014_x86_64.whl for markupsafe==3.0.4, whose sha256 8e12")
    assert "containers/pytorch/requirements.lock does not list" in said and "make locks" in said
    assert "THESE PACKAGES DO NOT MATCH" in capfd.readouterr().err  # pip's own words still shown


def test_a_real_pip_hash_failure_is_read_the_same_way(tmp_path):
    """pip itself, on a wheel served here whose hash the lock does not list."""
    (tmp_path / "toy-1.0-py3-none-any.whl").write_bytes(b"not the file the lock was made with")
    lock = tmp_path / "requirements.lock"
    lock.write_text("toy==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--no-index",
                           "--find-links", str(tmp_path), "-d", str(tmp_path / "d"), "-r", str(lock)],
                          capture_output=True, text=True, env=env)
    found = install.MISMATCH.search(done.stderr)
    assert done.returncode != 0 and found, done.stderr
    assert found.group(1) == "toy==1.0" and found.group(2).endswith("toy-1.0-py3-none-any.whl")

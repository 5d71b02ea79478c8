import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def suite_cli(tmp_path):
    """Runs `python -m suite` as a user would, with records and run directories under tmp_path."""

    def run(*args: str, case_args: tuple[str, ...] = (), timeout: float = 900):
        command = [sys.executable, "-m", "suite", *args]
        if args and args[0] == "run":
            command += ["--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
        if case_args:
            command += ["--", *case_args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)

    run.results = tmp_path / "results"
    run.runs = tmp_path / "runs"
    return run


@pytest.fixture(scope="session")
def pytorch_stack():
    """The real pytorch-horovod stack, installed once (a few minutes on a fresh machine)."""
    from suite.stacks import ensure_installed, load_stack

    return ensure_installed(load_stack("pytorch-horovod"))


def records_in(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


os.environ.setdefault("PYTHONUNBUFFERED", "1")

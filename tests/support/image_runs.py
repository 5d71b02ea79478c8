"""What the container runtimes' tests check of a suite command run in an image: one ok record, and that
`make check-site`'s row for the runtime runs and `suite rerun` of its record keeps the image and refuses
another (Apptainer's, Charliecloud's and Podman's tests share it)."""

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import ROOT, records_in

from suite.records.schema import validate


def suite(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m suite ARGS` in the checkout, with exactly `env`."""
    return subprocess.run([sys.executable, "-m", "suite", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def ok_record(done: subprocess.CompletedProcess, results: Path) -> dict:
    """The one record the command wrote, valid and ok (with the command's output where it failed)."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = records_in(results)
    validate(record)
    assert record["status"] == "ok", record["reason"]
    return record


def check_site_then_rerun(env: dict, folder: Path, runtime: str, image_sha256: str, program: str,
                          other_env: dict, drift: str,
                          run: Callable[..., subprocess.CompletedProcess] = suite) -> tuple[dict, dict]:
    """check-site's pytorch-ddp/RUNTIME/ranks row ok, its record in the image `image_sha256`; a rerun of that
    record in the same image (no drift, every process started by `program`); then, under other_env (another
    image), the rerun refused before anything ran with the one `drift: image:` line `drift`. Each command
    runs as `run(env, *args)` (suite() here; Apptainer's with umask 0). The row and the rerun's record, for
    a runtime's own checks."""
    dirs = ("--results-dir", str(folder / "results"), "--runs-dir", str(folder / "runs"))
    done = run(env, "check", *dirs, "--only", f"pytorch-ddp/{runtime}/ranks")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [written] = (folder / "site-checks").glob("*.json")
    [row] = json.loads(written.read_text())["paths"]
    assert (row["case"], row["runtime"], row["launcher"], row["outcome"]) == ("pytorch-ddp", runtime, "ranks", "ok")
    assert json.loads(Path(row["record"]).read_text())["provenance"]["image_sha256"] == image_sha256
    again = run(env, "rerun", row["record"], *dirs)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    [new] = [r for r in records_in(folder / "results") if r["run_id"] != Path(row["record"]).stem]
    assert new["status"] == "ok" and new["provenance"]["rerun_of"]["drift"] == []
    assert (new["provenance"]["runtime"], new["provenance"]["image_sha256"]) == (runtime, image_sha256)
    assert all(program in p["argv"] for p in new["repetitions"][0]["processes"])
    written = len(records_in(folder / "results"))
    refused = run({**env, **other_env}, "rerun", row["record"], *dirs)
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert [line for line in refused.stderr.splitlines() if line.startswith("drift: image:")] == [drift], \
        refused.stderr
    assert len(records_in(folder / "results")) == written  # refused before anything ran
    return row, new

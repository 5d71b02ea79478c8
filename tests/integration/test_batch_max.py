"""--batch-size max for real: the suite, run under a per-rank memory limit (RLIMIT_AS, which every process it
starts inherits: on a CPU the limit a GPU's memory is), searches pytorch-gpt's and jax-gpt's largest batch with
short trial runs that end in the framework's own out-of-memory error, then measures at the batch it found. The
search's decisions over every kind of bound are in tests/unit/test_batch_search.py."""

import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, records_in, tiny

from suite.records.schema import validate

# The address space a rank may map: at a context of 512 tokens and a vocabulary of 8,192 each sequence of the
# batch takes ~50 MB (the logits and their gradient), so the limit falls a few sequences above [tiny]'s batch 4
# (measured here: pytorch-gpt 7, jax-gpt 9); JAX maps ~1.5 GB before its first step (its threads' stacks).
LIMITS = {"pytorch-gpt": 1200 << 20, "jax-gpt": 2 << 30}
SIZES = ("--context", "512", "--vocab-size", "8192")


def under_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


@pytest.mark.parametrize("case", sorted(LIMITS))
def test_the_largest_batch_under_a_memory_limit_is_found_to_one_sequence_and_measured(tmp_path, case):
    command = [sys.executable, "-m", "suite", "run", "--case", case, "--results-dir", str(tmp_path / "results"),
               "--runs-dir", str(tmp_path / "runs"), "--", *tiny(case), *SIZES, "--batch-size", "max"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          preexec_fn=under_limit(LIMITS[case]))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = records_in(tmp_path / "results")[-1]
    validate(record)
    search = record["metrics"]["batch_search"]
    found, trials = search["found"], {t["batch"]: t for t in search["trials"]}
    assert record["status"] == "ok" and found > 1
    assert record["config"]["batch_per_device"] == found == record["config"]["options"]["batch-size"]
    assert trials[found]["fits"] and Path(trials[found]["run_dir"]).is_dir()
    assert not trials[found + 1]["fits"]  # the batch one sequence larger did not train ...
    assert trials[found + 1]["why"].startswith("out of memory: ")  # ... for memory, in the framework's words
    said = {"pytorch-gpt": "can't allocate memory", "jax-gpt": "RESOURCE_EXHAUSTED"}[case]
    assert said in trials[found + 1]["why"]
    assert search["bound"]["batch"] == found + 1
    assert f"--batch-size max chose {found}, the largest that trained; {found + 1} did not: out of memory" \
        in done.stdout

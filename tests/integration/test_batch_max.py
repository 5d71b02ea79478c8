"""--batch-size max for real: the suite, run under a per-rank memory limit (RLIMIT_AS, which every process it
starts inherits: on a CPU the limit a GPU's memory is), searches pytorch-gpt's and jax-gpt's largest batch with
short trial runs that end in the framework's own out-of-memory error, then measures at the batch it found. The
search's decisions over every kind of bound are in tests/unit/test_batch_search.py."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, records_in, tiny

from suite.records.schema import validate

# The address space a rank may map: at a context of 512 tokens and a vocabulary of 8,192 each sequence of the
# batch takes ~50 MB (the logits and their gradient), so the limit falls a few sequences above [tiny]'s batch 4
# (measured here: pytorch-gpt 8, jax-gpt 13); JAX maps well over a GB before its first step (its threads' stacks).
LIMITS = {"pytorch-gpt": 1200 << 20, "jax-gpt": 1400 << 20}
SIZES = ("--context", "512", "--vocab-size", "8192")
# JAX's asynchronous dispatch on a CPU takes a step's ~50 MB a sequence for the next step before, or after, the
# last step's are freed, by turns: the same batch fitted in one run and not the next (at 1,700 MB the batch found
# 10 to 17, and a measurement, which runs more steps than a trial, out of memory four batches below it). Each step
# run inline holds one step's memory at a time: the bound is the same in every run (13 at 1,400 MB, 19 at 1,700).
STEPS = {"jax-gpt": ("--cpu-dispatch", "inline")}
# glibc gives threads arenas of their own, each mapping 64 MiB of address space as threads happen to need one:
# that moved the limit found by a few sequences from run to run; one arena makes the address space the data's.
STEADY = {"MALLOC_ARENA_MAX": "1"}


def under_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


@pytest.mark.parametrize("case", sorted(LIMITS))
def test_the_largest_batch_under_a_memory_limit_is_found_to_one_sequence_and_measured(tmp_path, case):
    command = [sys.executable, "-m", "suite", "run", "--case", case, "--results-dir", str(tmp_path / "results"),
               "--runs-dir", str(tmp_path / "runs"), "--", *tiny(case), *SIZES, *STEPS.get(case, ()),
               "--batch-size", "max"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          preexec_fn=under_limit(LIMITS[case]), env={**os.environ, **STEADY})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = records_in(tmp_path / "results")[-1]
    validate(record)
    search = record["metrics"]["batch_search"]
    found = search["found"]
    assert record["status"] == "ok" and found > 1  # it trained at the batch found: the measurement
    assert record["config"]["batch_per_device"] == found == record["config"]["options"]["batch-size"]
    assert not any(t["batch"] == found and not t["fits"] for t in search["trials"])
    # the batch one sequence larger did not train, in a trial or (at the very edge, with the run's more steps) in
    # the measurement, which then measured one smaller (a trial at that batch may have trained before: the
    # measurement's is the last word): for memory, in the framework's words
    larger = [t for t in search["trials"] if t["batch"] == found + 1]
    assert larger and not larger[-1]["fits"]
    assert all(t["why"].startswith("out of memory") and Path(t["run_dir"]).is_dir() for t in larger if not t["fits"])
    # XLA says RESOURCE_EXHAUSTED, or INTERNAL where the allocation fails while it dispatches the step; where a
    # CPU kernel's own allocation fails, jaxlib's YNNPACK says so before its INTERNAL error
    said = {"pytorch-gpt": ("can't allocate memory",), "jax-gpt": ("Out of memory allocating", "allocate of <")}[case]
    assert any(words in larger[-1]["why"] for words in said), larger[-1]["why"]
    assert search["bound"]["batch"] == found + 1
    assert f"--batch-size max chose {found}, the largest that trained; {found + 1} did not: out of memory" \
        in done.stdout

"""--batch-size max (suite/execution/batch_search.py): the search's decisions over launches that a fake device
answers (fits up to a batch, runs out of memory past it, says so as each framework does); the real searches,
under a per-rank memory limit, are in tests/integration/test_batch_max.py."""

import signal
from pathlib import Path

import pytest

from suite.base.errors import RunFailed, UsageError
from suite.execution import batch_search
from suite.execution.batch_search import Asked, Search
from suite.execution.console import batch_search_line
from suite.inputs.cases import known_cases, load_case
from suite.instack.case_options import value_given
from suite.records.measure import Repetition

TORCH_CPU = ("[rank0]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
             "allocate memory: you tried to allocate 62914560 bytes. Error code 12 (Cannot allocate memory)")
SAID_BY = {
    "torch cuda": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                  "capacity of 79.10 GiB of which 1.2 GiB is free.",
    "torch cpu": TORCH_CPU,
    "xla": "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 862749952 bytes.",
    "jaxlib cpu kernels": "allocate of <8> failed.\n"
                          "jax.errors.JaxRuntimeError: INTERNAL: YNNPACK operation failed: error",
    "python": "MemoryError",
    "c++": "terminate called after throwing an instance of 'std::bad_alloc'",
    "tensorflow": "ResourceExhaustedError: OOM when allocating tensor with shape[256,64,112,112]",
}


class Device:
    """Launches answered by a device where batches up to `fits` train and larger ones fail with `said`; each
    rank's memory 100 MiB + 10 MiB a sample."""

    def __init__(self, fits: int, said: str = TORCH_CPU, failing: str | None = None):
        self.fits, self.said, self.failing, self.launched = fits, said, failing, []

    def __call__(self, batch: int, run_dir: Path) -> Repetition:
        self.launched.append(batch)
        (run_dir / "logs").mkdir(parents=True)
        rep = Repetition(0, str(run_dir), exit_codes={"rank-0": 0})
        if self.failing:
            rep.status, rep.reason, rep.exit_codes = "failed", self.failing, {"rank-0": 1}
        elif batch > self.fits:
            (run_dir / "logs" / "rank-0.log").write_text(f"starting\n{self.said}\nTraceback ends\n")
            rep.status, rep.reason, rep.exit_codes = "failed", "rank-0 on localhost exited with 1", {"rank-0": 1}
        else:
            rep.results = {"peak_memory_bytes": [(100 + 10 * batch) << 20]}
        return rep


def search(device, tmp_path, start=4, host_limit=None) -> Search:
    found = Search(Asked("batch-size", "batch-size", start, ()))
    batch_search.run_search(found, device, tmp_path, host_limit, lambda *_: None)
    return found


@pytest.mark.parametrize("fits,start", [(13, 4), (13, 13), (13, 14), (5, 32), (1, 8), (100, 1), (64, 64)])
def test_the_search_finds_the_largest_batch_that_trains_and_the_next_did_not(tmp_path, fits, start):
    found = search(device := Device(fits), tmp_path, start)
    assert found.found == fits
    assert found.trial_at(fits).fits and not found.trial_at(fits + 1).fits
    assert "out of memory: " in found.trial_at(fits + 1).why and "can't allocate memory" in found.trial_at(fits + 1).why
    assert len(device.launched) == len(set(device.launched))  # no batch tried twice
    assert len(device.launched) <= 2 * max(fits, start).bit_length() + 2


def test_the_record_keeps_every_trial_and_the_bound(tmp_path):
    record = search(Device(13), tmp_path).as_record()
    assert record["found"] == 13 and record["asked"] == "max" and record["option"] == "batch-size"
    assert [t["batch"] for t in record["trials"]] == [4, 8, 16, 12, 14, 13]
    assert record["bound"]["batch"] == 14 and record["bound"]["why"].startswith("out of memory")
    assert all(t["run_dir"] for t in record["trials"])
    assert record["trials"][0]["peak_memory_bytes"] == (100 + 40) << 20
    line = batch_search_line(record)
    assert "chose 13, the largest that trained; 14 did not: out of memory" in line and "6 trial(s)" in line


@pytest.mark.parametrize("framework", sorted(SAID_BY))
def test_each_frameworks_out_of_memory_error_bounds_the_search(tmp_path, framework):
    assert search(Device(6, SAID_BY[framework]), tmp_path).found == 6


def test_a_rank_the_kernel_killed_counts_as_out_of_memory(tmp_path):
    rep = Repetition(0, str(tmp_path), status="failed", reason="rank-1 was killed by signal 9",
                     exit_codes={"rank-0": -signal.SIGTERM, "rank-1": -signal.SIGKILL})
    (tmp_path / "logs").mkdir()
    fits, why = batch_search.outcome(rep, 64, tmp_path)
    assert not fits and why.startswith("out of memory: a process was killed (SIGKILL")


def test_a_trial_cut_by_its_time_limit_bounds_the_search_and_says_so(tmp_path):
    rep = Repetition(0, str(tmp_path), status="failed", reason="rank-0 on localhost time limit of 600 s reached")
    fits, why = batch_search.outcome(rep, 512, tmp_path)
    assert not fits and why.startswith("too slow for the trial's time limit")


def test_a_failure_that_is_not_memory_fails_the_point_naming_it(tmp_path):
    with pytest.raises(RunFailed, match="trial at batch 4 failed, not for memory: rank-0 .*NCCL error"):
        search(Device(13, failing="rank-0 on gpu1 exited with 1; first error: 'NCCL error'"), tmp_path)


def test_where_not_even_batch_one_trains_the_search_says_why(tmp_path):
    found = Search(Asked("batch-size", "batch-size", 4, ()))
    with pytest.raises(RunFailed, match="not even batch 1 trains: out of memory"):
        batch_search.run_search(found, Device(0), tmp_path, None, lambda *_: None)
    assert found.found is None and [t.batch for t in found.trials] == [4, 2, 1]  # kept for the failed record


def test_on_a_cpu_no_trial_starts_that_the_trials_predict_past_the_hosts_memory(tmp_path):
    """Nothing raises an out-of-memory error here: the search stops where the measured memory says it would
    spend what the host has (a rank's 100 MiB + 10 MiB a sample, 600 MiB allowed: batch 50 is the last)."""
    device = Device(fits=10_000)
    found = search(device, tmp_path, host_limit=600 << 20)
    assert found.found <= 50 and found.found >= 45
    assert max(device.launched) <= 50  # no launch past what the host may give
    bound = found.trial_at(found.found + 1) if any(t.batch == found.found + 1 for t in found.trials) else \
        min((t for t in found.trials if not t.fits), key=lambda t: t.batch)
    assert bound.run_dir is None and "more than the 0.59 GiB a rank may take" in bound.why


def test_with_no_bound_at_all_the_search_stops_at_its_ceiling(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_search, "CEILING", 256)
    found = search(Device(fits=10_000), tmp_path)
    assert found.found == 256 and "ceiling of 256" in found.trial_at(257).why


def test_the_prediction_follows_the_two_largest_trials():
    trials = [batch_search.Trial(b, True, "trained", "x", (100 + 10 * b) << 20) for b in (4, 8)]
    assert batch_search.predicted_bytes(trials, 16) == (100 + 160) << 20
    assert batch_search.predicted_bytes(trials[:1], 8) == (140 << 20) * 2  # from one: proportional (more, not less)
    assert batch_search.predicted_bytes([], 8) is None


class FakeCase:
    name = "fake"

    def __init__(self, table):
        self.spec = {"batch_search": table} if table is not None else {}

    def parse_options(self, argv):
        return {"batch-size": int(value_given(argv, "batch-size") or 32)}


@pytest.mark.parametrize("argv,start", [
    (["--batch-size", "max"], 32),
    (["--batch-size=max"], 32),
    (["--batch-size", "4", "--lr", "1", "--batch-size", "max"], 4),  # --tiny's batch first: the search starts there
])
def test_max_asks_for_the_search_from_the_batch_the_run_would_use(argv, start):
    found = batch_search.asked(FakeCase({"trial": {"num-iters": 1, "fast": True}}), argv)
    assert found.start == start and found.trial_args == ("--num-iters=1", "--fast")
    assert found.args_at(argv, 12)[-2:] == ["--batch-size", "12"] and "max" not in found.args_at(argv, 12)


def test_only_the_last_batch_given_counts():
    assert batch_search.asked(FakeCase({}), ["--batch-size", "max", "--batch-size", "8"]) is None


def test_a_case_without_a_search_table_refuses_max_in_one_line():
    with pytest.raises(UsageError, match="case fake cannot search its batch .*no \\[batch_search\\] table"):
        batch_search.asked(FakeCase(None), ["--batch-size", "max"])


@pytest.mark.parametrize("name", known_cases())
def test_every_case_searches_and_its_trial_options_are_its_own(name):
    case = load_case(name)
    argv = [*case.tiny_args(), "--batch-size", "max"]
    asked = batch_search.asked(case, argv)
    assert asked is not None, f"{name} has no [batch_search] table"
    options = case.parse_options([*asked.args_at(argv, 3), *asked.trial_args])
    assert options[asked.option] == 3


def test_mxnet_searches_its_batch_per_device_when_asked_for_batch_size_max():
    case = load_case("mxnet-imagenet")
    argv = ["--batch-size", "max"]
    asked = batch_search.asked(case, argv)
    assert asked.option == "batch-per-device"
    options = case.parse_options(asked.args_at(argv, 24))
    assert options["batch-per-device"] == 24 and options["batch-size"] == 0  # per node: the per-device batch x devices


def test_a_hosts_share_per_rank_is_read_from_each_host_through_the_scheduler():
    from suite.inputs.hostfiles import Host, World

    class Scheduler:
        def run_on_hosts(self, hosts, argv, cluster):
            assert argv == batch_search.MEMORY_AVAILABLE
            return {"a": "MemAvailable:    8388608 kB\n", "b": "MemAvailable:    4194304 kB\n"}

    world = World((Host("a", 2), Host("b", 1)), "hostfile")
    assert batch_search.host_bytes_per_rank(Scheduler(), world, None) == int(4 * 2**30 * batch_search.HOST_SHARE)


def test_a_trial_of_a_case_that_reports_no_memory_is_measured_by_its_largest_process(tmp_path):
    """pytorch-synthetic, tf-cifar and mxnet-imagenet report no peak memory: the host's guard then reads the
    largest process the trial started here, as the kernel counted it (a real child holding 300 MiB; in a fresh
    interpreter, whose children so far are none)."""
    import subprocess
    import sys

    from conftest import ROOT

    script = f"""
import subprocess, sys
from pathlib import Path
from suite.execution import batch_search
from suite.records.measure import Repetition
def launch(batch, run_dir):
    subprocess.run([sys.executable, "-c", "x = bytearray(300 << 20); x[::4096] = b'1' * len(x[::4096])"], check=True)
    return Repetition(0, str(run_dir))
search = batch_search.Search(batch_search.Asked("batch-size", "batch-size", 4, ()))
trial = batch_search.tried(search, 4, launch, Path({str(tmp_path)!r}), 1 << 40, lambda *_: None)
print(trial.fits, trial.peak_memory_bytes)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    fits, peak = done.stdout.split()
    assert fits == "True" and int(peak) >= 300 << 20, done.stderr


def test_a_measurement_whose_log_goes_on_long_after_its_memory_error_is_still_measured_smaller(tmp_path):
    """The process's first error, which the repetition's reason quotes, says out of memory where the log's last
    lines no longer do (XLA's dispatch error, then hundreds of lines): the next smaller batch is measured."""
    found = search(Device(15), tmp_path)
    (tmp_path / "rep-0" / "logs").mkdir(parents=True)
    (tmp_path / "rep-0" / "logs" / "rank-0.log").write_text("during the run\n" * 900)
    error = ("jax.errors.JaxRuntimeError: INTERNAL: Error dispatching computation: Out of memory allocating "
             "701356228 bytes.")
    failed = Repetition(0, str(tmp_path / "rep-0"), status="failed", exit_codes={"rank-0": 1},
                        reason=f"rank-0 on localhost exited with 1; first error: {error!r}; log: /x/rank-0.log")
    assert found.smaller_after(failed) == 14
    assert found.trials[-1].why.startswith("out of memory in the measurement: rank-0 on localhost exited with 1")
    other = Repetition(0, str(tmp_path / "rep-0"), status="failed", exit_codes={"rank-0": 1},
                       reason="rank-0 on localhost exited with 1; first error: 'NCCL error'; log: /x/rank-0.log")
    assert found.smaller_after(other) is None


def test_where_the_measurement_at_the_batch_found_runs_out_of_memory_one_smaller_is_measured(tmp_path):
    """A trial is shorter than the run: at the very edge the run's more steps can take more memory. The failed
    measurement is kept as a trial and the next smaller batch measured, three times at most."""
    found = search(Device(13), tmp_path)
    (tmp_path / "rep-0" / "logs").mkdir(parents=True)
    (tmp_path / "rep-0" / "logs" / "rank-0.log").write_text(SAID_BY["xla"] + "\n")
    failed = Repetition(0, str(tmp_path / "rep-0"), status="failed", reason="rank-0 exited with 1",
                        exit_codes={"rank-0": 1})
    assert found.smaller_after(failed) == 12 and found.found == 12
    assert found.trials[-1].batch == 13 and found.trials[-1].why.startswith("out of memory in the measurement: ")
    assert found.as_record()["bound"]["batch"] == 13
    assert found.smaller_after(failed) == 11
    assert found.smaller_after(failed) == 10
    assert found.smaller_after(failed) is None  # three retries at most: the record then fails as any run
    assert search(Device(13), tmp_path / "b").smaller_after(Repetition(0, str(tmp_path))) is None  # it trained
    other = Repetition(0, str(tmp_path / "b"), status="failed", reason="NCCL error", exit_codes={"rank-0": 1})
    assert search(Device(13), tmp_path / "c").smaller_after(other) is None  # not memory: no retry

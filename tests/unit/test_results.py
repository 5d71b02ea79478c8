"""Probe files -> measurement -> record, without a framework: the probe is the real one."""

import json
import os

import jsonschema
import pytest

from suite.base.errors import RunFailed
from suite.base.stats import mean_ci95
from suite.execution.request import RunRequest, recorded
from suite.inputs.cases import load_case
from suite.inputs.hostfiles import Host, World
from suite.instack.probe import Probe
from suite.records.measure import Repetition, measure, timeline
from suite.records.schema import validate
from suite.records.write import RunContext, build_record, new_run_id, utc_now, write_record


def fake_rank(run_dir, rank, size, seconds, images=40, finish=True):
    probe = Probe(rank, size, local_rank=rank, local_size=size, run_dir=str(run_dir))
    probe.start(config={"dtype": "float32", "device_type": "cpu"}, versions={"torch": "x"})
    probe._write("warmup", images=10, seconds=0.5)
    for s in seconds:
        probe._write("iteration", index=0, images=images, seconds=s)
    if finish:
        probe.end()


def context(world, **options):
    case = load_case("pytorch-synthetic")
    opts = case.parse_options([f"--{k}={v}" for k, v in options.items()])
    return RunContext(new_run_id(case.name, world.nodes, world.devices), case, opts, world, "local", "local",
                      ["python", "-m", "suite", "run"], utc_now(), request=recorded(RunRequest(case=case.name)))


def test_iteration_throughput_is_all_images_over_slowest_rank(tmp_path):
    fake_rank(tmp_path, 0, 2, [1.0, 2.0])
    fake_rank(tmp_path, 1, 2, [2.0, 1.0])
    rep = Repetition(0, str(tmp_path))
    measure(rep, 2)
    assert rep.samples == [40.0, 40.0]
    assert (rep.images, rep.seconds) == (160, 4.0)
    assert rep.warmup == {"images": 20, "seconds": 0.5}


def test_missing_or_unfinished_rank_fails(tmp_path):
    fake_rank(tmp_path, 0, 2, [1.0])
    with pytest.raises(RunFailed, match=r"expected probe files of ranks 0..1, found ranks \[0\]"):
        measure(Repetition(0, str(tmp_path)), 2)
    fake_rank(tmp_path, 1, 2, [], finish=False)
    with pytest.raises(RunFailed, match=r"rank\(s\) \[1\] did not finish"):
        measure(Repetition(0, str(tmp_path)), 2)


def test_torn_last_line_is_ignored(tmp_path):
    fake_rank(tmp_path, 0, 1, [1.0, 1.0])
    with open(tmp_path / "ranks" / "rank-00000.jsonl", "a") as f:
        f.write('{"event": "itera')
    rep = Repetition(0, str(tmp_path))
    measure(rep, 1)
    assert rep.samples == [40.0, 40.0]


def test_ci95_student_t():
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.302653 / 3 ** 0.5, rel=1e-6)
    assert mean_ci95([5.0]) == (5.0, None)


def test_record_has_required_keys_and_validates(tmp_path):
    world = World((Host("localhost", 2),), "hostfiles/localhost")
    reps = []
    for index, times in enumerate([[1.0, 1.0], [2.0, 2.0]]):
        rep_dir = tmp_path / f"rep-{index}"
        for rank in range(2):
            fake_rank(rep_dir, rank, 2, times)
        reps.append(Repetition(index, str(rep_dir)))
        measure(reps[-1], 2)
    ctx = context(world, **{"batch-size": 8, "image-size": 64})
    record = build_record(ctx, reps, {"stack_lock_sha256": "a" * 64}, {"launcher": "horovod"}, None)
    validate(record)
    assert record["status"] == "ok" and record["reason"] is None
    assert record["config"]["batch_per_device"] == 8 and record["config"]["global_batch"] == 16
    assert record["config"]["image_size"] == 64 and record["config"]["dtype"] == "float32"
    assert record["world"]["devices"] == 2 and record["world"]["hosts"] == ["localhost"]
    tp = record["metrics"]["throughput"]
    assert tp["repetitions"] == [80.0, 40.0] and tp["ci95_basis"] == "repetitions"
    assert tp["mean"] == 60.0 and tp["per_device"] == 30.0
    assert tp["ci95"] == pytest.approx(12.706205 * 20.0, rel=1e-6)  # t(0.975, 1) x sd/sqrt(2)
    for key in ["git_commit", "stack_lock_sha256", "versions", "host_info", "argv"]:
        assert key in record["provenance"]
    assert record["provenance"]["versions"]["torch"] == "x"
    assert "python" in record["provenance"]["versions"]
    assert record["provenance"]["host_info"]  # filled by the probe of local rank 0


def test_failed_run_record_says_why(tmp_path):
    world = World((Host("localhost", 1),), "hostfiles/localhost")
    rep = Repetition(0, str(tmp_path), status="failed", reason="horovodrun on localhost exited with 1")
    record = build_record(context(world), [rep], {"stack_lock_sha256": None}, {}, None)
    validate(record)
    assert record["status"] == "failed"
    assert record["reason"] == "repetition 0: horovodrun on localhost exited with 1"
    assert record["metrics"]["throughput"]["mean"] is None


def test_schema_rejects_ok_record_without_throughput(tmp_path):
    world = World((Host("localhost", 1),), "hostfiles/localhost")
    record = build_record(context(world), [], {"stack_lock_sha256": None}, {}, None)
    with pytest.raises(jsonschema.ValidationError) as err:
        validate(record)
    assert "throughput" in list(err.value.absolute_path)


def test_records_are_never_overwritten_and_leave_no_temp_files(tmp_path):
    world = World((Host("localhost", 1),), "hostfiles/localhost")
    record = build_record(context(world), [], {"stack_lock_sha256": None}, {}, "stack install failed")
    path = write_record(record, tmp_path)
    before = path.read_text()
    with pytest.raises(FileExistsError):
        write_record({**record, "reason": "other"}, tmp_path)
    assert path.read_text() == before
    assert json.loads(before)["reason"] == "stack install failed"
    assert os.listdir(tmp_path) == [path.name]


def fake_epochs(run_dir, rank, size, seconds, images=100):
    probe = Probe(rank, size, run_dir=str(run_dir))
    probe.start(config={"dtype": "float32"}, versions={})
    for index, s in enumerate(seconds):
        probe._write("epoch", index=index, images=images, seconds=s,
                     metrics={"loss": 2.0 - index, "accuracy": 0.1 * index})
    probe.result(test_accuracy=0.42)
    probe.end()


def test_epochs_first_excluded_and_kept(tmp_path):
    fake_epochs(tmp_path, 0, 2, [10.0, 2.0, 4.0])
    fake_epochs(tmp_path, 1, 2, [9.0, 4.0, 2.0])
    rep = Repetition(0, str(tmp_path))
    measure(rep, 2)
    assert rep.samples == [50.0, 50.0]
    assert rep.warmup == {"images": 200, "seconds": 10.0}
    assert [e["seconds"] for e in rep.epochs] == [10.0, 4.0, 4.0]
    assert rep.epochs[2]["metrics"] == {"loss": 0.0, "accuracy": 0.2}
    assert rep.results == {"test_accuracy": 0.42}


def test_single_epoch_is_not_a_measurement(tmp_path):
    fake_epochs(tmp_path, 0, 1, [10.0])
    with pytest.raises(RunFailed, match="at least 2 epochs"):
        measure(Repetition(0, str(tmp_path)), 1)


def test_probe_epoch_timing(tmp_path):
    probe = Probe(0, 1, run_dir=str(tmp_path))
    probe.start(config={}, versions={})
    for _ in range(2):
        probe.epoch_begin()
        probe.epoch_end(images=10, loss=1.0)
    probe.end()
    rep = Repetition(0, str(tmp_path))
    measure(rep, 1)
    assert len(rep.epochs) == 2 and rep.epochs[1]["metrics"] == {"loss": 1.0}
    assert rep.samples[0] > 0


def test_no_secrets_in_records(tmp_path, monkeypatch):
    monkeypatch.setenv("HOROVOD_SECRET_TOKEN", "hunter2")
    monkeypatch.setenv("SLURM_API_PASSWORD", "hunter3")
    monkeypatch.setenv("MY_PASSWORD", "hunter4")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    from suite.base.env_policy import masked_env

    world = World((Host("localhost", 1),), "hostfiles/localhost")
    rep = Repetition(0, str(tmp_path), status="failed", reason="x",
                     processes=[{"name": "w", "env": masked_env({"NCCL_DEBUG": "INFO", "WANDB_API_KEY": "hunter5"})}])
    text = json.dumps(build_record(context(world), [rep], {"stack_lock_sha256": None}, {}, None))
    assert "hunter" not in text
    record = json.loads(text)
    env = record["provenance"]["environment"]
    assert env["OMP_NUM_THREADS"] == "2" and env["HOROVOD_SECRET_TOKEN"] == "***" and "MY_PASSWORD" not in env
    assert record["repetitions"][0]["processes"][0]["env"] == {"NCCL_DEBUG": "INFO", "WANDB_API_KEY": "***"}


def test_the_memory_allocator_settings_are_recorded_and_go_with_the_processes():
    from suite.base.env_policy import forwarded_env, recorded_env

    environ = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "68719476736",
               "GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
               "MALLOC_CONF": "background_thread:true",
               "TCMALLOC_RELEASE_RATE": "0", "HOME": "/root", "LD_LIBRARY_PATH": "/opt/x"}
    allocator = {k: v for k, v in environ.items() if k not in ("HOME", "LD_LIBRARY_PATH")}
    assert recorded_env(environ) == allocator
    assert forwarded_env(environ, remote=True) == allocator


def test_torch_compiles_own_settings_are_recorded_and_go_with_the_processes():
    from suite.base.env_policy import forwarded_env, recorded_env

    environ = {"TORCHINDUCTOR_MAX_AUTOTUNE": "1", "TORCHINDUCTOR_CACHE_DIR": "/scratch/inductor",
               "TRITON_CACHE_DIR": "/scratch/triton", "TORCHVISION_X": "1", "TRITONX": "1"}
    compile_settings = {k: v for k, v in environ.items() if k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    assert recorded_env(environ) == compile_settings
    assert forwarded_env(environ, remote=True) == compile_settings


def test_jax_xla_and_tensorflows_own_settings_go_with_the_processes_and_other_tools_do_not():
    from suite.base.env_policy import forwarded_env

    environ = {"JAX_COORDINATOR_ADDRESS": "n1:29400", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_cpu_enable_fast_math",
               "TF_CONFIG": "{}", "TF_CPP_MIN_LOG_LEVEL": "2", "TF_CLI_CONFIG_FILE": "/x", "JAXX": "1", "XLA": "1"}
    assert set(forwarded_env(environ)) == {"JAX_COORDINATOR_ADDRESS", "JAX_PLATFORMS", "XLA_FLAGS", "TF_CONFIG",
                                           "TF_CPP_MIN_LOG_LEVEL"}


def test_the_fabrics_and_amd_gpus_settings_go_with_the_processes_but_not_which_devices_a_host_shows():
    from suite.base.env_policy import forwarded_env, recorded_env

    environ = {"FI_PROVIDER": "cxi", "FI_CXI_DISABLE_HOST_REGISTER": "1", "MPICH_GPU_SUPPORT_ENABLED": "1",
               "MIOPEN_USER_DB_PATH": "/tmp/miopen", "HSA_FORCE_FINE_GRAIN_PCIE": "1", "HIP_VISIBLE_DEVICES": "0,1",
               "ROCR_VISIBLE_DEVICES": "0", "FIX": "1", "HOME": "/root"}
    assert set(recorded_env(environ)) == set(environ) - {"FIX", "HOME"}
    assert set(forwarded_env(environ, remote=True)) == set(environ) - {"FIX", "HOME", "HIP_VISIBLE_DEVICES",
                                                                       "ROCR_VISIBLE_DEVICES"}


# Runs one write with every step the writer takes to the disk (each write call, fsync, replace, link)
# patched to stop at the Nth of them: it prints the step's name and sleeps until the test kills it.
# "naive" writes the destination in place, as a non-atomic writer would (the negative control).
STOPPING_WRITER = """
import builtins, json, os, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from suite.base.jsonfile import write_json_atomic
stop_at, dest, overwrite, writer = int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "overwrite", sys.argv[5]
steps = 0

def step(name):
    global steps
    if steps == stop_at:
        print(name, flush=True)
        time.sleep(600)
    steps += 1

class Stopping:
    def __init__(self, f):
        self.f = f
    def write(self, text):
        half = len(text) // 2
        self.f.write(text[:half])
        self.f.flush()
        step("write (half written)")
        return half + self.f.write(text[half:])
    def __getattr__(self, name):
        return getattr(self.f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self.f.__exit__(*exc)

real_open, real_fsync, real_replace, real_link = builtins.open, os.fsync, os.replace, os.link
builtins.open = lambda file, mode="r", *a, **k: (Stopping if "w" in mode else lambda f: f)(
    real_open(file, mode, *a, **k))

def around(name, real):
    def patched(*args):
        step(f"before {name}")
        real(*args)
        step(f"after {name}")
    return patched

os.fsync, os.replace, os.link = around("fsync", real_fsync), around("replace", real_replace), around("link", real_link)

def naive(path, data, overwrite=True):
    with open(path, "w") as f:
        f.write(json.dumps(data, indent=2, sort_keys=True) + "\\n")

(naive if writer == "naive" else write_json_atomic)(dest, {"payload": "new " * 50_000}, overwrite=overwrite)
print("done", flush=True)
"""
OLD, NEW = {"payload": "old " * 50_000}, {"payload": "new " * 50_000}


def kill_at_every_step(tmp_path, writer: str, overwrite: bool) -> list[tuple[str, bool]]:
    """SIGKILLs the writer at each of its steps in turn, from a fresh folder each time (with the old
    file where it overwrites); [(step, whether the destination was absent or the whole old or new file)]."""
    import subprocess
    import sys

    from conftest import ROOT

    whole = []
    for stop_at in range(100):
        folder = tmp_path / f"{writer}-{overwrite}-{stop_at}"
        folder.mkdir()
        dest = folder / "record.json"
        if overwrite:
            dest.write_text(json.dumps(OLD))
        writer_process = subprocess.Popen(
            [sys.executable, "-c", STOPPING_WRITER, str(ROOT), str(stop_at), str(dest),
             "overwrite" if overwrite else "new", writer], stdout=subprocess.PIPE, text=True)
        name = writer_process.stdout.readline().strip()  # the step it stopped at
        writer_process.kill()
        writer_process.communicate(timeout=300)
        try:
            ok = json.loads(dest.read_text()) in ((OLD, NEW) if overwrite else (NEW,))
        except FileNotFoundError:
            ok = not overwrite
        except ValueError:  # half a file
            ok = False
        whole.append((name, ok))
        if name == "done":
            return whole
    raise AssertionError("the writer never finished")


@pytest.mark.parametrize("overwrite", [True, False], ids=["replacing", "new-record"])
def test_killing_the_writer_never_leaves_half_a_file(tmp_path, overwrite):
    whole = kill_at_every_step(tmp_path, "atomic", overwrite)
    # It was stopped inside the write of the data and just before and after the file became visible.
    visible = "replace" if overwrite else "link"
    expected_steps = {"write (half written)", "before fsync", f"before {visible}", f"after {visible}", "done"}
    assert expected_steps <= dict(whole).keys()
    assert all(ok for _, ok in whole), whole


@pytest.mark.parametrize("overwrite", [True, False], ids=["replacing", "new-record"])
def test_a_writer_that_writes_in_place_is_caught(tmp_path, overwrite):
    whole = kill_at_every_step(tmp_path, "naive", overwrite)
    assert ("write (half written)", False) in whole and whole[-1] == ("done", True)


def lines(*events):
    """Probe lines of rank 0: (event, time, fields)."""
    return [{"event": event, "rank": 0, "time": at, **fields} for event, at, fields in events]


def test_a_launchs_timeline_bounds_each_phase_by_rank_0s_lines_and_the_runners_clock():
    events = lines(("start", 10.0, {}), ("result", 12.5, {"metrics": {"compile_seconds": 2.0}}),
                   ("peak", 13.0, {"flops_per_s": 1e12, "precision": "fp32", "seconds": 1.0}),
                   ("warmup", 14.0, {"images": 8, "seconds": 1.0}), ("iteration", 15.0, {"seconds": 0.9}),
                   ("iteration", 16.0, {"seconds": 1.0}), ("end", 16.5, {}))
    assert timeline(events, 8.0, 17.0) == {"to_start_line_s": 2.0, "to_warmup_s": 3.0, "warmup_s": 1.0,
                                           "window_s": 1.9, "after_window_s": 0.5, "to_exit_s": 0.5,
                                           "total_s": 9.0, "compile_s": 2.0, "matmul_peak_s": 1.0}


def test_a_launch_that_stopped_early_or_whose_clocks_disagree_has_only_the_phases_its_lines_bound():
    stopped = lines(("start", 10.0, {}), ("warmup", 14.0, {"images": 8, "seconds": 1.0}))
    assert timeline(stopped, 8.0, 20.0) == {"to_start_line_s": 2.0, "to_warmup_s": 3.0, "warmup_s": 1.0,
                                            "total_s": 12.0}
    assert timeline([], 8.0, 9.5) == {"total_s": 1.5}  # no probe line: the launch's wall time alone
    # rank 0 on another host whose clock is behind the runner's: no negative phase
    assert "to_start_line_s" not in timeline(lines(("start", 7.0, {})), 8.0, 20.0)
    # lines of another writer, without a time or a number: left out, never an error that loses the record
    odd = [{"event": "start"}, {"event": "result", "metrics": None}, {"event": "peak", "seconds": "1"}]
    assert timeline(odd, 8.0, 9.0) == {"total_s": 1.0}


def test_an_epoch_cases_first_epoch_is_its_warmup_in_the_timeline():
    events = lines(("start", 1.0, {}), ("epoch", 5.0, {"seconds": 3.0}), ("epoch", 8.0, {"seconds": 2.5}),
                   ("epoch", 11.0, {"seconds": 3.0}), ("end", 11.5, {}))
    took = timeline(events, 0.0, 12.0)
    assert (took["warmup_s"], took["window_s"], took["to_warmup_s"]) == (3.0, 5.5, 1.0)


def test_validate_takes_a_folder_of_records_and_names_each_file(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT
    from support.fixture_records import make_record

    folder = tmp_path / "results"
    made = make_record(folder, tmp_path / "runs")
    (folder / "broken.json").write_text(json.dumps({**made, "status": "fine"}))
    (folder / "notes.txt").write_text("not a record")
    done = subprocess.run([sys.executable, "-m", "suite", "validate", str(folder)], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"ok: {folder / (made['run_id'] + '.json')}"]
    assert done.stderr.startswith(f"invalid: {folder / 'broken.json'}: ") and "notes.txt" not in done.stderr

"""`make gpu-check` (benchmarks/gpu_check.py) without a GPU: the cases it runs and the targets of their
checks, --quick's budget, --only, and the exit status when a ratio misses its target or a side trained on
the CPU. Stand-ins: a fake of the two sides (the suite's record and the bare loop's line, built here as
the real ones are shaped); the checks, the plan and the output are the real ones. Also the GPU options
the bare loops take (benchmarks/bare/gpu_options.py)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from suite.base.errors import UsageError
from suite.records.telemetry_window import mark_used

UUID = "GPU-00000000-0000-0000-0000-000000000000"
H100 = "NVIDIA H100 80GB HBM3"
H100_BF16 = 989.4e12


def load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def check(tmp_path, monkeypatch):
    module = load("gpu_check", "benchmarks/gpu_check.py")
    monkeypatch.setattr(module, "REPORTS", tmp_path / "bench")
    return module


def record(tmp_path, throughput: float, device_type="cuda", host="gpu01", mfu: float | None = None,
           published: float | None = None, reported: dict | None = None) -> dict:
    """A record of a finished one-GPU run as the suite writes it, in the parts gpu-check reads."""
    run_dir = tmp_path / f"rep-{len(list(tmp_path.glob('rep-*')))}"
    (run_dir / "ranks").mkdir(parents=True)
    (run_dir / "ranks" / "rank-00000.mllog").write_text(':::MLLOG {"key": "run_start"}\n')
    hosts = {host: {"gpus": [{"index": 0, "name": H100, "uuid": UUID, "util_pct": {"mean": 95.0, "max": 99.0}}]}}
    mark_used(hosts, [{"host": host, "gpus": [{"uuid": UUID}]}])
    metrics = {"throughput": {"mean": throughput, "per_device": throughput, "unit": "img/s"},
               "telemetry": {"hosts": hosts}}
    if mfu is not None:
        metrics["utilisation"] = {"achieved_flops_per_s_per_device": mfu * H100_BF16, "precision": "bf16",
                                  "valid": True}
    if published is not None:
        metrics["published"] = {"published_per_device": published, "source": "MLPerf Training v4.0", "unit": "img/s"}
    case = {"device_name": H100 if device_type == "cuda" else "cpu", "dtype": "amp-bfloat16", **(reported or {})}
    return {"status": "ok", "world": {"device_type": device_type, "slots": {host: 1}, "devices": 1},
            "config": {"dtype": "amp-bfloat16", "reported_by_case": case},
            "provenance": {"host_info": {host: {}}, "versions": {}, "stack": "pytorch", "stack_flavour": "cuda"},
            "execution": {"runtime": "modules"}, "metrics": metrics, "repetitions": [{"run_dir": str(run_dir)}]}


def bare(throughput: float, device_type="cuda", host="gpu01", config: dict | None = None) -> dict:
    return {"samples": [throughput], "throughput": throughput, "device_type": device_type,
            "device_name": H100 if device_type == "cuda" else "cpu", "host": host,
            "config": {"dtype": "amp-bfloat16", **(config or {})}}


class FakeSides:
    """Each entry's sides as given: suite[name] and bare[name] are functions of the round's index giving
    the record and the bare line (or raising what the real side raises)."""

    def __init__(self, suite: dict, bare: dict):
        self.suite_of, self.bare_of, self.calls = suite, bare, []

    def suite(self, entry, timeout):
        self.calls.append((entry.name, "suite", timeout))
        return self.suite_of[entry.name](sum(1 for c in self.calls if c[:2] == (entry.name, "suite")) - 1)

    def bare(self, entry, timeout):
        self.calls.append((entry.name, "bare", timeout))
        return self.bare_of[entry.name](sum(1 for c in self.calls if c[:2] == (entry.name, "bare")) - 1)


def healthy(check, tmp_path, ratio: float = 1.0, mfu: float = 0.45, published: float = 0.9) -> FakeSides:
    """Every entry's sides, the suite at `ratio` of the bare loop, every target met otherwise."""
    suite, bares = {}, {}
    for entry in check.ENTRIES:
        def make_record(_, entry=entry):
            return record(tmp_path, 1000.0 * ratio, mfu=mfu if entry.mfu else None,
                          published=1000.0 * ratio / published if entry.published else None)
        suite[entry.name] = make_record
        bares[entry.name] = lambda _: bare(1000.0)
    return FakeSides(suite, bares)


def run(check, sides, rounds=2, budget=None) -> int:
    return check.check_host(check.ENTRIES, sides, rounds, 1.0, check.Budget(budget), [])


# --- the checks and their targets ------------------------------------------------------------------

def test_every_case_the_gpu_host_runs_is_checked_against_its_bare_loop_and_its_targets(check):
    assert check.NAMES == ["pytorch-ddp-dle", "pytorch-gpt", "pytorch-gpt-h100", "jax-gpt-h100", "jax-resnet",
                           "pytorch-ddp-h100"]
    assert check.targets() == {
        "suite_vs_bare.pytorch-ddp-dle": 0.98,
        "suite_vs_bare.pytorch-gpt": 0.98,
        "suite_vs_bare.pytorch-gpt-h100": 0.98, "mfu.pytorch-gpt-h100": 0.40,
        "suite_vs_bare.jax-gpt-h100": 0.98, "mfu.jax-gpt-h100": 0.35,
        "suite_vs_bare.jax-resnet": 0.98,
        "suite_vs_bare.pytorch-ddp-h100": 0.98, "published.pytorch-ddp-h100": 0.8}
    entries = {entry.name: entry for entry in check.ENTRIES}
    assert [(e.case, e.preset, e.bare) for e in check.ENTRIES] == [
        ("pytorch-ddp", "dle", "pytorch_ddp.py"), ("pytorch-gpt", None, "pytorch_gpt.py"),
        ("pytorch-gpt", "h100", "pytorch_gpt.py"), ("jax-gpt", "h100", "jax_gpt.py"),
        ("jax-resnet", None, "jax_resnet.py"), ("pytorch-ddp", "h100", "pytorch_ddp.py")]
    for entry in check.ENTRIES:
        assert (ROOT / "benchmarks" / "bare" / entry.bare).exists()
    # the bare loop trains what the preset sets, the same steps and window as the suite's run
    gpt = entries["pytorch-gpt-h100"]
    assert gpt.suite_args("full", 30) == ["--preset", "h100", "--num-warmup-batches", "10", "--num-batches-per-iter",
                                          "10", "--num-iters", "3", "--min-seconds", "30"]
    assert gpt.bare_args("full", 30) == [
        "--precision", "bf16", "--compile", "--optimizer-impl", "fused", "--batch-size", "32", "--gc-every", "50",
        "--num-warmup-batches", "10", "--num-batches-per-iter", "10", "--num-iters", "3", "--min-seconds", "30",
        "--device", "auto"]
    assert entries["jax-gpt-h100"].bare_args("full", 5)[:6] == ["--precision", "bf16", "--attention", "cudnn",
                                                                "--batch-size", "32"]
    assert entries["pytorch-ddp-dle"].bare_args("full", 30) == [
        "--amp", "--channels-last", "--batch-size", "256", "--warmup", "20", "--steps-per-iter", "10",
        "--image-size", "224", "--seconds", "30"]
    assert entries["pytorch-ddp-h100"].bare_args("full", 30)[:9] == [
        "--amp", "--channels-last", "--batch-size", "256", "--compile", "--compile-mode", "reduce-overhead",
        "--optimizer-impl", "fused"]
    assert "--device" not in entries["pytorch-ddp-dle"].bare_args("tiny", 1)  # the DDP loop finds its GPU itself
    assert entries["jax-resnet"].suite_args("tiny", 1)[:2] == ["--batch-size", "2"]  # the case's [tiny] wins


def test_every_check_holds_prints_one_line_each_and_exits_0(check, tmp_path, capsys):
    assert run(check, healthy(check, tmp_path)) == 0
    out = capsys.readouterr().out
    assert "suite_vs_bare.pytorch-gpt: 1.000 (>= 0.98)  round ratios [1.0, 1.0] (spread 0.000)" in out
    assert "mfu.pytorch-gpt-h100: 0.450 (>= 0.4)  445.2 TFLOP/s per GPU of the H100 SXM datasheet's dense bf16" in out
    assert "mfu.jax-gpt-h100: 0.450 (>= 0.35)" in out
    assert "published.pytorch-ddp-h100: 0.900 (>= 0.8)" in out
    for name in check.NAMES:
        for kind in ("device", "host", "sides", "telemetry", "mllog"):
            assert f"{kind}.{name}: ok" in out
    saved = json.loads(next((tmp_path / "bench").glob("*-gpu-check.json")).read_text())
    assert set(check.targets()) <= set(saved["checks"]) and all(c["met"] for c in saved["checks"].values())


def test_a_ratio_under_its_target_is_missed_and_exits_1(check, tmp_path, capsys):
    assert run(check, healthy(check, tmp_path, ratio=0.95)) == 1
    out = capsys.readouterr().out
    assert "suite_vs_bare.jax-resnet: 0.950 (>= 0.98, MISSED)" in out
    assert out.splitlines()[-2].startswith("gpu-check: ") and "suite_vs_bare.pytorch-ddp-dle" in out.splitlines()[-2]
    assert run(check, healthy(check, tmp_path / "mfu", mfu=0.30)) == 1
    out = capsys.readouterr().out
    assert "mfu.pytorch-gpt-h100: 0.300 (>= 0.4, MISSED)" in out and "mfu.jax-gpt-h100: 0.300 (>= 0.35, MISSED)" in out
    assert run(check, healthy(check, tmp_path / "published", published=0.62)) == 1
    out = capsys.readouterr().out
    assert "published.pytorch-ddp-h100: 0.620 (>= 0.8, MISSED)" in out
    assert "published.pytorch-ddp-dle: 0.620 (" not in out  # dle's figure is shown, its target is h100's


def test_the_rounds_run_in_turns_and_their_ratios_show_the_spread(check, tmp_path, capsys):
    sides = healthy(check, tmp_path)
    sides.suite_of["pytorch-gpt"] = lambda index: record(tmp_path, [990.0, 1010.0, 1000.0][index])
    assert check.check_host(check.ENTRIES[1:2], sides, 3, 1.0, check.Budget(None), []) == 0
    assert [c[1] for c in sides.calls] == ["suite", "bare", "bare", "suite", "suite", "bare"]  # ABBA
    assert "round ratios [0.99, 1.01, 1.0] (spread 0.020)" in capsys.readouterr().out


# --- the CPU is never a GPU ------------------------------------------------------------------------

def test_a_side_that_fell_back_to_the_cpu_fails_every_case(check, tmp_path, capsys):
    sides = healthy(check, tmp_path)
    sides.suite_of["jax-gpt-h100"] = lambda _: record(tmp_path, 1000.0, device_type="cpu", mfu=0.45)
    sides.bare_of["jax-resnet"] = lambda _: bare(1000.0, device_type="cpu")
    assert run(check, sides) == 1
    out = capsys.readouterr().out
    assert "device.jax-gpt-h100: FAILED: the suite's run trained on cpu, not a GPU" in out
    # its figures fail too, whatever they are: suite / bare at 1.0 here, and no datasheet peak of a CPU
    assert "suite_vs_bare.jax-gpt-h100: 1.000 (>= 0.98, FAILED: the suite's run trained on cpu, not a GPU)" in out
    assert "mfu.jax-gpt-h100: FAILED: the suite's run trained on cpu, not a GPU" in out
    assert "suite_vs_bare.jax-resnet: 1.000 (>= 0.98, FAILED: the bare loop trained on cpu, not a GPU" in out
    assert "device.jax-resnet: FAILED: the bare loop trained on cpu, not a GPU" in out
    assert "device.pytorch-gpt: ok" in out


def test_a_suite_run_refused_on_the_cpu_fails_its_case_and_the_others_still_run(check, tmp_path, capsys):
    sides = healthy(check, tmp_path)
    refused = ("the suite's run failed: asked to train on cuda (GPUs are present and were asked for) but rank 0 "
               "on gpu01 trained on cpu")

    def refuse(_):
        raise RuntimeError(refused)

    sides.suite_of["pytorch-ddp-dle"] = refuse
    assert run(check, sides) == 1
    done = capsys.readouterr()
    assert done.err.strip().splitlines()[-1] == f"gpu-check FAILED: pytorch-ddp-dle: {refused}"
    assert f"suite_vs_bare.pytorch-ddp-dle: FAILED: {refused}" in done.out
    assert "suite_vs_bare.jax-resnet: 1.000 (>= 0.98)" in done.out
    assert ("pytorch-ddp-dle", "bare", None) not in sides.calls  # the round stopped at its failed side


def test_sides_that_trained_differently_fail(check, tmp_path, capsys):
    sides = healthy(check, tmp_path)
    sides.suite_of["jax-gpt-h100"] = lambda _: record(tmp_path, 1000.0, mfu=0.45, reported={"attention": "xla"})
    sides.bare_of["jax-gpt-h100"] = lambda _: bare(1000.0, config={"attention": "cudnn"})
    assert run(check, sides) == 1
    assert ("sides.jax-gpt-h100: FAILED: the sides trained differently: attention 'xla' (suite) / 'cudnn' (bare)"
            in capsys.readouterr().out)


# --- --quick and --only ----------------------------------------------------------------------------

def test_quick_fits_its_budget_by_the_plan_and_stops_where_the_budget_is_spent(check, tmp_path, capsys):
    quick, full = check.parse(["--quick"]), check.parse([])
    assert (quick.rounds, quick.min_seconds, full.rounds, full.min_seconds) == (1, 5.0, 3, 30.0)
    assert check.parse(["--quick", "--rounds", "2"]).rounds == 2
    planned = check.plan_seconds(check.selected(None, quick=True), quick.rounds, quick.min_seconds)
    assert planned <= check.QUICK_BUDGET_S == 480.0
    assert check.plan_seconds(check.ENTRIES, full.rounds, full.min_seconds) > 3 * planned
    # rounds x cases: each round runs both sides, each its measured time beside the window
    entry = check.Entry("x", "jax-gpt", "jax_gpt.py", suite_s=10, bare_s=5)
    assert entry.side_seconds("suite", 3) == 13 and entry.side_seconds("bare", 3) == 8
    assert entry.plan_seconds(2, 3) == 2 * (10 + 5) + 4 * 3
    assert check.plan_seconds([entry, entry], 2, 3) == 2 * entry.plan_seconds(2, 3)
    # the budget: each side gets what is left; a side is not started with less than MIN_SIDE_S left
    now = [0.0]
    budget = check.Budget(100.0, clock=lambda: now[0])
    sides = healthy(check, tmp_path)
    original = sides.bare

    def slow_bare(entry, timeout):
        now[0] += 45.0
        return original(entry, timeout)

    sides.bare = slow_bare
    assert check.check_host(check.ENTRIES, sides, 1, 1.0, budget, []) == 1
    out = capsys.readouterr().out
    assert [c[2] for c in sides.calls[:4]] == [100.0, 100.0, 55.0, 55.0]
    assert "suite_vs_bare.pytorch-gpt: 1.000 (>= 0.98)" in out
    assert ("suite_vs_bare.pytorch-gpt-h100: FAILED: not run: 10 s of the 100-second budget left before "
            "pytorch-gpt-h100's suite side") in out
    # nor with fewer left than the side took on an H100: it could not finish
    assert check.Budget(40.0, clock=lambda: 0.0).before_side("a's suite side", 30.0) == 40.0
    with pytest.raises(check.BudgetSpent, match="40 s of the 40-second budget left before b's suite side, which "
                                                "takes about 57 s"):
        check.Budget(40.0, clock=lambda: 0.0).before_side("b's suite side", 57.0)


def test_only_narrows_the_cases_and_an_unknown_name_is_refused(check, tmp_path, capsys, monkeypatch):
    assert [e.name for e in check.selected(["jax-resnet", "pytorch-gpt"])] == ["pytorch-gpt", "jax-resnet"]
    assert check.selected(None) == list(check.ENTRIES)
    # --quick: the cases of its plan; pytorch-ddp-h100's compilation only where --only names it
    assert [e.name for e in check.selected(None, quick=True)] == check.NAMES[:-1]
    assert [e.name for e in check.selected(["pytorch-ddp-h100"], quick=True)] == ["pytorch-ddp-h100"]
    with pytest.raises(UsageError, match="--only: no case jax-vit"):
        check.selected(["jax-vit"])
    monkeypatch.setattr(check, "host_gpus", lambda: 1)
    made = []

    def factory(run_options, work, size, min_seconds, env):
        # the caches in a folder of their own, the records and run folders kept under reports/bench
        made.append((run_options, size, min_seconds, not env["JAX_COMPILATION_CACHE_DIR"].startswith(str(work)),
                     work.parent == check.REPORTS and work.name.endswith("-gpu-check-runs")))
        return healthy(check, tmp_path)

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    assert check.main(["--quick", "--only", "jax-resnet", "--", "--runtime", "modules"], sides_factory=factory) == 0
    out = capsys.readouterr().out
    assert made == [(["--runtime", "modules"], "full", 5.0, True, True)]
    assert "suite_vs_bare.jax-resnet: 1.000 (>= 0.98)" in out and "pytorch-gpt" not in out
    assert "budget 480 s" in out.splitlines()[0]
    assert check.main(["--only", "nothing"], sides_factory=factory) == 2
    assert capsys.readouterr().err.startswith("error: --only: no case nothing")


def test_a_results_folder_that_cannot_be_written_is_refused_before_any_side_runs(check, capsys, monkeypatch):
    """The results are written at the end, minutes of GPU time later: checked first, as `make bench` checks --out."""
    monkeypatch.setattr(check, "host_gpus", lambda: 1)
    started = []
    assert check.main(["--quick", "--results-dir", "README.md"], sides_factory=lambda *a: started.append(a)) == 2
    assert capsys.readouterr().err == (f"error: --results-dir README.md: nothing can be written there: "
                                       f"{check.ROOT / 'README.md'} is not a folder\n")
    assert not started
    harness = load("harness", "benchmarks/harness.py")
    assert harness.main(["--tiny", "--only", "report_10k_records", "--out", "README.md/bench"]) == 2
    assert capsys.readouterr().err.startswith("error: --out README.md/bench: nothing can be written there: ")


@pytest.mark.parametrize("script, argv, message", [
    ("benchmarks/gpu_check.py", ["--rounds", "x"], "error: gpu_check.py: argument --rounds: invalid int value: 'x'"),
    ("benchmarks/harness.py", ["--roundz", "3"], "error: harness.py: unrecognized arguments: --roundz 3"),
])
def test_a_bad_option_of_the_checks_is_refused_in_one_line(script, argv, message):
    """As `make gpu-check GPU_CHECK_ARGS=...` and `make bench BENCH_ARGS=...` pass them: no usage block first."""
    done = subprocess.run([sys.executable, script, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith(message), done.stderr
    assert done.stderr.count("\n") == 1 and not done.stdout, done.stderr


def test_without_a_gpu_it_says_so_in_one_line_and_exits_2(check, capsys, monkeypatch):
    monkeypatch.setattr(check, "host_gpus", lambda: 0)
    assert check.main(["--quick"]) == 2
    said = capsys.readouterr().err
    assert said == "error: make gpu-check needs an NVIDIA GPU on this host (nvidia-smi -L lists none)\n"


# --- the bare loops' GPU options -------------------------------------------------------------------

def test_the_bare_loops_take_their_gpu_options_out_and_leave_the_cpu_defaults(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "bare"))
    options = load("gpu_options", "benchmarks/bare/gpu_options.py")
    argv = ["loop.py", "--layers", "2", "--device", "auto", "--compile", "--min-seconds", "3", "--gc-every", "50"]
    taken = options.take("torch", argv)
    assert argv == ["loop.py", "--layers", "2"]
    assert (taken.device, taken.compile, taken.min_seconds, taken.gc_every, taken.optimizer_impl, taken.precision) == (
        "auto", True, 3.0, 50, "auto", "auto")
    argv = ["loop.py", "--batch-size", "8"]
    taken = options.take("jax", argv)
    assert argv == ["loop.py", "--batch-size", "8"]  # make bench's command line: CPU, float32, --num-iters exactly
    assert (taken.device, taken.precision, taken.min_seconds, taken.attention) == ("cpu", "auto", 0.0, "einsum")
    assert options.wants_bf16("auto", True) and not options.wants_bf16("auto", False)
    assert options.wants_bf16("bf16", False) and not options.wants_bf16("fp32", True)
    with pytest.raises(ValueError):
        options.take("mxnet", ["loop.py"])
    monkeypatch.setenv("JAX_PLATFORMS", "")
    assert options.choose_jax_platform("cpu", "loop.py") == "cpu" and os.environ["JAX_PLATFORMS"] == "cpu"


# --- where each side's time goes -------------------------------------------------------------------

TIMELINE = {"to_start_line_s": 8.0, "to_warmup_s": 6.0, "warmup_s": 1.0, "window_s": 5.0, "after_window_s": 1.5,
            "to_exit_s": 0.5, "total_s": 22.0, "compile_s": 3.5, "matmul_peak_s": 2.0}
PHASES = {"set_up_s": 6.0, "compile_s": 4.0, "warmup_s": 1.0, "window_s": 5.0}


def test_each_sides_wall_time_is_split_into_its_phases_printed_and_kept(check, tmp_path, capsys):
    """The suite's side by its record's timeline (the runner's own part is the rest of its wall time),
    the bare loop by the phases it printed: what --quick's budget is made of."""
    entry = check.ENTRIES[1]
    timed = record(tmp_path, 1000.0)
    timed["repetitions"][0]["timeline"] = TIMELINE
    line = {**bare(1000.0), "phases": PHASES}
    outcome = check.Outcome(entry, records=[timed], bares=[line], seconds={"suite": [24.5], "bare": [17.0]})
    assert check.time_line(outcome) == (
        "time: suite 24.5 s (the runner 2.5, to the start line 8.0, to the warmup 6.0 (compile 3.5, matmul peak 2.0), "
        "warmup 1.0, timed window 5.0, after it 1.5, to the exit 0.5); bare 17.0 s (set-up 6.0, compile 4.0, "
        "warmup 1.0, timed window 5.0, the rest 1.0)")
    bare_only = check.Outcome(entry, bares=[bare(1000.0)], seconds={"suite": [], "bare": [3.0]})
    assert check.time_line(bare_only) == "time: bare 3.0 s"  # a loop that printed no phases
    assert check.time_line(check.Outcome(entry)) is None
    sides = FakeSides({entry.name: lambda _: timed}, {entry.name: lambda _: line})
    assert check.check_host([entry], sides, 1, 1.0, check.Budget(None), []) == 0
    assert "  time: suite " in capsys.readouterr().out
    saved = json.loads(next((tmp_path / "bench").glob("*-gpu-check.json")).read_text())["entries"][entry.name]
    assert (saved["timeline"], saved["bare_phases"]) == (TIMELINE, PHASES)


def test_a_side_that_stalls_now_and_then_and_the_samplers_own_time_are_printed(check, tmp_path, capsys):
    """A mean near the target hides a few slow iterations: the slowest of each side's last round against
    their median, and what the sampler took per sample, where the record says."""
    entry = check.ENTRIES[1]
    stalled = record(tmp_path, 950.0)
    stalled["metrics"]["throughput"]["samples"] = [1000.0, 860.0, 1000.0, 990.0, 1000.0]
    stalled["metrics"]["telemetry"]["hosts"]["gpu01"]["sample_ms"] = {"mean": 20.0, "max": 45.0}
    even = {**bare(1000.0), "samples": [1000.0, 998.0, 1001.0]}
    outcome = check.Outcome(entry, records=[stalled], bares=[even])
    assert check.steadiness_line(outcome) == ("steadiness: slowest iteration / median: suite 0.86 of 5, bare 1.00 of "
                                              "3; telemetry sampler 45.0 ms a sample at most (mean 20.0)")
    assert check.steadiness_line(check.Outcome(entry, bares=[even])) == \
        "steadiness: slowest iteration / median: bare 1.00 of 3"
    assert check.steadiness_line(check.Outcome(entry)) is None
    sides = FakeSides({entry.name: lambda _: stalled}, {entry.name: lambda _: even})
    check.check_host([entry], sides, 1, 1.0, check.Budget(None), [])
    assert "  steadiness: slowest iteration / median: suite 0.86 of 5" in capsys.readouterr().out


def test_a_bare_loops_phases_follow_its_marks_from_the_start_of_its_process(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "bare"))
    phases = load("phases", "benchmarks/bare/phases.py")
    ticks = iter([103.0, 107.5, 108.0])
    marked = phases.Phases(started=100.0, clock=lambda: next(ticks))
    for name in ("set_up", "compile", "warmup"):
        marked.mark(name)
    assert marked.seconds() == {"set_up_s": 3.0, "compile_s": 4.5, "warmup_s": 0.5}
    # a new process's start as /proc gives it: just before its first statement (interpreter start-up)
    first = ("import sys, time; began = time.time(); sys.path.insert(0, sys.argv[1]); import phases; "
             "print(began - phases.process_started())")
    done = subprocess.run([sys.executable, "-S", "-c", first, str(ROOT / "benchmarks" / "bare")], capture_output=True,
                          text=True, check=True, timeout=300)
    assert -0.05 < float(done.stdout) < 2.0
    assert phases.process_started(str(tmp_path / "none"), str(tmp_path / "none")) == phases.IMPORTED

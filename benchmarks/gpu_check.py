"""`make gpu-check`: does the suite measure a GPU host as a bare training loop does, and as the
published figures say it should? Needs no container engine: the stack is the local cuda flavour, or
the site's environment (RUNTIME=modules), whatever the run options after `--` say.

Every case the GPU host can run, one GPU each (ENTRIES; `--only NAME ...` narrows):

  pytorch-ddp-dle    pytorch-ddp --preset dle (AMP, channels-last, batch 256) against the bare loop
                     (benchmarks/bare/pytorch_ddp.py); img/s per GPU beside the published figure for this GPU
                     (case.toml [[reference]]: MLPerf v4.0's on an H100)
  pytorch-gpt        pytorch-gpt at its defaults (bf16 autocast, batch 8) against benchmarks/bare/pytorch_gpt.py
  pytorch-gpt-h100   pytorch-gpt --preset h100 (bf16, torch.compile, fused AdamW, batch 32, gc every 50) against
                     the same loop with the preset's options; MFU of the datasheet's dense bf16 peak, target 0.40
  jax-gpt-h100       jax-gpt --preset h100 (bf16, cuDNN attention, batch 32) against benchmarks/bare/jax_gpt.py;
                     MFU target 0.35
  jax-resnet         jax-resnet at batch 256 (bf16 on a GPU) against benchmarks/bare/jax_resnet.py
  pytorch-ddp-h100   pytorch-ddp --preset h100 (dle's, with torch.compile's CUDA graphs and fused SGD) against
                     the same loop with the preset's options; img/s per GPU / the published figure, target 0.8;
                     not in --quick (over a minute of compilation a side), --only names it there

Each case runs through the suite and as its bare loop in the same stack, in interleaved rounds (ABBA):
suite / bare, target 0.98, with each round's ratio and their spread. Both sides must have trained on a
GPU (the suite's record and the bare loop say which device: a side that fell back to the CPU fails), on
the same host, with the same settings (dtype, batch, parameters, compile, attention ... as each side
reports them); the run's GPUs (NVML, those its ranks used) busy over the timed window; MLPerf-style MLLOG
lines in the run folder (where the stack has no mlperf_logging, that is said, not failed); and the run's
diagnosis line, each side's steadiness (its slowest timed iteration against their median) with the
telemetry sampler's milliseconds per sample, and where each side's seconds went. Published figures are
shown where the case has one for this GPU, checked where a target is set. Both sides share compilation
caches (JAX's persistent cache, Inductor's), so a round compiles anew only what no earlier run of the check
compiled.

Prints one line per check, `name: value (>= target[, MISSED])` (or `name: ok` / `name: FAILED: why`),
and writes them all as JSON under reports/bench/. Exit 0 when every run worked and every check holds;
1 when a run failed, a check did not hold or was not reached within --quick's budget; 2, with one line,
on a host without an NVIDIA GPU (or with bad options).

    python benchmarks/gpu_check.py [--quick | --tiny] [--rounds 3] [--min-seconds 30] [--only NAME ...]
                                   [--results-dir reports/bench]
                                   [-- RUN OPTIONS, e.g. --runtime modules --python python3]

--quick: one round (each side one process per case), 5-second timed windows, and a total budget of
QUICK_BUDGET_S, what the cases took on one H100: a side is not started where less of the budget is left
than its measured time (Entry) or MIN_SIDE_S (it is said, and fails), the suite's runs get the rest as
their --timeout and a bare loop is stopped at it. --tiny: each case's [tiny]
sizes, a check that the machinery works on any host; it measures nothing.
"""

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from suite.analysis.diagnosis import run_gpus, summary_line, unmatched_gpus  # noqa: E402 (after sys.path is set)
from suite.analysis.peaks import datasheet_peak  # noqa: E402 (after sys.path is set)
from suite.analysis.references import summary_line as published_line  # noqa: E402 (after sys.path is set)
from suite.analysis.utilisation import device_name_of  # noqa: E402 (after sys.path is set)
from suite.base import paths  # noqa: E402 (after sys.path is set)
from suite.base.errors import UsageError  # noqa: E402 (after sys.path is set)
from suite.execution.console import timeline_text  # noqa: E402 (after sys.path is set)
from suite.execution.request import from_argv  # noqa: E402 (after sys.path is set)
from suite.inputs.cases import load_case  # noqa: E402 (after sys.path is set)
from suite.inputs.host_gpus import host_gpus  # noqa: E402 (after sys.path is set)
from suite.instack.arguments import OneLineParser  # noqa: E402 (after sys.path is set)
from suite.instack.case_options import option_args  # noqa: E402 (after sys.path is set)

SUITE_VS_BARE = 0.98  # suite / bare, every case
REPORTS = ROOT / "reports" / "bench"  # where the results go
# --quick: the whole check, what the five cases of its plan took on one H100 (Entry); the aim was 360 s, which the
# cases' own start (imports, compilation, cuDNN's autotuning: 17-69 s a side) leaves out of reach
QUICK_BUDGET_S = 480.0
MIN_SIDE_S = 20.0  # --quick: a side is not started with less of the budget left
MODES = {"full": {"rounds": 3, "min_seconds": 30.0}, "quick": {"rounds": 1, "min_seconds": 5.0},
         "tiny": {"rounds": 3, "min_seconds": 30.0}}
# the timed steps of every case beside its --min-seconds (an entry's options win): three iterations at
# least, then as many as fill the window (cases/_shared/timed.py; the bare loops take the same rule)
STEPS = {"num-warmup-batches": 10, "num-batches-per-iter": 10, "num-iters": 3}
# the bare DDP loop's names for the case's options (None: the loop has no such option: it times until
# --seconds and at least 3 iterations)
DDP_NAMES = {"num-warmup-batches": "warmup", "num-batches-per-iter": "steps-per-iter", "min-seconds": "seconds",
             "num-iters": None, "epochs": None, "workers": None}


@dataclass(frozen=True)
class Entry:
    """One case the check runs: through the suite (its --preset, then its options) and as its bare loop
    (the preset's options expanded, then the same options), and the targets set on its figures.

    The seconds are the plan's (--quick's budget arithmetic): a suite run's and a bare loop's time beside
    their timed window (start and imports, compilation, cuDNN's autotuning in the warmup, the suite's
    matmul peak and record), as `--quick` measured them on an H100 80GB (torch 2.11, JAX 0.11.2,
    2026-11-27, the check's first run: nothing in the compilation caches), when each side compiled its own
    program. The compiled steps of pytorch-gpt and pytorch-ddp are now one program on both sides at one GPU (on
    the CPU each side finds the other's graphs in Inductor's cache: pytorch-gpt's in tests/integration/
    test_pytorch_gpt.py, pytorch-ddp's by hand, 2026-12-07), so the
    later side of pytorch-gpt-h100 and pytorch-ddp-h100 should compile in seconds; not yet measured on a GPU, the
    plan keeps the seconds measured."""

    name: str
    case: str
    bare: str  # under benchmarks/bare/
    preset: str | None = None
    options: tuple = ()  # ((option, value), ...): both sides, after the preset
    bare_flags: tuple = ("--device", "auto")  # the bare loop's own, where it has them
    mfu: float | None = None  # target of the MFU against the datasheet's dense bf16 peak
    published: float | None = None  # target of img/s per GPU / the published figure for this GPU
    suite_s: float = 25.0
    bare_s: float = 17.0
    quick: bool = True  # in --quick's plan (without --only)

    def settings(self, size: str) -> dict:
        """The case options both sides train with beside the preset: the entry's over the steps, or
        with --tiny the case's [tiny] table over them."""
        if size == "tiny":
            return {**dict(self.options), **load_case(self.case).spec["tiny"]}
        return {**STEPS, **dict(self.options)}

    def suite_args(self, size: str, min_seconds: float) -> list[str]:
        preset = ["--preset", self.preset] if self.preset else []
        return [*preset, *option_args(self.settings(size)), "--min-seconds", f"{min_seconds:g}"]

    def bare_args(self, size: str, min_seconds: float) -> list[str]:
        preset = {k: v for k, v in load_case(self.case).spec.get("presets", {}).get(self.preset, {}).items()
                  if k != "source"} if self.preset else {}
        options = {**preset, **self.settings(size), "min-seconds": f"{min_seconds:g}"}
        if self.bare == "pytorch_ddp.py":
            options = {DDP_NAMES.get(k, k): v for k, v in options.items() if DDP_NAMES.get(k, k)}
        return [*option_args(options), *self.bare_flags]

    def side_seconds(self, side: str, min_seconds: float) -> float:
        return (self.suite_s if side == "suite" else self.bare_s) + min_seconds

    def plan_seconds(self, rounds: int, min_seconds: float) -> float:
        return rounds * (self.side_seconds("suite", min_seconds) + self.side_seconds("bare", min_seconds))


ENTRIES = (
    Entry("pytorch-ddp-dle", "pytorch-ddp", "pytorch_ddp.py", preset="dle",
          options=(("image-size", 224), ("num-warmup-batches", 20)), bare_flags=(), suite_s=43.0, bare_s=29.0),
    Entry("pytorch-gpt", "pytorch-gpt", "pytorch_gpt.py", suite_s=25.0, bare_s=17.0),
    Entry("pytorch-gpt-h100", "pytorch-gpt", "pytorch_gpt.py", preset="h100", mfu=0.40, suite_s=56.0, bare_s=48.0),
    Entry("jax-gpt-h100", "jax-gpt", "jax_gpt.py", preset="h100", mfu=0.35, suite_s=50.0, bare_s=25.0),
    Entry("jax-resnet", "jax-resnet", "jax_resnet.py", options=(("batch-size", 256),), suite_s=69.0, bare_s=38.0),
    # last, for its long compilation (its seconds measured on an H200, 2026-11-28, caches empty: compilation
    # and CUDA graphs' capture 65-73 s a side)
    Entry("pytorch-ddp-h100", "pytorch-ddp", "pytorch_ddp.py", preset="h100",
          options=(("image-size", 224), ("num-warmup-batches", 20)), bare_flags=(), published=0.8,
          suite_s=97.0, bare_s=93.0, quick=False),
)
NAMES = [entry.name for entry in ENTRIES]


def plan_seconds(entries, rounds: int, min_seconds: float) -> float:
    """The check's estimated seconds: every entry's rounds of both sides (Entry says what is estimated)."""
    return sum(entry.plan_seconds(rounds, min_seconds) for entry in entries)


def targets(entries=ENTRIES) -> dict[str, float]:
    """The checks that set a figure against a target, by name: every entry's suite / bare, and its MFU and
    published figure where it has a target for them."""
    found = {}
    for entry in entries:
        found[f"suite_vs_bare.{entry.name}"] = SUITE_VS_BARE
        if entry.mfu is not None:
            found[f"mfu.{entry.name}"] = entry.mfu
        if entry.published is not None:
            found[f"published.{entry.name}"] = entry.published
    return found


class Budget:
    """--quick's total seconds (None: no limit), counted from its creation."""

    def __init__(self, seconds: float | None, clock=time.monotonic):
        self.seconds, self.clock, self.began = seconds, clock, clock()

    def left(self) -> float | None:
        return None if self.seconds is None else self.seconds - (self.clock() - self.began)

    def before_side(self, what: str, needs: float = 0.0) -> float | None:
        """The seconds a side may take (None: no limit); BudgetSpent where fewer are left than it needs
        (its measured time) or than MIN_SIDE_S: a run that cannot finish spends the GPU for nothing."""
        left = self.left()
        if left is not None and left < max(MIN_SIDE_S, needs):
            takes = f", which takes about {needs:.0f} s" if needs > MIN_SIDE_S else ""
            raise BudgetSpent(f"not run: {left:.0f} s of the {self.seconds:.0f}-second budget left before "
                              f"{what}{takes}")
        return left


class BudgetSpent(RuntimeError):
    pass


# --- the two sides ---------------------------------------------------------------------------------

class Sides:
    """Runs an entry's suite side and bare side (tests put a fake in its place)."""

    def __init__(self, run_options: list[str], work: Path, size: str, min_seconds: float, env: dict):
        self.run_options, self.work, self.size, self.min_seconds, self.env = run_options, work, size, min_seconds, env
        work.mkdir(parents=True, exist_ok=True)  # the records, run folders and bare loops' output, kept
        print(f"records and run folders: {work}", flush=True)
        self.stacks: dict = {}  # case -> the stack environment its runs use

    def suite(self, entry: Entry, timeout: float | None) -> dict:
        results = Path(tempfile.mkdtemp(prefix=f"{entry.name}-", dir=self.work))
        limit = ["--timeout", str(math.ceil(timeout))] if timeout is not None else []
        command = [sys.executable, "-m", "suite", "run", "--case", entry.case, "--gpus-per-node", "1",
                   "--results-dir", str(results), "--runs-dir", str(self.work / "runs"), *self.run_options, *limit,
                   "--", *entry.suite_args(self.size, self.min_seconds)]
        done = subprocess.run(command, cwd=ROOT, env=self.env, capture_output=True, text=True)
        (results / "output.log").write_text(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
        found = sorted(results.glob("*.json"))
        record = json.loads(found[0].read_text()) if found else None
        if done.returncode != 0 or record is None or record["status"] != "ok":
            why = record["reason"] if record else last_line(done)
            raise RuntimeError(f"the suite's run failed: {why}")
        return record

    def bare(self, entry: Entry, timeout: float | None) -> dict:
        """The bare loop's line: throughput, device, host, the settings it trained with."""
        argv, env = self.command(entry)
        log = Path(tempfile.mkstemp(prefix=f"{entry.name}-bare-", suffix=".log", dir=self.work)[1])
        said = f"$ {' '.join(argv)}\n"
        with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) as process:
            try:
                out, err = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the loop and whatever it started, nothing else
                log.write_text(said + "".join(process.communicate()))
                raise RuntimeError(f"the bare loop ran past the budget ({timeout:.0f} s were left)") from None
        log.write_text(f"{said}{out}{err}")
        done = subprocess.CompletedProcess(argv, process.returncode, out, err)
        lines = [line for line in out.splitlines() if line.startswith('{"samples"')]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"the bare loop failed: {last_line(done)}")
        return json.loads(lines[-1])

    def command(self, entry: Entry) -> tuple[list[str], dict]:
        """The bare loop in the same stack the suite's run of the case uses (prepared as the run prepares it)."""
        if entry.case not in self.stacks:  # prepared once per case (its stack), whatever the entries
            from suite.execution.run import check, prepare

            req = from_argv(["run", "--case", entry.case, "--gpus-per-node", "1", *self.run_options])
            self.stacks[entry.case] = prepare(req, check(req))
        stack_env = self.stacks[entry.case]
        argv = stack_env.argv("python", str(ROOT / "benchmarks" / "bare" / entry.bare),
                              *entry.bare_args(self.size, self.min_seconds))
        return argv, {**self.env, **stack_env.env}


def last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}, no output"


@dataclass
class Outcome:
    """What an entry's rounds gave: each round's figures, records and bare lines, or why they stopped."""

    entry: Entry
    values: dict = field(default_factory=lambda: {"suite": [], "bare": []})
    records: list = field(default_factory=list)
    bares: list = field(default_factory=list)
    seconds: dict = field(default_factory=lambda: {"suite": [], "bare": []})
    failure: str | None = None


def run_entry(entry: Entry, sides, rounds: int, budget: Budget, min_seconds: float) -> Outcome:
    """The entry's rounds, its sides in turns (ABBA), until they are done or one fails."""
    outcome = Outcome(entry)
    try:
        for index in range(rounds):
            for side in (("suite", "bare") if index % 2 == 0 else ("bare", "suite")):
                timeout = budget.before_side(f"{entry.name}'s {side} side", entry.side_seconds(side, min_seconds))
                began = time.monotonic()
                if side == "suite":
                    outcome.records.append(sides.suite(entry, timeout))
                    outcome.values["suite"].append(outcome.records[-1]["metrics"]["throughput"]["mean"])
                else:
                    outcome.bares.append(sides.bare(entry, timeout))
                    outcome.values["bare"].append(outcome.bares[-1]["throughput"])
                outcome.seconds[side].append(round(time.monotonic() - began, 1))
    except UsageError:  # bad options: the whole check stops (exit 2)
        raise
    except RuntimeError as exc:
        outcome.failure = str(exc)
    except Exception as exc:  # e.g. the stack of the bare loop could not be installed: this case fails, not all
        outcome.failure = f"{type(exc).__name__}: {exc}"
    return outcome


# --- the checks ------------------------------------------------------------------------------------

@dataclass
class Check:
    """One line: a figure against its target (value, target), or a condition (value None); met None: not
    checked (no figure to set against: said why), which fails nothing."""

    name: str
    met: bool | None
    said: str
    value: float | None = None
    target: float | None = None

    def line(self) -> str:
        return f"{self.name}: {self.said}"


def ratio_check(name: str, value: float, target: float, detail: str = "") -> Check:
    met = value >= target
    said = f"{value:.3f} (>= {target:g}{'' if met else ', MISSED'})" + (f"  {detail}" if detail else "")
    return Check(name, met, said, value, target)


def failed_figure(check: Check, why: str) -> Check:
    """A figure's check failed whatever its value (a side trained on the CPU): the value is still shown."""
    if check.value is None:
        return Check(check.name, False, f"FAILED: {why}")
    return Check(check.name, False, f"{check.value:.3f} (>= {check.target:g}, FAILED: {why})", check.value,
                 check.target)


def condition(name: str, problem: str | None) -> Check:
    return Check(name, problem is None, "ok" if problem is None else f"FAILED: {problem}")


def device_problem(record: dict, bare: dict) -> str | None:
    """A figure from the CPU set against another from the CPU proves nothing about a GPU: both sides
    must have trained on one."""
    reported = record["config"]["reported_by_case"]
    if record["world"].get("device_type") != "cuda":
        device = reported.get("device_name") or record["world"].get("device_type")
        return f"the suite's run trained on {device}, not a GPU"
    if bare.get("device_type") != "cuda":
        return (f"the bare loop trained on {bare.get('device_name') or bare.get('device')}, not a GPU (the framework "
                "in the stack sees no GPU: a CPU build, FLAVOUR=cpu, or a driver older than its CUDA)")
    return None


def host_problem(record: dict, bare: dict) -> str | None:
    """The ratio means something only where both sides ran on one host (--cluster runs the suite's
    side on the profile's first host, the bare loop here)."""
    suite_hosts = sorted(record["provenance"].get("host_info") or {})
    if suite_hosts != [bare.get("host")]:
        return (f"the suite's run trained on {', '.join(suite_hosts)}, the bare loop on {bare.get('host')}: "
                "run gpu-check on the host the run uses")
    return None


# what both sides report of their training (the case in config.reported_by_case, the bare loop in its
# config), which must be equal for the ratio to compare the same work
SAME_WORK = ("model", "dtype", "parameters", "batch_per_device", "image_size", "channels_last", "compile",
             "compile_mode", "optimizer_impl", "attention")


def settings_problem(record: dict, bare: dict) -> str | None:
    reported, theirs = record["config"].get("reported_by_case") or {}, bare.get("config") or {}
    differ = [f"{key} {reported[key]!r} (suite) / {theirs[key]!r} (bare)" for key in SAME_WORK
              if key in reported and key in theirs and reported[key] != theirs[key]]
    return f"the sides trained differently: {'; '.join(differ)}" if differ else None


def telemetry_problem(record: dict) -> str | None:
    if unmatched := unmatched_gpus(record):
        return unmatched
    gpus = run_gpus(record)
    if not gpus:
        hosts = (record["metrics"].get("telemetry") or {}).get("hosts") or {}
        return f"no NVML figures of the run's GPUs in the record: {json.dumps(hosts)[:200]}"
    utils = [(g.get("util_pct") or {}).get("mean") for g in gpus]
    if all(u is None for u in utils):
        return "NVML gave no utilisation over the timed window"
    if max(u or 0 for u in utils) <= 0:
        names = ", ".join(str(g.get("uuid") or g.get("name")) for g in gpus)
        return f"the run's GPU(s) {names} were idle over the timed window (utilisation 0%)"
    return None


def mllog_line(record: dict) -> tuple[str, bool]:
    """(what the MLLOG check found, whether it holds): lines missing because the stack has no
    mlperf_logging are said, not failed (a site environment may lack it)."""
    run_dir = Path(record["repetitions"][0]["run_dir"])
    lines = sum(path.read_text().count(":::MLLOG") for path in sorted((run_dir / "ranks").glob("*.mllog")))
    if lines:
        return "ok", True
    versions = record["provenance"].get("versions") or {}
    if "mlperf_logging" in versions and versions["mlperf_logging"] is None:
        return "not written: the stack has no mlperf_logging (pip install mlperf-logging to have them)", True
    return f"FAILED: no :::MLLOG lines under {run_dir / 'ranks'}", False


def first_problem(pairs, judge) -> str | None:
    return next((problem for pair in pairs if (problem := judge(*pair)) is not None), None)


def mfu_check(entry: Entry, records: list[dict]) -> Check:
    """The achieved FLOP/s per GPU (metrics.utilisation: the case's work per sample x samples/s per device),
    mean over the rounds, / the datasheet's dense bf16 peak of this GPU: the preset's aim, whatever
    precision the run's products had (the line names it)."""
    name, device = f"mfu.{entry.name}", device_name_of(records[-1])
    peak = datasheet_peak(device, "bf16")
    if peak is None:
        return Check(name, None, f"not checked: no datasheet bf16 peak for {device} (suite/analysis/peaks.py)")
    found = [r["metrics"].get("utilisation") or {} for r in records]
    if not all(f.get("achieved_flops_per_s_per_device") for f in found):
        return Check(name, False, "FAILED: a record has no achieved FLOP/s (metrics.utilisation): the case "
                                  "reported no work")
    if invalid := next((f["invalid_reason"] for f in found if f.get("valid") is False), None):
        return Check(name, False, f"FAILED: {invalid}")
    achieved = statistics.fmean(f["achieved_flops_per_s_per_device"] for f in found)
    detail = (f"{achieved / 1e12:.1f} TFLOP/s per GPU of the {peak['part']} datasheet's dense bf16 "
              f"{peak['flops_per_s'] / 1e12:.1f} (products in {found[-1].get('precision')})")
    return ratio_check(name, achieved / peak["flops_per_s"], entry.mfu, detail)


def published_check(entry: Entry, records: list[dict]) -> Check:
    """The mean per-GPU throughput over the rounds / the published figure for this GPU (metrics.published)."""
    name, found = f"published.{entry.name}", records[-1]["metrics"].get("published")
    if not found:
        gpu = records[-1]["config"]["reported_by_case"].get("device_name")
        return Check(name, None, f"not checked: no published figure for {gpu} at {records[-1]['config'].get('dtype')} "
                                 f"in cases/{entry.case}/case.toml")
    per_device = statistics.fmean(r["metrics"]["throughput"]["per_device"] for r in records)
    published = found["published_per_device"]
    return ratio_check(name, per_device / published, entry.published,
                       f"{per_device:,.0f} {found.get('unit', 'img/s')} per GPU / {published:,.0f}, {found['source']}")


def checks_of(outcome: Outcome) -> tuple[list[Check], list[str]]:
    """The entry's check lines, and its lines of information (the published figure where it has no
    target, the diagnosis)."""
    entry, records, bares = outcome.entry, outcome.records, outcome.bares
    ratio_name = f"suite_vs_bare.{entry.name}"
    if outcome.failure or not records or not bares:
        return [Check(ratio_name, False, f"FAILED: {outcome.failure or 'no round ran'}")], []
    suite, bare = outcome.values["suite"], outcome.values["bare"]
    rounds = [round(a / b, 3) for a, b in zip(suite, bare)]
    unit = records[-1]["metrics"]["throughput"].get("unit", "img/s")
    detail = (f"round ratios {rounds} (spread {max(rounds) - min(rounds):.3f}); suite {unit} "
              f"{[round(v) for v in suite]}, bare {[round(v) for v in bare]}")
    checks = [ratio_check(ratio_name, statistics.fmean(suite) / statistics.fmean(bare), SUITE_VS_BARE, detail)]
    if entry.mfu is not None:
        checks.append(mfu_check(entry, records))
    if entry.published is not None:
        checks.append(published_check(entry, records))
    pairs = list(zip(records, bares))
    if on_cpu := first_problem(pairs, device_problem):  # no figure of a run on the CPU holds for a GPU
        checks = [failed_figure(c, on_cpu) for c in checks]
    checks += [condition(f"device.{entry.name}", on_cpu),
               condition(f"host.{entry.name}", first_problem(pairs, host_problem)),
               condition(f"sides.{entry.name}", first_problem(pairs, settings_problem)),
               condition(f"telemetry.{entry.name}", first_problem([(r,) for r in records], telemetry_problem))]
    said, holds = mllog_line(records[-1])
    checks.append(Check(f"mllog.{entry.name}", holds, said))
    info = []
    if entry.published is None and (published := records[-1]["metrics"].get("published")):
        info.append(f"  {published_line(published)}")
    if diagnosis := records[-1]["metrics"].get("diagnosis"):
        info.append(f"  diagnosis: {summary_line(diagnosis)}")
    if steady := steadiness_line(outcome):
        info.append(f"  {steady}")
    if took := time_line(outcome):
        info.append(f"  {took}")
    return checks, info


def steadiness_line(outcome: Outcome) -> str | None:
    """How even each side's timed iterations were in its last round (the slowest's throughput / their
    median; a harness that stalls now and then shows here before it moves a mean), and the telemetry
    sampler's own milliseconds per sample in that run (the suite's side alone runs one)."""
    suite = outcome.records[-1]["metrics"]["throughput"].get("samples") if outcome.records else None
    bare = outcome.bares[-1].get("samples") if outcome.bares else None
    sides = [f"{side} {min(samples) / statistics.median(samples):.2f} of {len(samples)}"
             for side, samples in (("suite", suite), ("bare", bare)) if samples]
    parts = [f"slowest iteration / median: {', '.join(sides)}"] if sides else []
    hosts = ((outcome.records[-1]["metrics"].get("telemetry") or {}).get("hosts") or {}) if outcome.records else {}
    took = [h["sample_ms"] for h in hosts.values() if isinstance(h, dict) and h.get("sample_ms")]
    if took:
        parts.append(f"telemetry sampler {max(t['max'] for t in took):.1f} ms a sample at most "
                     f"(mean {statistics.fmean(t['mean'] for t in took):.1f})")
    return f"steadiness: {'; '.join(parts)}" if parts else None


BARE_PHASES = (("set_up_s", "set-up"), ("compile_s", "compile"), ("warmup_s", "warmup"), ("window_s", "timed window"))


def time_line(outcome: Outcome) -> str | None:
    """Where each side's wall seconds went in its last round (what --quick's budget is made of): the suite's
    run by its record's timeline (the runner: its own work before the launch and after the exit), the bare
    loop by its phases (set-up from its process's start; the rest: the stack's preparation before a case's first
    bare side, the process's exit and output)."""
    parts = []
    if outcome.records and outcome.seconds["suite"]:
        wall = outcome.seconds["suite"][-1]
        phases = outcome.records[-1]["repetitions"][0].get("timeline") or {}
        shown = [f"the runner {wall - phases['total_s']:.1f}"] if "total_s" in phases else []
        shown += [text] if (text := timeline_text(phases)) else []
        parts.append(f"suite {wall:.1f} s ({', '.join(shown)})" if shown else f"suite {wall:.1f} s")
    if outcome.bares and outcome.seconds["bare"]:
        wall, phases = outcome.seconds["bare"][-1], outcome.bares[-1].get("phases") or {}
        shown = [f"{what} {phases[key]:.1f}" for key, what in BARE_PHASES if key in phases]
        rest = f", the rest {wall - sum(phases.values()):.1f}" if phases else ""
        parts.append(f"bare {wall:.1f} s ({', '.join(shown)}{rest})" if shown else f"bare {wall:.1f} s")
    return f"time: {'; '.join(parts)}" if parts else None


# --- the whole check -------------------------------------------------------------------------------

def compile_caches(work: Path, environ=os.environ) -> dict:
    """The environment of both sides: JAX's persistent compilation cache and Inductor's cache in the
    check's folder (where the caller set none), so that a program is compiled afresh once per check."""
    return {**environ, "JAX_COMPILATION_CACHE_DIR": environ.get("JAX_COMPILATION_CACHE_DIR") or str(work / "jax-cache"),
            "TORCHINDUCTOR_CACHE_DIR": environ.get("TORCHINDUCTOR_CACHE_DIR") or str(work / "inductor-cache")}


def check_host(entries, sides, rounds: int, min_seconds: float, budget: Budget, run_options: list[str],
               results_dir: Path | None = None) -> int:
    began, seconds = time.monotonic(), plan_seconds(entries, rounds, min_seconds)
    limit = f"; budget {budget.seconds:.0f} s" if budget.seconds is not None else ""
    print(f"plan: {', '.join(e.name for e in entries)}; {rounds} round(s) (ABBA), timed windows of {min_seconds:g} s; "
          f"about {seconds:.0f} s by the estimates{limit}", flush=True)
    results, all_checks, headed = {}, [], False
    for entry in entries:
        outcome = run_entry(entry, sides, rounds, budget, min_seconds)
        if outcome.failure:
            print(f"gpu-check FAILED: {entry.name}: {outcome.failure}", file=sys.stderr, flush=True)
        if outcome.records and not headed:
            record, headed = outcome.records[-1], True
            print(f"gpu: {record['config']['reported_by_case'].get('device_name')}; stack "
                  f"{record['provenance'].get('stack')}/{record['provenance'].get('stack_flavour')}, runtime "
                  f"{record['execution']['runtime']}", flush=True)
        checks, info = checks_of(outcome)
        for line in [c.line() for c in checks] + info:
            print(line, flush=True)
        all_checks += checks
        metrics = outcome.records[-1]["metrics"] if outcome.records else {}
        results[entry.name] = {"case": entry.case, "preset": entry.preset, "failure": outcome.failure,
                               **outcome.values, "seconds": outcome.seconds, "published": metrics.get("published"),
                               "utilisation": metrics.get("utilisation"),
                               "timeline": outcome.records[-1]["repetitions"][0].get("timeline")
                               if outcome.records else None,
                               "bare_phases": outcome.bares[-1].get("phases") if outcome.bares else None}
    failed = [c.name for c in all_checks if c.met is False]
    elapsed = time.monotonic() - began
    limit = f" of the {budget.seconds:.0f}-second budget" if budget.seconds is not None else ""
    print(f"gpu-check: {len(all_checks)} checks, {len(failed)} failed or missed"
          + (f": {', '.join(failed)}" if failed else "") + f"; {elapsed:.0f} s{limit}", flush=True)
    if not headed:  # no run of the suite finished: nothing measured to keep
        return 1 if failed else 0
    out = (results_dir or REPORTS) / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-gpu-check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "rounds": rounds, "min_seconds": min_seconds, "plan_seconds": seconds, "budget_s": budget.seconds,
        "elapsed_s": round(elapsed, 1),
        "checks": {c.name: {"value": c.value, "target": c.target, "met": c.met, "said": c.said} for c in all_checks},
        "entries": results, "run_options": run_options}, indent=2) + "\n")
    print(f"results: {out}")
    return 1 if failed else 0


def parse(own: list[str]) -> argparse.Namespace:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help=f"one round, 5-second windows, within "
                      f"{QUICK_BUDGET_S:.0f} s on one H100")
    size.add_argument("--tiny", action="store_true", help="each case's [tiny] sizes: checks the machinery, "
                      "measures nothing")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of suite and bare loop, ABBA "
                        "(default 3; --quick 1)")
    parser.add_argument("--min-seconds", type=float, default=None, help="timed seconds of each run (default 30; "
                        "--quick 5)")
    parser.add_argument("--results-dir", type=Path, default=REPORTS, help="where the results, records and run "
                        "folders go (default reports/bench)")
    parser.add_argument("--only", nargs="+", metavar="NAME", default=None, help=f"these cases only: {', '.join(NAMES)}")
    args = parser.parse_args(own)
    mode = MODES["quick" if args.quick else "tiny" if args.tiny else "full"]
    args.rounds = mode["rounds"] if args.rounds is None else args.rounds
    args.min_seconds = mode["min_seconds"] if args.min_seconds is None else args.min_seconds
    return args


def selected(only: list[str] | None, quick: bool = False) -> list[Entry]:
    """The entries --only names (without it all, or under --quick those in its plan); UsageError naming the
    unknown ones."""
    if not only:
        return [entry for entry in ENTRIES if entry.quick or not quick]
    if unknown := [name for name in only if name not in NAMES]:
        raise UsageError(f"--only: no case {', '.join(unknown)} (the cases: {', '.join(NAMES)})")
    return [entry for entry in ENTRIES if entry.name in only]


def main(argv: list[str] | None = None, sides_factory=Sides) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, run_options = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parse(own)
    try:
        gpus = host_gpus()
    except UsageError as exc:  # the probe failed: say what it said, not that there is no GPU
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not gpus:
        print("error: make gpu-check needs an NVIDIA GPU on this host (nvidia-smi -L lists none)", file=sys.stderr)
        return 2
    if args.rounds < 1 or args.min_seconds <= 0:
        print("error: --rounds must be at least 1 and --min-seconds above 0", file=sys.stderr)
        return 2
    try:
        entries = selected(args.only, args.quick)
        paths.refuse_unwritable(args.results_dir, "--results-dir")  # the results come at the end
        kept = args.results_dir / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-gpu-check-runs"
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as caches:
            sides = sides_factory(run_options, kept, "tiny" if args.tiny else "full", args.min_seconds,
                                  compile_caches(Path(caches)))
            budget = Budget(QUICK_BUDGET_S if args.quick else None)
            return check_host(entries, sides, args.rounds, args.min_seconds, budget, run_options, args.results_dir)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

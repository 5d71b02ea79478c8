"""`make gpu-check`: does the suite measure a GPU host as a bare training loop does, and as the
published figures say it should? Needs no container engine: the stack is the local cuda flavour, or
the site's environment (RUNTIME=modules), whatever the run options after `--` say.

  1. pytorch-ddp with --preset dle (AMP, channels-last, batch 256 per GPU) on one GPU through the
     suite, and the same training as a bare DDP loop (benchmarks/bare/pytorch_ddp.py) in the same
     stack, in interleaved rounds (ABBA): suite / bare, with each round's ratio;
  2. the suite's img/s per GPU / the published figure for this GPU and precision (case.toml);
  3. both sides trained on a GPU (the suite's record and the bare loop say which device), on the same
     host; the run's GPUs (NVML, those its ranks used) were busy over the timed window; MLPerf-style
     MLLOG lines are in the run folder (where the stack has no mlperf_logging, that is said, not failed);
  4. the run's diagnosis line.

Exit 0 when every run worked and every check holds; 1 when a run failed or a check did not hold (a
side that trained on the CPU, GPUs idle over the window, the sides on different hosts); 2, with one
line, on a host without an NVIDIA GPU (or with bad options).

    python benchmarks/gpu_check.py [--rounds 3] [--min-seconds 30] [-- RUN OPTIONS, e.g. --runtime modules]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from suite.analysis.diagnosis import run_gpus, summary_line, unmatched_gpus  # noqa: E402 (after sys.path is set)
from suite.analysis.references import summary_line as published_line  # noqa: E402 (after sys.path is set)
from suite.base.errors import UsageError  # noqa: E402 (after sys.path is set)
from suite.execution.request import from_argv  # noqa: E402 (after sys.path is set)
from suite.inputs.host_gpus import host_gpus  # noqa: E402 (after sys.path is set)

CASE = "pytorch-ddp"
SIZES = {  # the preset's batch and DLE's image size; --tiny: a check that the machinery works, on any host
    "full": {"batch-size": 256, "image-size": 224, "warmup": 20, "steps": 10},
    "tiny": {"batch-size": 4, "image-size": 32, "warmup": 1, "steps": 2},
}
SUITE_VS_BARE = 0.95


def suite_run(run_options: list[str], work: Path, min_seconds: float, size: dict) -> dict:
    results = Path(tempfile.mkdtemp(dir=work))
    sizes = ["--batch-size", str(size["batch-size"]), "--image-size", str(size["image-size"]),
             "--num-warmup-batches", str(size["warmup"]), "--num-batches-per-iter", str(size["steps"]),
             "--num-iters", "3"]
    command = [sys.executable, "-m", "suite", "run", "--case", CASE, "--gpus-per-node", "1", "--results-dir",
               str(results), "--runs-dir", str(work / "runs"), *run_options, "--", "--preset", "dle", *sizes,
               "--min-seconds", f"{min_seconds:g}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    found = sorted(results.glob("*.json"))
    record = json.loads(found[0].read_text()) if found else None
    if done.returncode != 0 or record is None or record["status"] != "ok":
        why = record["reason"] if record else (done.stderr or done.stdout).strip().splitlines()[-1:]
        raise RuntimeError(f"the suite's run failed: {why}")
    return record


def bare_command(run_options: list[str], min_seconds: float, size: dict) -> tuple[list[str], dict]:
    """The bare loop in the same stack the suite's run uses (prepared as the run prepares it)."""
    from suite.execution.run import check, prepare

    req = from_argv(["run", "--case", CASE, "--gpus-per-node", "1", *run_options])
    stack_env = prepare(req, check(req))
    argv = stack_env.argv("python", str(ROOT / "benchmarks" / "bare" / "pytorch_ddp.py"), "--amp", "--channels-last",
                          "--batch-size", str(size["batch-size"]), "--image-size", str(size["image-size"]),
                          "--warmup", str(size["warmup"]), "--steps-per-iter", str(size["steps"]),
                          "--seconds", f"{min_seconds:g}")
    return argv, {**os.environ, **stack_env.env}


def bare_run(command: tuple[list[str], dict]) -> dict:
    """The bare loop's line: throughput, device, host."""
    argv, env = command
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the bare loop failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def device_problem(record: dict, bare: dict) -> str | None:
    """A figure from the CPU set against another from the CPU proves nothing about a GPU: both sides
    must have trained on one."""
    reported = record["config"]["reported_by_case"]
    if record["world"].get("device_type") != "cuda":
        device = reported.get("device_name") or record["world"].get("device_type")
        return f"the suite's run trained on {device}, not a GPU"
    if bare.get("device_type") != "cuda":
        return (f"the bare loop trained on {bare.get('device_name') or bare.get('device')}, not a GPU (torch in the "
                "stack sees no GPU: a CPU build, FLAVOUR=cpu, or a driver older than its CUDA)")
    return None


def host_problem(record: dict, bare: dict) -> str | None:
    """The ratio means something only where both sides ran on one host (--cluster runs the suite's
    side on the profile's first host, the bare loop here)."""
    suite_hosts = sorted(record["provenance"].get("host_info") or {})
    if suite_hosts != [bare.get("host")]:
        return (f"the suite's run trained on {', '.join(suite_hosts)}, the bare loop on {bare.get('host')}: "
                "run gpu-check on the host the run uses")
    return None


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


def check_host(run_options: list[str], rounds: int, min_seconds: float, size: dict, work: Path) -> int:
    bare = bare_command(run_options, min_seconds, size)
    values, records, bares, ok = {"suite": [], "bare": []}, [], [], True
    for index in range(rounds):
        for side in (("suite", "bare") if index % 2 == 0 else ("bare", "suite")):
            if side == "suite":
                records.append(suite_run(run_options, work, min_seconds, size))
                values["suite"].append(records[-1]["metrics"]["throughput"]["mean"])
            else:
                bares.append(bare_run(bare))
                values["bare"].append(bares[-1]["throughput"])
    record = records[-1]
    gpu = record["config"]["reported_by_case"].get("device_name")
    ratio = statistics.fmean(values["suite"]) / statistics.fmean(values["bare"])
    rounds_shown = [round(a / b, 3) for a, b in zip(values["suite"], values["bare"])]
    met = ratio >= SUITE_VS_BARE
    ok &= met
    print(f"gpu: {gpu}; stack {record['provenance'].get('stack')}/{record['provenance'].get('stack_flavour')}, "
          f"runtime {record['execution']['runtime']}")
    print(f"suite_vs_bare.{CASE}: {ratio:.3f} (>= {SUITE_VS_BARE}{'' if met else ', MISSED'})  round ratios "
          f"{rounds_shown}; suite img/s {[round(v) for v in values['suite']]}, "
          f"bare {[round(v) for v in values['bare']]}")
    published = record["metrics"].get("published")
    print(published_line(published) if published else f"published: no figure for {gpu} at {record['config']['dtype']} "
          f"in cases/{CASE}/case.toml")
    for name, problem in (("device", device_problem(record, bares[-1])), ("host", host_problem(record, bares[-1])),
                          ("telemetry", telemetry_problem(record))):
        print(f"{name}: {'ok' if problem is None else 'FAILED: ' + problem}")
        ok &= problem is None
    said, holds = mllog_line(record)
    print(f"mllog: {said}")
    ok &= holds
    if diagnosis := record["metrics"].get("diagnosis"):
        print(f"diagnosis: {summary_line(diagnosis)}")
    out = ROOT / "reports" / "bench" / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-gpu-check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"gpu": gpu, "suite_vs_bare": ratio, "round_ratios": rounds_shown, **values,
                               "published": published, "diagnosis": record["metrics"].get("diagnosis"),
                               "run_options": run_options}, indent=2) + "\n")
    print(f"results: {out}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, run_options = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of suite and bare loop, ABBA (default 3)")
    parser.add_argument("--min-seconds", type=float, default=30.0, help="timed seconds of each run (default 30)")
    parser.add_argument("--tiny", action="store_true", help="batch 4 at 32 px: checks the machinery, measures nothing")
    args = parser.parse_args(own)
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
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
            size = SIZES["tiny" if args.tiny else "full"]
            return check_host(run_options, args.rounds, args.min_seconds, size, Path(work))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"gpu-check FAILED: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())

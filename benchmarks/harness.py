"""`make bench`: does the suite measure the frameworks and not itself?

Runs side by side, in one invocation, and prints ratios (absolute times on a shared machine mean
little; ratios of runs made together do), each as `name: value (target)`, and writes them all as
JSON under reports/bench/. A missed target is reported, not failed: machines are noisy.

  harness overhead   suite's img/s / a bare loop's img/s (same model, batch, threads), interleaved
  input pipeline     real-data img/s / synthetic-data img/s through the same case
  scaling            2 workers / 1 worker on this machine (one per core)
  start-up           seconds from `suite run` to the first timed step, minus the same for the case
                     script started directly (warm stack)
  gpu amp            (GPU machines only) img/s per GPU with --amp --channels-last, beside a published figure

    python benchmarks/harness.py [--tiny] [--rounds N] [--only NAME ...]
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

from suite.containers import host_gpus  # noqa: E402
from suite.stacks import ensure_installed, load_stack  # noqa: E402

SIZES = {
    "full": {"pytorch": {"batch-size": 32, "image-size": 224, "num-warmup-batches": 5, "num-batches-per-iter": 5, "num-iters": 5},
             "mxnet": {"batch-size": 32, "image-size": 224, "num-warmup-batches": 5, "disp-batches": 5, "num-batches": 30},
             "tf": {"batch-size": 32, "image-size": 128, "epochs": 3}},
    "tiny": {"pytorch": {"batch-size": 4, "image-size": 32, "num-warmup-batches": 1, "num-batches-per-iter": 2, "num-iters": 2},
             "mxnet": {"batch-size": 4, "image-size": 32, "num-warmup-batches": 1, "disp-batches": 2, "num-batches": 5},
             "tf": {"batch-size": 16, "image-size": 32, "epochs": 2}},
}
TARGETS = {"harness_overhead.pytorch-synthetic": (">=", 0.99), "input_pipeline.mxnet-imagenet": (">=", 0.95),
           "input_pipeline.tf-cifar": (">=", 0.95),
           "scaling.pytorch-synthetic": (">=", 1.8), "scaling.mxnet-imagenet": (">=", 1.8),
           "startup.pytorch-synthetic": ("<", 2.0)}


def as_args(options: dict) -> list[str]:
    return [text for name, value in options.items() for text in (f"--{name}", str(value))]


class Bench:
    def __init__(self, size: str, rounds: int, work: Path):
        self.size, self.rounds, self.work = size, rounds, work
        self.results: dict[str, dict] = {}

    def suite_run(self, case: str, case_args: list[str], *run_args: str) -> tuple[dict, float, float]:
        """A real `python -m suite run` (what `make run` calls); returns its record, the seconds from
        the start of the command to the first timed step of rank 0, and to the launch of the job."""
        results = Path(tempfile.mkdtemp(dir=self.work))
        command = [sys.executable, "-m", "suite", "run", "--case", case, "--results-dir", str(results),
                   "--runs-dir", str(self.work / "runs"), "--data-dir", str(self.work / "data"), *run_args, "--", *case_args]
        started = time.time()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        [path] = results.glob("*.json") or [None]
        if done.returncode != 0 or path is None:
            raise RuntimeError(f"suite run of {case} failed: {(done.stdout + done.stderr)[-800:]}")
        record = json.loads(path.read_text())
        rep = record["repetitions"][0]
        return record, first_timed_step(Path(rep["run_dir"])) - started, rep["launched_at"] - started

    def stack_python(self, stack: str) -> str:
        return str(ensure_installed(load_stack(stack), log=lambda m: None).python)

    def report(self, name: str, value: float, reference: str, **settings) -> None:
        """A figure with no target of ours, printed beside a published one."""
        self.results[name] = {"value": value, "reference": reference, "settings": settings}
        print(f"{name}: {value:.1f} (reference: {reference})  {json.dumps(settings)}", flush=True)

    def record(self, name: str, value: float, **settings) -> None:
        op, target = TARGETS[name]
        met = value >= target if op == ">=" else value < target
        self.results[name] = {"value": value, "target": f"{op} {target}", "met": met, "settings": settings}
        print(f"{name}: {value:.3f} ({op} {target}{'' if met else ', MISSED'})  {json.dumps(settings)}", flush=True)

    # -- the measurements ------------------------------------------------------------------------

    def harness_overhead_pytorch(self) -> None:
        options = SIZES[self.size]["pytorch"]
        python = self.stack_python("pytorch-horovod")
        bare_script = str(ROOT / "benchmarks" / "bare" / "pytorch_synthetic.py")
        suite, bare = [], []
        for _ in range(self.rounds):
            out = subprocess.run([python, bare_script, *as_args(options)], capture_output=True, text=True, check=True)
            bare.append(json.loads(out.stdout.strip().splitlines()[-1])["throughput"])
            record, _, _ = self.suite_run("pytorch-synthetic", as_args(options), "--gpus-per-node", "1")
            suite.append(record["metrics"]["throughput"]["mean"])
        self.record("harness_overhead.pytorch-synthetic", statistics.fmean(suite) / statistics.fmean(bare),
                    suite_img_s=suite, bare_img_s=bare, **options)

    def startup_pytorch(self) -> None:
        options = SIZES[self.size]["pytorch"]
        python = self.stack_python("pytorch-horovod")
        case_dir = ROOT / "cases" / "pytorch-synthetic"
        via_suite, direct, to_launch = [], [], []
        for _ in range(self.rounds):
            _, seconds, launch = self.suite_run("pytorch-synthetic", as_args(options), "--gpus-per-node", "1")
            via_suite.append(seconds)
            to_launch.append(launch)
            run_dir = Path(tempfile.mkdtemp(dir=self.work))
            env = {**os.environ, "PYTHONPATH": str(ROOT), "SUITE_RUN_DIR": str(run_dir)}
            started = time.time()
            subprocess.run([python, str(case_dir / "train.py"), *as_args(options)], env=env, check=True,
                           capture_output=True, cwd=run_dir)
            direct.append(first_timed_step(run_dir) - started)
        # runner_to_launch_s: the suite's own part; the rest of suite_s is horovodrun and the case.
        self.record("startup.pytorch-synthetic", statistics.median(via_suite) - statistics.median(direct),
                    suite_s=via_suite, direct_s=direct, runner_to_launch_s=to_launch, **options)

    def interleaved(self, name: str, case: str, a: tuple[list[str], list[str]], b: tuple[list[str], list[str]],
                    labels: tuple[str, str]) -> None:
        """Records mean img/s of variant a / variant b, each (case options, run options), run in turns."""
        results = {labels[0]: [], labels[1]: []}
        for _ in range(self.rounds):
            for label, (case_args, run_args) in zip(labels, (a, b)):
                record = self.suite_run(case, case_args, *run_args)[0]
                results[label].append(record["metrics"]["throughput"]["mean"])
        self.record(name, statistics.fmean(results[labels[0]]) / statistics.fmean(results[labels[1]]), **results)

    def synthetic_data(self, case: str, marker: str) -> None:
        """The case's generated dataset in the bench's data folder, made once."""
        if not (self.work / "data" / marker).exists():
            subprocess.run([sys.executable, "-m", "suite", "data", "--case", case, "--synthetic",
                            "--data-dir", str(self.work / "data")], cwd=ROOT, check=True, capture_output=True)

    def scaling_pytorch(self) -> None:
        options = as_args(SIZES[self.size]["pytorch"])
        self.interleaved("scaling.pytorch-synthetic", "pytorch-synthetic", (options, ["--gpus-per-node", "2"]),
                         (options, ["--gpus-per-node", "1"]), ("two_workers_img_s", "one_worker_img_s"))

    def input_pipeline_mxnet(self) -> None:
        self.synthetic_data("mxnet-imagenet", "imagenet-rec/train.rec")
        options = as_args({**SIZES[self.size]["mxnet"], "kv-store": "local"})
        self.interleaved("input_pipeline.mxnet-imagenet", "mxnet-imagenet", (options, []),
                         ([*options, "--benchmark"], []), ("recordio_img_s", "synthetic_img_s"))

    def input_pipeline_tf(self) -> None:
        self.synthetic_data("tf-cifar", "cifar-10-batches-py/data_batch_1")
        options = as_args(SIZES[self.size]["tf"])
        self.interleaved("input_pipeline.tf-cifar", "tf-cifar", (options, []), ([*options, "--synthetic-input"], []),
                         ("cifar_format_img_s", "synthetic_in_memory_img_s"))

    def scaling_mxnet(self) -> None:
        self.synthetic_data("mxnet-imagenet", "imagenet-rec/train.rec")
        options = as_args({**SIZES[self.size]["mxnet"], "kv-store": "dist_sync"})
        loopback = ["--hostfile", "hostfiles/loopback"]
        self.interleaved("scaling.mxnet-imagenet", "mxnet-imagenet", (options, ["--nodes", "2", *loopback]),
                         (options, ["--nodes", "1", *loopback]), ("two_workers_img_s", "one_worker_img_s"))


    def gpu_amp_pytorch(self) -> None:
        """On a GPU machine: img/s per GPU with mixed precision and NHWC, as published figures are."""
        if not host_gpus():
            print("gpu_amp.pytorch-synthetic: skipped (no GPU on this machine)", flush=True)
            return
        options = {**SIZES[self.size]["pytorch"], "batch-size": 256 if self.size == "full" else 32}
        record = self.suite_run("pytorch-synthetic", [*as_args(options), "--amp", "--channels-last"],
                                "--gpus-per-node", "1")[0]
        self.report("gpu_amp.pytorch-synthetic", record["metrics"]["throughput"]["per_device"],
                    "2470 img/s per GPU, ResNet-50 v1.5 AMP on A100 80GB, NVIDIA DeepLearningExamples",
                    gpu=record["config"]["reported_by_case"].get("device_name"), **options)


def first_timed_step(run_dir: Path) -> float:
    """Wall-clock start of rank 0's first timed iteration (or timed epoch: the second), from its probe file."""
    for line in (run_dir / "ranks" / "rank-00000.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "iteration" or (event["event"] == "epoch" and event["index"] > 0):
            return event["time"] - event["seconds"]
    raise RuntimeError(f"no timed iteration in {run_dir}")


MEASUREMENTS = ["harness_overhead_pytorch", "startup_pytorch", "scaling_pytorch", "input_pipeline_mxnet",
                "input_pipeline_tf", "scaling_mxnet", "gpu_amp_pytorch"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny sizes, one round: checks that the benchmark works")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds per measurement (default 3, tiny 1)")
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, help="run only these measurements")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench")
    args = parser.parse_args(argv)
    size = "tiny" if args.tiny else "full"
    with tempfile.TemporaryDirectory(prefix="bench-") as work:
        bench = Bench(size, args.rounds or (1 if args.tiny else 3), Path(work))
        for name in args.only or MEASUREMENTS:
            getattr(bench, name)()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{size}.json"
    path.write_text(json.dumps({"size": size, "rounds": bench.rounds, "host": os.uname().nodename,
                                "results": bench.results}, indent=2) + "\n")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

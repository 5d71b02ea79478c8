"""`make bench`: does the suite measure the frameworks and not itself?

Runs side by side, in one invocation, and prints ratios (absolute times on a shared machine mean
little; ratios of runs made together do), each as `name: value (target)`, and writes them all as
JSON under reports/bench/. A missed target is reported, not failed: machines are noisy.

  harness overhead   suite's img/s / a bare loop's img/s under the same launcher (same model, batch,
                     threads); the bare loop alone runs beside them and the split is printed; for
                     pytorch-gpt, tokens/s of the suite (one worker it starts itself, --launcher ranks)
                     / the bare loop of the same model, at a size where a step takes >= 0.2 s on a CPU;
                     for jax-gpt, the same against a bare jitted JAX loop of its Flax model (one process)
  input pipeline     real-data img/s / synthetic-data img/s through the same case (tf-cifar, mxnet-imagenet,
                     pytorch-ddp); for pytorch-ddp also a decoded image's cost on one core beside a
                     trained image's, which bounds the ratio where loader and training share the cores
  scaling            2 workers / 1 worker, each bound to its own core(s) (--cpu-bind cores): the one
                     worker runs on half the cores, so 2 workers have twice the hardware
  start-up           seconds from `suite run` to the first timed step, minus the same for the case
                     script started directly (warm stack)
  gpu amp            (GPU machines only) img/s per GPU with --amp --channels-last (the local cuda
                     flavour) ÷ the published figure for this GPU, else NVIDIA's A100 figure
  report             seconds `suite report` takes over 10,000 records (copies of one real record of the
                     largest kind: 2 nodes, telemetry series, interconnect sweep), the first time (no
                     results index yet: every record gets the full check); the next time in `warm_s`
  query, compare     then `suite query` and `suite compare A A` over the same records (index present)
  ddp vs horovod     pytorch-ddp img/s / pytorch-synthetic (Horovod) img/s, same settings, 2 workers
  ddp scaling        pytorch-ddp: 2 workers / 1 worker on this machine
  sampler overhead   img/s with the telemetry sampler on / off (same case, run in turns)

    python benchmarks/harness.py [--tiny | --medium] [--rounds N] [--only NAME ...]

Every ratio runs its two sides in turns, the order flipped every round (ABBA), and prints each
round's ratio (round_ratios: the spread); the settings each side ran with are kept (`sides` in the
JSON) and must be equal.
"""

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

from suite.base import paths  # noqa: E402 (after sys.path is set)
from suite.base.errors import UsageError  # noqa: E402 (after sys.path is set)
from suite.inputs.cases import load_case, option_args  # noqa: E402 (after sys.path is set)
from suite.inputs.host_gpus import host_gpus  # noqa: E402 (after sys.path is set)
from suite.instack.arguments import OneLineParser  # noqa: E402 (after sys.path is set)
from suite.instack.cpu_binding import parse_cpu_list  # noqa: E402 (after sys.path is set)
from suite.stacks.install import ensure_installed  # noqa: E402 (after sys.path is set)
from suite.stacks.recipes import load_stack  # noqa: E402 (after sys.path is set)

# pytorch-gpt on a CPU: a model small enough for 2 cores, large enough that a step (2,048 tokens) takes
# over 0.2 s there, so that the suite's per-iteration work is weighed against real steps
GPT_CPU = {"layers": 4, "heads": 4, "width": 256, "context": 256, "vocab-size": 8192, "batch-size": 8}
SIZES = {
    "full": {"pytorch": {"batch-size": 32, "image-size": 224, "num-warmup-batches": 5, "num-batches-per-iter": 5,
                         "num-iters": 5},
             "mxnet": {"batch-size": 32, "image-size": 224, "num-warmup-batches": 5, "disp-batches": 5,
                       "num-batches": 30},
             "tf": {"batch-size": 32, "image-size": 128, "epochs": 3},
             "gpt": {**GPT_CPU, "num-warmup-batches": 2, "num-batches-per-iter": 3, "num-iters": 5}},
    # --medium: sizes where the ratios mean something on 2 cores (NOTES.md: >= 128 px, real batches),
    # the whole bench in about 20 minutes there (CONTRIBUTING.md, the bench)
    "medium": {"pytorch": {"batch-size": 16, "image-size": 128, "num-warmup-batches": 1, "num-batches-per-iter": 2,
                           "num-iters": 3},
               "mxnet": {"batch-size": 16, "image-size": 128, "num-warmup-batches": 1, "disp-batches": 2,
                         "num-batches": 7},
               "tf": {"batch-size": 16, "image-size": 128, "epochs": 2, "steps-per-epoch": 8},
               "gpt": {**GPT_CPU, "num-warmup-batches": 1, "num-batches-per-iter": 2, "num-iters": 3}},
    # --tiny: each case's [tiny] table (Case.tiny_args), the sizes the tests run
    "tiny": {key: load_case(case).spec["tiny"] for key, case in
             {"pytorch": "pytorch-synthetic", "mxnet": "mxnet-imagenet", "tf": "tf-cifar",
              "gpt": "pytorch-gpt"}.items()},
}
# --tiny: a JPEG tree of a few batches, so that an epoch over it takes seconds
TINY_JPEG_TREE = ["--classes", "2", "--train-per-class", "16", "--val-per-class", "0"]
TARGETS = {"harness_overhead.pytorch-synthetic": (">=", 0.99), "harness_overhead.pytorch-gpt": (">=", 0.99),
           "harness_overhead.jax-gpt": (">=", 0.99),
           "input_pipeline.mxnet-imagenet": (">=", 0.95),
           "input_pipeline.tf-cifar": (">=", 0.95),
           "input_pipeline.pytorch-ddp": (">=", 0.95),
           "scaling.pytorch-synthetic": (">=", 1.8), "scaling.mxnet-imagenet": (">=", 1.8),
           "startup.pytorch-synthetic": ("<", 1.0), "report_10k_records_s": ("<", 10),
           "query_10k_records_s": ("<", 2), "compare_10k_records_s": ("<", 10),
           "ddp_vs_horovod.pytorch-ddp": (">=", 0.95), "scaling.pytorch-ddp": (">=", 1.8),
           "sampler_overhead.pytorch-synthetic": (">=", 0.995), "gpu_amp.pytorch-synthetic": (">=", 0.9)}
# below 0: a measurement error, never met
NON_NEGATIVE = {"startup.pytorch-synthetic", "report_10k_records_s", "query_10k_records_s", "compare_10k_records_s"}
RECORDS = 10_000  # of the report, query and compare items
A100_AMP_IMG_S = 2470  # ResNet-50 v1.5, AMP, A100 80GB, per GPU: NVIDIA DeepLearningExamples
THREADS = ("threads_per_worker", "intra_op_threads", "omp_num_threads")  # as each case reports them


def as_args(options: dict) -> list[str]:
    return option_args(options)


def side(options: dict, reported: dict, bindings: list[dict]) -> dict:
    """What must be the same on both sides of a ratio, besides what it compares: the bench's options
    as the run took them, model, dtype, parameters, threads and cores per worker, binding policy."""
    threads = next((reported[k] for k in THREADS if reported.get(k)), None)
    return {"options": options, "model": reported.get("model") or reported.get("model_name"),
            "dtype": reported.get("dtype"), "parameters": reported.get("parameters"),
            "threads_per_worker": int(threads) if threads else None,
            "cpu_bind": sorted({b.get("policy") or "none" for b in bindings}),
            "cpus_per_worker": sorted({len(parse_cpu_list(b["cpus"])) for b in bindings if b.get("cpus")})}


def record_side(record: dict, options: dict) -> dict:
    binding = record["world"].get("binding") or {"policy": None, "ranks": []}
    return side({k: record["config"]["options"].get(k) for k in options}, record["config"]["reported_by_case"],
                [{"policy": binding["policy"], "cpus": r["cpus"]} for r in binding["ranks"]])


def abba(labels: list[str], rounds: int):
    """The order of each round: as given, then reversed, and so on, so that neither side always runs first."""
    for index in range(rounds):
        yield labels if index % 2 == 0 else labels[::-1]


def pinned(cpus: list[int] | None):
    """A subprocess start hook that restricts the process (and all it starts) to `cpus`."""
    return None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))


def first_cores(count: int) -> list[int]:
    return sorted(os.sched_getaffinity(0))[:count]


def gpu_runtime() -> str:
    """Where the GPU item's stack comes from: $BENCH_GPU_RUNTIME, else the local cuda flavour."""
    return os.environ.get("BENCH_GPU_RUNTIME") or "local"


class Bench:
    def __init__(self, size: str, rounds: int, work: Path):
        self.size, self.rounds, self.work = size, rounds, work
        self.results: dict[str, dict] = {}

    def suite_run(self, case: str, case_args: list[str], *run_args: str,
                  cpus: list[int] | None = None) -> tuple[dict, float, float]:
        """A real `python -m suite run` (what `make run` calls), on `cpus` only where given; returns its
        record, the seconds from the start of the command to the first timed step of rank 0, and to
        the launch of the job."""
        results = Path(tempfile.mkdtemp(dir=self.work))
        command = [sys.executable, "-m", "suite", "run", "--case", case, "--results-dir", str(results),
                   "--runs-dir", str(self.work / "runs"), "--data-dir", str(self.work / "data"), *run_args,
                   "--", *case_args]
        started = time.time()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, preexec_fn=pinned(cpus))
        [path] = results.glob("*.json") or [None]
        if done.returncode != 0 or path is None:
            raise RuntimeError(f"suite run of {case} failed: {(done.stdout + done.stderr)[-800:]}")
        record = json.loads(path.read_text())
        rep = record["repetitions"][0]
        return record, first_timed_step(Path(rep["run_dir"])) - started, rep["launched_at"] - started

    def stack_python(self, stack: str) -> str:
        return str(ensure_installed(load_stack(stack), log=lambda m: None).python)

    def record(self, name: str, value: float, sides: dict | None = None, **settings) -> None:
        """A figure against its target; `sides`: the settings each side of a ratio ran with (label ->
        side()), which must be equal."""
        op, target = TARGETS[name]
        met = (value >= target if op == ">=" else value < target) and (value >= 0 or name not in NON_NEGATIVE)
        self.results[name] = {"value": value, "target": f"{op} {target}", "met": met, "settings": settings,
                              "sides": sides or {}}
        print(f"{name}: {value:.3f} ({op} {target}{'' if met else ', MISSED'})  {json.dumps(settings)}", flush=True)
        if sides and len({json.dumps(s, sort_keys=True) for s in sides.values()}) > 1:
            print(f"  {name}: the sides ran with different settings: {json.dumps(sides)}", flush=True)

    def in_turns(self, runs: dict) -> tuple[dict, dict]:
        """Runs each variant (label -> a call returning (value, side)) once per round, in ABBA order;
        returns each label's values and the side it ran with."""
        values, sides = {label: [] for label in runs}, {}
        for order in abba(list(runs), self.rounds):
            for label in order:
                value, sides[label] = runs[label]()
                values[label].append(value)
        return values, sides

    def ratio(self, name: str, runs: dict, **settings) -> dict:
        """Mean of the first variant / mean of the second, run in turns; each round's ratio shows the
        spread. Further variants run in the same turns and are reported beside them. Returns the values."""
        values, sides = self.in_turns(runs)
        a, b = list(values.values())[:2]
        self.record(name, statistics.fmean(a) / statistics.fmean(b), sides=sides,
                    round_ratios=[round(x / y, 3) for x, y in zip(a, b)], **values, **settings)
        return values

    def throughput(self, case: str, options: dict, *run_args: str, flags: tuple = (), cpus: list[int] | None = None):
        """A call for ratio(): one suite run's img/s and side."""
        def run() -> tuple[float, dict]:
            record = self.suite_run(case, [*as_args(options), *flags], *run_args, cpus=cpus)[0]
            return record["metrics"]["throughput"]["mean"], record_side(record, options)
        return run

    # -- the measurements ------------------------------------------------------------------------

    def harness_overhead_pytorch(self) -> None:
        """The suite against the bare loop under the same launcher (horovodrun -np 1, as the suite
        starts one worker): the part the suite owns. The bare loop alone runs in the same turns, so
        the launcher's own share is shown beside it."""
        options = SIZES[self.size]["pytorch"]
        python = self.stack_python("pytorch-horovod")
        horovodrun = str(Path(python).parent / "horovodrun")
        bare_argv = [python, str(ROOT / "benchmarks" / "bare" / "pytorch_synthetic.py"), *as_args(options)]
        values = self.ratio("harness_overhead.pytorch-synthetic", {
            "suite_img_s": self.throughput("pytorch-synthetic", options, "--gpus-per-node", "1"),
            "bare_under_horovodrun_img_s": bare_loop([horovodrun, "-np", "1", "-H", "localhost:1", "--gloo",
                                                      "--network-interfaces", "lo", *bare_argv], options),
            "bare_img_s": bare_loop(bare_argv, options)}, **options)
        mean = {label: statistics.fmean(v) for label, v in values.items()}
        print(f"  split: bare loop alone {mean['bare_img_s']:.2f} img/s; under horovodrun "
              f"{mean['bare_under_horovodrun_img_s']:.2f} "
              f"({mean['bare_under_horovodrun_img_s'] / mean['bare_img_s']:.3f}"
              f" of alone: the launcher's share); suite {mean['suite_img_s']:.2f} "
              f"({mean['suite_img_s'] / mean['bare_img_s']:.3f} of alone)", flush=True)

    def harness_overhead_gpt(self) -> None:
        """pytorch-gpt through the suite (one worker it starts itself: --launcher ranks, no launcher
        between) against the bare loop of the same model, batch and threads, in tokens/s."""
        options = SIZES[self.size]["gpt"]
        bare_argv = [self.stack_python("pytorch"), str(ROOT / "benchmarks" / "bare" / "pytorch_gpt.py"),
                     *as_args(options)]
        values = self.ratio("harness_overhead.pytorch-gpt", {
            "suite_tokens_s": self.throughput("pytorch-gpt", options, "--gpus-per-node", "1",
                                              flags=("--launcher", "ranks", "--no-cuda")),
            "bare_tokens_s": bare_loop(bare_argv, options)}, **options)
        step_s = options["batch-size"] * options["context"] / statistics.fmean(values["bare_tokens_s"])
        self.results["harness_overhead.pytorch-gpt"]["settings"]["bare_step_s"] = round(step_s, 4)
        print(f"  step: {step_s:.3f} s of the bare loop ({options['batch-size']} x {options['context']} tokens)",
              flush=True)

    def harness_overhead_jax(self) -> None:
        """jax-gpt through the suite (one process: a mesh of one device) against the bare jitted loop of the
        same Flax model, batch and AdamW, in tokens/s."""
        options = SIZES[self.size]["gpt"]
        bare_argv = [self.stack_python("jax"), str(ROOT / "benchmarks" / "bare" / "jax_gpt.py"), *as_args(options)]
        self.ratio("harness_overhead.jax-gpt", {
            "suite_tokens_s": self.throughput("jax-gpt", options, "--gpus-per-node", "1", flags=("--no-cuda",)),
            "bare_tokens_s": bare_loop(bare_argv, options)}, **options)

    def startup_pytorch(self) -> None:
        # Only the time to the first timed step counts: one timed step is enough.
        options = {**SIZES[self.size]["pytorch"], "num-iters": 1, "num-batches-per-iter": 1}
        python = self.stack_python("pytorch-horovod")
        case_dir = ROOT / "cases" / "pytorch-synthetic"
        to_launch = []

        def via_suite() -> tuple[float, dict]:
            record, seconds, launch = self.suite_run("pytorch-synthetic", as_args(options), "--gpus-per-node", "1")
            to_launch.append(launch)
            return seconds, record_side(record, options)

        def direct() -> tuple[float, dict]:
            run_dir = Path(tempfile.mkdtemp(dir=self.work))
            env = {**os.environ, "PYTHONPATH": str(ROOT), "SUITE_RUN_DIR": str(run_dir)}
            started = time.time()
            subprocess.run([python, str(case_dir / "train.py"), *as_args(options)], env=env, check=True,
                           capture_output=True, cwd=run_dir)
            start = json.loads((run_dir / "ranks" / "rank-00000.jsonl").read_text().splitlines()[0])
            return first_timed_step(run_dir) - started, side(options, start["config"], [start["binding"]])

        values, sides = self.in_turns({"suite_s": via_suite, "direct_s": direct})
        # runner_to_launch_s: the suite's own part; the rest of suite_s is horovodrun and the case.
        self.record("startup.pytorch-synthetic",
                    statistics.median(values["suite_s"]) - statistics.median(values["direct_s"]),
                    sides=sides, **values, runner_to_launch_s=to_launch, **options)

    def synthetic_data(self, case: str, marker: str) -> None:
        """The case's generated dataset in the bench's data folder, made once."""
        if not (self.work / "data" / marker).exists():
            sizes = TINY_JPEG_TREE if self.size == "tiny" and case in {"pytorch-ddp", "mxnet-imagenet"} else []
            subprocess.run([sys.executable, "-m", "suite", "data", "--case", case, "--synthetic",
                            "--data-dir", str(self.work / "data"), "--", *sizes],
                           cwd=ROOT, check=True, capture_output=True)

    def sampler_overhead_pytorch(self) -> None:
        """img/s with the telemetry sampler on (at its default 1 s) / off, run in turns."""
        options = SIZES[self.size]["pytorch"]
        self.ratio("sampler_overhead.pytorch-synthetic", {
            "sampler_on_img_s": self.throughput("pytorch-synthetic", options, "--gpus-per-node", "1",
                                                "--telemetry-interval", "1"),
            "sampler_off_img_s": self.throughput("pytorch-synthetic", options, "--gpus-per-node", "1",
                                                 "--telemetry-interval", "0")})

    def scaling(self, name: str, case: str, options: dict, workers: tuple[list[str], list[str]]) -> None:
        """2 workers / 1 worker, each bound to its own core(s): the run of one worker gets half the
        cores the run of two gets (the whole machine), so that 2 workers have twice the hardware."""
        half = len(os.sched_getaffinity(0)) // 2
        if half < 1:
            print(f"{name}: skipped (one core: no second worker to scale to)", flush=True)
            return
        bind = ("--cpu-bind", "cores")
        self.ratio(name, {"two_workers_img_s": self.throughput(case, options, *workers[0], *bind,
                                                               cpus=first_cores(2 * half)),
                          "one_worker_img_s": self.throughput(case, options, *workers[1], *bind,
                                                              cpus=first_cores(half))},
                   cores_per_worker=half)

    def scaling_pytorch(self) -> None:
        self.scaling("scaling.pytorch-synthetic", "pytorch-synthetic", SIZES[self.size]["pytorch"],
                     (["--gpus-per-node", "2"], ["--gpus-per-node", "1"]))

    def input_pipeline_mxnet(self) -> None:
        self.synthetic_data("mxnet-imagenet", "imagenet-rec/train.rec")
        # The same last layer on both sides: the packed set's class count (--benchmark defaults to 1000).
        classes = json.loads((self.work / "data" / "imagenet-rec" / "manifest.json").read_text())["classes"]
        options = {**SIZES[self.size]["mxnet"], "kv-store": "local", "num-classes": classes}
        self.ratio("input_pipeline.mxnet-imagenet", {
            "recordio_img_s": self.throughput("mxnet-imagenet", options),
            "synthetic_img_s": self.throughput("mxnet-imagenet", options, flags=("--benchmark",))})

    def input_pipeline_tf(self) -> None:
        self.synthetic_data("tf-cifar", "cifar-10-batches-py/data_batch_1")
        options = SIZES[self.size]["tf"]
        self.ratio("input_pipeline.tf-cifar", {
            "cifar_format_img_s": self.throughput("tf-cifar", options),
            "synthetic_in_memory_img_s": self.throughput("tf-cifar", options, flags=("--synthetic-input",))})

    def input_pipeline_ddp(self) -> None:
        """pytorch-ddp on its JPEG class folders (decoded by DataLoader workers) / on a fixed batch, one
        worker; beside it, what decoding an image costs on one core against what training on it costs."""
        self.synthetic_data("pytorch-ddp", "imagefolder/train")
        cores = len(os.sched_getaffinity(0))
        loaders = max(1, cores // 2)  # on 2 cores: one loader process beside training
        # The same last layer on both sides (the folder's class count; synthetic defaults to 1000), and
        # the same steps of a run timed: the first epoch is not timed, so the synthetic side warms up
        # for one epoch's steps, then times as many steps as the timed epochs have.
        train = json.loads((self.work / "data" / "imagefolder" / "manifest.json").read_text())["splits"]["train"]
        epochs, batch = 3 if self.size == "full" else 2, SIZES[self.size]["pytorch"]["batch-size"]
        steps = train["images"] // batch
        options = {**SIZES[self.size]["pytorch"], "epochs": epochs, "workers": loaders, "num-classes": train["classes"],
                   "num-warmup-batches": steps, "num-iters": epochs - 1, "num-batches-per-iter": steps}
        one = ("--gpus-per-node", "1")
        values = self.ratio("input_pipeline.pytorch-ddp", {
            "imagefolder_img_s": self.throughput("pytorch-ddp", options, *one, flags=("--data", "imagefolder")),
            "synthetic_img_s": self.throughput("pytorch-ddp", options, *one, flags=("--data", "synthetic"))}, **options)
        decode = [self.stack_python("pytorch"), str(ROOT / "benchmarks" / "bare" / "decode_pytorch_ddp.py"),
                  str(self.work / "data" / "imagefolder" / "train"), str(options["image-size"])]
        done = subprocess.run(decode, capture_output=True, text=True, check=True)
        decode_ms = json.loads(done.stdout)["seconds_per_image"] * 1000
        step_core_ms = cores * 1000 / statistics.fmean(values["synthetic_img_s"])
        self.results["input_pipeline.pytorch-ddp"]["settings"].update(decode_ms_per_image=round(decode_ms, 3),
                                                                      training_core_ms_per_image=round(step_core_ms, 3))
        print(f"  why: decoding and cropping an image takes {decode_ms:.1f} ms of one core; training on it "
              f"{step_core_ms:.1f} ms of core time ({cores} cores): where they share the cores, real data can "
              f"reach at most {step_core_ms / (step_core_ms + decode_ms):.3f} of synthetic", flush=True)

    def scaling_mxnet(self) -> None:
        self.synthetic_data("mxnet-imagenet", "imagenet-rec/train.rec")
        loopback = ["--hostfile", "hostfiles/loopback"]
        self.scaling("scaling.mxnet-imagenet", "mxnet-imagenet", {**SIZES[self.size]["mxnet"], "kv-store": "dist_sync"},
                     (["--nodes", "2", *loopback], ["--nodes", "1", *loopback]))


    def gpu_amp_pytorch(self) -> None:
        """On a GPU machine: img/s per GPU with mixed precision and NHWC, as published figures are
        measured, ÷ the published figure for this GPU (case.toml), else NVIDIA's A100 figure. The stack
        is the local cuda flavour ($BENCH_GPU_RUNTIME names another runtime). A failed run fails the
        bench; only a machine without a GPU leaves the line out, saying so."""
        if not host_gpus():
            print("gpu_amp.pytorch-synthetic: not run (no GPU on this machine)", flush=True)
            return
        runtime = gpu_runtime()
        options = {**SIZES[self.size]["pytorch"], "batch-size": 256 if self.size == "full" else 32}
        record = self.suite_run("pytorch-synthetic", [*as_args(options), "--amp", "--channels-last"],
                                "--gpus-per-node", "1", "--runtime", runtime)[0]
        per_gpu = record["metrics"]["throughput"]["per_device"]
        published = record["metrics"].get("published")
        reference = published["published_per_device"] if published else A100_AMP_IMG_S
        source = published["source"] if published else "NVIDIA DeepLearningExamples, A100 80GB, AMP"
        self.record("gpu_amp.pytorch-synthetic", per_gpu / reference, img_s_per_gpu=per_gpu, reference=reference,
                    reference_source=source, gpu=record["config"]["reported_by_case"].get("device_name"),
                    runtime=runtime, flavour=record["provenance"].get("stack_flavour"), **options)

    def report_10k_records(self) -> None:
        """Seconds `suite report` (what `make report` calls) takes over 10,000 records, all copies of one
        record of the largest kind a run writes today, spread over 4 clusters x 5 device counts: the
        first time, when every record gets the full check (it once took 130 s, then 21.5 s over 14.8 KB
        records), and again (warm_s). Then `suite query` and `suite compare` over them."""
        sys.path.insert(0, str(ROOT / "tests"))
        from support.fixture_records import make_large_record

        template = make_large_record(Path(tempfile.mkdtemp(dir=self.work)), self.work / "runs")
        results, out = Path(tempfile.mkdtemp(dir=self.work)), Path(tempfile.mkdtemp(dir=self.work))
        size = sum(copies(template, results, RECORDS)) / RECORDS
        settings = {"records": RECORDS, "record_kb": round(size / 1000, 1),
                    "source": "tests/support/fixture_records.make_large_record"}
        seconds, cpu_s = self.suite_command("report", "--results-dir", str(results), "--out", str(out))
        warm_s = self.suite_command("report", "--results-dir", str(results), "--out", str(out))[0]
        self.record("report_10k_records_s", seconds, cpu_s=cpu_s, warm_s=round(warm_s, 3), **settings)
        seconds, cpu_s = self.suite_command("query", "--results-dir", str(results), "--format", "csv")
        self.record("query_10k_records_s", seconds, cpu_s=cpu_s, **settings)
        seconds, cpu_s = self.suite_command("compare", str(results), str(results))
        self.record("compare_10k_records_s", seconds, cpu_s=cpu_s, **settings)

    def suite_command(self, *argv: str) -> tuple[float, float]:
        """Wall-clock and CPU seconds (the latter less noisy on a shared machine) of `python -m suite ...`,
        which must succeed without skipping a file."""
        import resource

        cpu_before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "suite", *argv], cwd=ROOT, capture_output=True, text=True)
        seconds, cpu = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0 or "skipped" in done.stderr:
            raise RuntimeError(f"suite {' '.join(argv)} failed: {(done.stdout + done.stderr)[-800:]}")
        return seconds, round(cpu.ru_utime + cpu.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime, 3)

    def ddp_vs_horovod(self) -> None:
        """The same training (model, batch, image size, steps, 2 workers) with DistributedDataParallel
        and with Horovod, in turns: what the gradient exchange of each costs."""
        options = SIZES[self.size]["pytorch"]
        self.ratio("ddp_vs_horovod.pytorch-ddp", {
            "ddp_img_s": self.throughput("pytorch-ddp", options, "--gpus-per-node", "2"),
            "horovod_img_s": self.throughput("pytorch-synthetic", options, "--gpus-per-node", "2")}, **options)

    def scaling_ddp(self) -> None:
        self.scaling("scaling.pytorch-ddp", "pytorch-ddp", SIZES[self.size]["pytorch"],
                     (["--gpus-per-node", "2"], ["--gpus-per-node", "1"]))


def copies(template: dict, results: Path, count: int):
    """`count` copies of a record in `results`, each its own run on one of 4 clusters x 5 device counts,
    at its own time and throughput; yields the size of each file."""
    per_device = template["metrics"]["throughput"]["per_device"]
    for i in range(count):
        devices, cluster = 2 * 2 ** (i % 5), f"bench-{i // 5 % 4}"
        record = json.loads(json.dumps(template))
        clock = f"{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}"
        record["run_id"] = f"20260101T{clock}Z-{record['case']}-bench-{i:05d}"
        record["finished_at"] = f"2026-01-{1 + i // 86400:02d}T{clock[:2]}:{clock[2:4]}:{clock[4:]}Z"
        hosts = record["world"]["hosts"]
        record["world"].update(devices=devices, cluster=cluster, hostfile=f"hostfiles/{cluster}",
                               slots={host: devices // len(hosts) for host in hosts})
        tp = record["metrics"]["throughput"]
        tp["per_device"] = per_device * (0.9 ** (i % 5)) * (1 + (i % 7) / 100)
        tp["mean"] = tp["per_device"] * devices
        yield (results / f"{record['run_id']}.json").write_text(json.dumps(record))


def bare_loop(argv: list[str], options: dict):
    """One side of a ratio: a bare training loop (benchmarks/bare/), its throughput and settings from the
    JSON line it prints last (behind a launcher's prefix where one starts it)."""
    def run() -> tuple[float, dict]:
        out = subprocess.run(argv, capture_output=True, text=True, check=True)
        line = next(line for line in reversed(out.stdout.splitlines()) if '{"samples"' in line)
        result = json.loads(line[line.index("{"):])
        return result["throughput"], side(options, result["config"], [result["binding"]])
    return run


def first_timed_step(run_dir: Path) -> float:
    """Wall-clock start of rank 0's first timed iteration (or timed epoch: the second), from its probe file."""
    for line in (run_dir / "ranks" / "rank-00000.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "iteration" or (event["event"] == "epoch" and event["index"] > 0):
            return event["time"] - event["seconds"]
    raise RuntimeError(f"no timed iteration in {run_dir}")


MEASUREMENTS = ["harness_overhead_pytorch", "harness_overhead_gpt", "harness_overhead_jax", "startup_pytorch",
                "scaling_pytorch", "input_pipeline_mxnet", "input_pipeline_tf", "input_pipeline_ddp", "scaling_mxnet",
                "gpu_amp_pytorch", "report_10k_records", "ddp_vs_horovod", "scaling_ddp", "sampler_overhead_pytorch"]


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--tiny", action="store_true", help="tiny sizes, 2 rounds: checks that the benchmark works")
    sizes.add_argument("--medium", action="store_true",
                       help="128 px, batch 16: ratios that mean something, about 20 min on 2 cores")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds per measurement, in ABBA order (default 3; tiny 2)")
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, help="run only these measurements")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench")
    args = parser.parse_args(argv)
    size = "tiny" if args.tiny else "medium" if args.medium else "full"
    rounds = args.rounds or (2 if size == "tiny" else 3)
    try:  # the results are written once every measurement ran, maybe an hour later
        paths.refuse_unwritable(args.out, "--out")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-") as work:
        bench = Bench(size, rounds, Path(work))
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

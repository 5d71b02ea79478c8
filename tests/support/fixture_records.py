"""Records for report and compare tests, made by the real probe and record code from invented timings."""

import json
import math
from pathlib import Path

from suite.analysis.utilisation import utilisation
from suite.execution import interconnect_check
from suite.execution.request import RunRequest, recorded
from suite.inputs.cases import Case, known_cases, load_case
from suite.inputs.hostfiles import Host, World
from suite.instack.probe import Probe
from suite.records import telemetry_window
from suite.records.measure import Repetition, measure
from suite.records.write import RunContext, build_record, new_run_id, utc_now, write_record


def make_record(results: Path, runs: Path, *, case="pytorch-synthetic", cluster="cluster-a", stack=None,
                devices=1, per_device=(10.0,), repetitions=1, batch=32, epochs=None, nodes=1,
                extra_metrics=None, work=None, device=("cpu", "float32"), data=None, options=(),
                reported=None, lock="ab" * 32, finished_at=None) -> dict:
    """One record whose throughput per repetition is devices x per_device[i] img/s (approximately:
    each rank reports 3 iterations of 100 images at the matching rate). `devices` are spread evenly
    over `nodes` hosts; extra_metrics(world, run_dir) -> what goes into `metrics` beside throughput;
    work: (FLOPs per sample, measured peak FLOP/s per device, precision) the ranks report, and the
    record's utilisation made of them as a run makes it; device: (name, dtype) the case reports.
    A case measured in tokens (its case.toml's unit, e.g. pytorch-gpt) is made from its own case.toml
    and counts tokens/s; options: its command-line options beyond --batch-size; reported: what its
    ranks report in their start line beside the device (make_token_record); lock: the stack lock's sha256;
    finished_at: when the record says it finished (default: now)."""
    base = load_case(case if case in known_cases() and "unit" in load_case(case).spec else "pytorch-synthetic")
    spec = {**base.spec, "name": case, "stack": stack or base.stack}
    world = World(tuple(Host(f"node{n + 1}", devices // nodes) for n in range(nodes)), f"hostfiles/{cluster}")
    options = base.parse_options(["--batch-size", str(batch), *options])
    ctx = RunContext(new_run_id(case, nodes, devices), Case(case, base.dir, spec), options, world, "local", "local",
                     ["python", "-m", "suite", "run"], utc_now(), request=recorded(RunRequest(case=case)))
    reps = []
    for index in range(repetitions):
        rate = per_device[index % len(per_device)]
        rep_dir = runs / ctx.run_id / f"rep-{index}"
        for rank in range(devices):
            probe = Probe(rank, devices, rank, devices, run_dir=str(rep_dir),
                          samples=spec["unit"] if "unit" in spec else "images")
            name, dtype = device
            probe.start(config={"dtype": dtype, "device_type": "cpu" if name == "cpu" else "cuda", "device_name": name,
                                **({"data": data} if data else {}), **(reported or {})},
                        versions={"torch": "2.13.0"})
            if work:
                probe.work(flops_per_sample=work[0], source="fixture", precision=work[2])
                probe.measured_peak(flops_per_s=work[1], precision=work[2], matrix=4096, seconds=1.0)
            if epochs:
                for e, seconds in enumerate(epochs):
                    probe._write("epoch", index=e, images=1000 // devices, seconds=seconds,
                                 metrics={"accuracy": 0.1 * e})
            else:
                for i, jitter in enumerate((0.99, 1.0, 1.01)):
                    probe._write("iteration", index=i, images=100, seconds=100 / (rate * jitter))
            probe.end()
        rep = Repetition(index, str(rep_dir))
        measure(rep, devices)
        reps.append(rep)
    record = build_record(ctx, reps, {"stack_lock_sha256": lock}, {"launcher": "horovod"}, None)
    if finished_at:
        record["finished_at"] = finished_at
    if extra_metrics:
        record["metrics"].update(extra_metrics(world, runs / ctx.run_id))
    if work:
        record["metrics"]["utilisation"] = utilisation(record)
    write_record(record, results)
    return record


def make_token_record(results: Path, runs: Path, *, case="pytorch-gpt", parallel="ddp", compile=False,
                      context=32, batch=4, reported=None, without=(), **kwargs) -> dict:
    """A record of a token case (pytorch-gpt, jax-gpt) in tokens/s, its ranks reporting what train.py's
    start line holds (model gpt, its name, context, parallel mode; pytorch-gpt's compile and its mode,
    optimizer implementation, preset); reported: more of it; without: keys to leave out of it and of
    the record's options (a record older than those settings)."""
    said = {"model": "gpt", "model_name": "gpt2-small", "layers": 12, "heads": 12, "width": 768, "context": context,
            "batch_per_device": batch, "micro_batch": batch, "grad_accum": 1, "parallel": parallel}
    options = ["--parallel", parallel, "--context", str(context)]
    if case == "pytorch-gpt":
        said |= {"compile": compile, "compile_mode": "default" if compile else None, "optimizer": "AdamW",
                 "optimizer_impl": "foreach", "preset": None, "activation_checkpointing": False}
        options += ["--compile"] if compile else []
    said = {k: v for k, v in {**said, **(reported or {})}.items() if k not in without}
    record = make_record(results, runs, case=case, batch=batch, options=options, reported=said, **kwargs)
    if without:
        for key in without:
            record["config"]["options"].pop(key.replace("_", "-"), None)
        (results / f"{record['run_id']}.json").write_text(json.dumps(record))  # as an older run wrote it
    return record


def make_large_record(results: Path, runs: Path, **kwargs) -> dict:
    """The largest kind of record a run writes today: 2 nodes, telemetry with its series over time
    (300 samples per host) and the interconnect check's all-reduce sweep (12 sizes)."""
    kwargs = {"case": "pytorch-ddp", "stack": "pytorch", "devices": 4, "nodes": 2, "per_device": (40.0,), **kwargs}
    return make_record(results, runs, extra_metrics=lambda world, run_dir: {
        "telemetry": telemetry(world, samples=300), "interconnect": allreduce_sweep(world, run_dir / "precheck", 12)},
        **kwargs)


def telemetry(world: World, samples: int) -> dict:
    """metrics.telemetry as the real summary makes it from a CPU host's samples (8 cores, RAPL)."""
    start = {"event": "start", "interval": 1.0, "memory_total": 64 * 2**30, "gpus": "not available: no NVIDIA driver",
             "rapl": {"package-0": {"wrap_j": 262143.0}}}
    hosts = {}
    for n, host in enumerate(world.hosts):
        rows = [{"time": 1000.0 + t, "cpu": [50 + 40 * math.sin((t + c + n) / 7) for c in range(8)],
                 "mem_used": (20 + t / 100) * 2**30, "rss": 6 * 2**30, "processes": 3,
                 "rapl_j": {"package-0": 95.0 * t + 10 * math.sin(t)}} for t in range(samples)]
        cut = telemetry_window.Cut(rows, 1005.0, 1000.0 + samples - 5)
        hosts[host.name] = telemetry_window.host_summary([cut], start, images=30_000.0 * host.slots / world.devices)
    energy = sum(h["energy_j"] for h in hosts.values())
    return {"interval_s": 1.0, "hosts": hosts, "energy_j": energy, "joules_per_image": round(energy / 30_000, 4)}


def allreduce_sweep(world: World, folder: Path, sizes: int) -> dict:
    """metrics.interconnect as the real check summarizes its ranks' timings (1 MiB doubling)."""
    folder = folder / "allreduce"
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(world.devices):
        timings = [{"bytes": 2**20 * 2**i, "seconds": 30e-6 + 2**20 * 2**i / 10e9 * (1 + rank / 100)}
                   for i in range(sizes)]
        (folder / f"rank-{rank:05d}.json").write_text(json.dumps(
            {"size": world.devices, "timings": timings, "implementation": "torch.distributed gloo", "device": "cpu",
             "iters": 20}))
    return {**interconnect_check.summarize(folder, world, world.devices), "seconds": 4.2, "run_dir": str(folder.parent)}

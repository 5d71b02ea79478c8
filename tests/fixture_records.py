"""Records for report and compare tests, made by the real probe and record code from invented timings."""

from pathlib import Path

from suite.cases import Case, load_case
from suite.hostfile import Host, World
from suite.probe import Probe
from suite.measure import Repetition, measure
from suite.request import RunRequest, recorded
from suite.results import RunContext, build_record, new_run_id, utc_now, write_record


def make_record(results: Path, runs: Path, *, case="pytorch-synthetic", cluster="cluster-a", stack=None,
                devices=1, per_device=(10.0,), repetitions=1, batch=32, epochs=None) -> dict:
    """One record whose throughput per repetition is devices x per_device[i] img/s (approximately:
    each rank reports 3 iterations of 100 images at the matching rate)."""
    base = load_case("pytorch-synthetic")
    spec = {**base.spec, "name": case, "stack": stack or base.stack}
    world = World((Host("node1", devices),), f"hostfiles/{cluster}")
    options = base.parse_options(["--batch-size", str(batch)])
    ctx = RunContext(new_run_id(case, 1, devices), Case(case, base.dir, spec), options, world, "local", "local",
                     ["python", "-m", "suite", "run"], utc_now(), request=recorded(RunRequest(case=case)))
    reps = []
    for index in range(repetitions):
        rate = per_device[index % len(per_device)]
        rep_dir = runs / ctx.run_id / f"rep-{index}"
        for rank in range(devices):
            probe = Probe(rank, devices, rank, devices, run_dir=str(rep_dir))
            probe.start(config={"dtype": "float32", "device_type": "cpu"}, versions={"torch": "2.13.0"})
            if epochs:
                for e, seconds in enumerate(epochs):
                    probe._write("epoch", index=e, images=1000 // devices, seconds=seconds, metrics={"accuracy": 0.1 * e})
            else:
                for i, jitter in enumerate((0.99, 1.0, 1.01)):
                    probe._write("iteration", index=i, images=100, seconds=100 / (rate * jitter))
            probe.end()
        rep = Repetition(index, str(rep_dir))
        measure(rep, devices)
        reps.append(rep)
    record = build_record(ctx, reps, {"stack_lock_sha256": "ab" * 32}, {"launcher": "horovod"}, None)
    write_record(record, results)
    return record

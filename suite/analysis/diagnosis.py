"""What bounded a run, from what its record already holds: the verdict (compute, input, host,
communication or unknown), the figures behind it and one thing to try. Reads a record only, so old
records and records from elsewhere can be diagnosed as well (`metrics.diagnosis`, docs/record.md).

The figures, each a fraction of the timed window (None where the run could not say):
  device_busy      GPUs: NVML utilisation over the timed window of the GPUs the ranks trained on
                   (telemetry); CPUs: CPU time of the ranks' processes / the cores they may use
  gpu_pass_busy    GPUs: the GPU's own time for a step's forward and backward pass (CUDA events, the
                   launches queued ahead: cases/_shared/gpu_busy.py) / the timed step's wall time
  data_wait        the time a step waited for its next batch (cases that read data time it)
  exchange         what the gradient exchange adds to a step, where the case measures it: 1 - a
                   step without the exchange (DDP's no_sync, no optimizer update) / a timed step, the
                   median over passes interleaved with the timed iterations
  allreduce        one all-reduce of the model's gradient (a parameter server's push and pull), as the
                   interconnect check measured it, over the time of a step: an upper bound on what the
                   exchange costs (DDP and Horovod overlap part of it with the backward pass)
  thread_busy      the training thread's CPU time (on GPUs the thread that launches the kernels)
and, for the hint, the host CPU time per step in milliseconds, and the most processes of the run per core a
host had (above 1 they took turns on the cores: the verdict stands, and the hint is to stop that first).

On a GPU the training thread is busy whatever bounds the step (it spins while it waits for the GPU),
so the verdict reads the GPU's side: where the GPU works at least BUSY of the step, compute; where it
works less and waits neither for data nor for the exchange, the host, which launches the GPU's work,
is the bound. The thresholds are set against one H100 (NOTES.md; tests/unit/test_diagnosis_thresholds.py):
AMP + channels-last at batch 256, 92% busy: compute; fp32 at batch 32, 62-71%: host; 160 px batch 64
AMP, 30% busy with about 30 ms of CPU per step: host.
"""

from bisect import bisect_left

from suite.analysis import utilisation
from suite.instack.cpu_binding import parse_cpu_list

INPUT_BOUND = 0.2  # waiting for data this share of the step: the input pipeline bounds the run
COMMUNICATION_BOUND = 0.3  # one gradient all-reduce takes this share of a step
BUSY = {"cuda": 0.8, "cpu": 0.75}  # the device works this share of the window: compute-bound
# What to try, per verdict, in words that hold for every framework; a case's [hints] table (case.toml)
# replaces any of them with its own options.
SHARED_CORES_HINT = ("a core or more for each process: fewer processes per node (GPUS_PER_NODE, the hostfile's slots) "
                     "or more cores for the job (SLURM's --cpus-per-task)")
HINTS = {
    "input": "more loader processes or threads, data on faster storage, or decoding on the GPU (DALI)",
    "communication": "a larger batch per device, gradients exchanged in 16 bits, or fewer, larger all-reduce "
                     "messages",
    "host": "a larger batch per GPU, or a compiled step (fewer, fused kernel launches; CUDA graphs)",
    "compute-cuda": "mixed precision (bf16/fp16) if not on; else the GPU is the limit: compare with the "
                    "published figure",
    "compute-cpu": "more cores per worker, or the memory allocator settings of docs/telemetry.md (CPU nodes)",
    "unknown-cuda": "--precheck measures the all-reduce, telemetry (on by default) the GPUs' utilisation",
    "unknown-cpu": "--precheck measures the all-reduce: cores idle without a wait for data are waiting for the "
                   "exchange or left idle by the framework's threads (small operations; a larger batch per worker)",
}
DEVICE_KEYED = ("compute", "unknown")  # verdicts whose hint depends on the device: HINTS' "<verdict>-<device>"


def diagnose(record: dict, case_hints: dict | None = None) -> dict:
    """metrics.diagnosis of a record (its repetitions, telemetry, interconnect check, world); case_hints:
    the case's [hints] table (verdict -> what to try with its options)."""
    device = record["world"].get("device_type") or "cpu"
    per_host = cores_by_host(record) or {}
    figures = {
        "device_busy": device_busy(record, device),
        "gpu_pass_busy": gpu_pass_busy(record) if device == "cuda" else None,
        "data_wait": profile_mean(record, "data_wait_share"),
        "exchange": exchange_share(record),
        "allreduce": allreduce_share(record),
        "thread_busy": profile_mean(record, "thread_busy"),
        "host_cpu_ms_per_step": host_cpu_per_step(record),
        "processes_per_core": processes_per_core(per_host),
    }
    verdict, why = classify(figures, device, record["world"].get("devices") or 1, checked_exchange(record))
    if device == "cuda" and (unmatched := unmatched_gpus(record)):
        why += f"; no NVML utilisation of the run's GPUs: {unmatched}"
    key = f"{verdict}-{device if device == 'cuda' else 'cpu'}" if verdict in DEVICE_KEYED else verdict
    hint = (case_hints or {}).get(key) or HINTS[key]
    if shared := shared_cores(per_host):
        why += f"; {shared}: they took turns on the cores, and the figures include that"
        hint = SHARED_CORES_HINT
    return {"verdict": verdict, "device": device, "figures": figures, "why": why, "hint": hint}


def classify(f: dict, device: str, devices: int = 1, checked: str = "all-reduce of the gradient") \
        -> tuple[str, str]:
    """The verdict and why; `checked`: what the interconnect check timed (the `allreduce` figure), in words."""
    wait = f["data_wait"]
    busy, measured_as = gpu_side(f) if device == "cuda" else (f["device_busy"], "")
    if wait is not None and wait >= INPUT_BOUND:
        return "input", f"each step waited {pct(wait)} of its time for the next batch"
    if f["exchange"] is not None and f["exchange"] >= COMMUNICATION_BOUND:
        return "communication", (f"the gradient exchange took {pct(f['exchange'])} of a step (the same step "
                                 "without it was that much shorter)")
    if f["exchange"] is None and f["allreduce"] is not None and f["allreduce"] >= COMMUNICATION_BOUND:
        return "communication", f"one {checked} takes {pct(f['allreduce'])} of a step's time"
    if busy is not None and busy >= BUSY.get(device, BUSY["cpu"]):
        return "compute", (f"the GPUs worked {pct(busy)} of the step{measured_as}" if device == "cuda"
                           else f"the workers kept their cores busy {pct(busy)} of the window")
    exchange_known = devices == 1 or f["exchange"] is not None or f["allreduce"] is not None
    if device == "cuda" and busy is not None and exchange_known:
        cpu = f" ({f['host_cpu_ms_per_step']:.0f} ms of CPU per step)" if f["host_cpu_ms_per_step"] else ""
        return "host", (f"the GPUs worked {pct(busy)} of the step{measured_as} and waited the rest, neither for "
                        f"data nor for the exchange: the host launches their work too slowly{cpu}")
    named = {"device_busy": "GPUs busy" if device == "cuda" else "cores busy"}
    known = ", ".join(f"{named.get(name, name.replace('_', ' '))} {pct(value)}" for name, value in f.items()
                      if value is not None and name not in ("host_cpu_ms_per_step", "processes_per_core"))
    return "unknown", f"no figure points one way ({known or 'nothing measured'})"


def gpu_side(f: dict) -> tuple[float | None, str]:
    """How much of the step the GPUs worked: the GPU's own time for a step's pass where the case timed
    it, else NVML's utilisation; and a phrase saying which."""
    if f.get("gpu_pass_busy") is not None:
        return f["gpu_pass_busy"], " (its forward and backward pass, timed on the GPU)"
    return f["device_busy"], " (NVML utilisation)" if f["device_busy"] is not None else ""


def pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


def profiles(record: dict) -> list[dict]:
    return [r["profile"] for r in record.get("repetitions", []) if r.get("status") == "ok" and r.get("profile")]


def profile_mean(record: dict, key: str) -> float | None:
    values = [p[key] for p in profiles(record) if p.get(key) is not None]
    return round(sum(values) / len(values), 4) if values else None


def device_busy(record: dict, device: str) -> float | None:
    if device == "cuda":
        return gpu_busy(record)
    cores_per_rank = profile_mean(record, "cores_per_rank")
    cores = usable_cores(record)
    if cores_per_rank is None or not cores:
        return None
    return round(min(1.0, cores_per_rank * record["world"]["devices"] / cores), 4)


def run_gpus(record: dict) -> list[dict]:
    """The sampled GPUs the run trained on: those its ranks named (by UUID or bus id, `used`). Where they
    could not be matched (unmatched_gpus), none: another job's busy GPU must not stand in for the run's."""
    hosts = ((record["metrics"].get("telemetry") or {}).get("hosts")) or {}
    found = []
    for host in record["world"]["slots"]:
        gpus = hosts.get(host, {}).get("gpus") if isinstance(hosts.get(host), dict) else None
        if isinstance(gpus, list):
            found += [g for g in gpus if g.get("used")]
    return found


def unmatched_gpus(record: dict) -> str | None:
    """Why the telemetry's GPUs cannot be matched to the run's, where they cannot: the ranks named none of
    theirs (gpus_unmatched), or an older record made before the ranks named them (no `used`)."""
    hosts = ((record["metrics"].get("telemetry") or {}).get("hosts")) or {}
    for host, summary in hosts.items():
        gpus = summary.get("gpus") if isinstance(summary, dict) else None
        if not isinstance(gpus, list) or not gpus:
            continue
        if summary.get("gpus_unmatched"):
            return f"GPUs unmatched on {host}: {summary['gpus_unmatched']}"
        if not any("used" in g for g in gpus):
            return f"GPUs unmatched on {host}: the record does not say which sampled GPUs the ranks trained on"
    return None


def gpu_busy(record: dict) -> float | None:
    """NVML utilisation of the GPUs the run trained on, over the timed window (None where they cannot be
    matched to the telemetry: unmatched_gpus says why)."""
    utils = [(g.get("util_pct") or {}).get("mean") for g in run_gpus(record)]
    if not utils or None in utils:
        return None
    return round(sum(utils) / len(utils) / 100, 4)


def gpu_pass_busy(record: dict) -> float | None:
    """The GPU's own seconds for a step's forward and backward pass (as the case timed them) over the
    timed step's wall seconds."""
    passes = [r["results"]["gpu_pass_s"] for r in record.get("repetitions", [])
              if r.get("status") == "ok" and (r.get("results") or {}).get("gpu_pass_s")]
    seconds = step_seconds(record)
    if not passes or not seconds:
        return None
    return round(min(1.0, sum(passes) / len(passes) / seconds), 4)


def usable_cores(record: dict) -> int | None:
    """The cores the ranks may use, per host (their affinity, read back by the probe), summed."""
    per_host = cores_by_host(record) or {}
    return sum(len(cpus) for _, cpus in per_host.values()) or None


def cores_by_host(record: dict) -> dict[str, tuple[int, set[int]]] | None:
    """{host: (the run's processes there, the cores they may use)}, from their affinity as the probe read it back;
    None where a process's is not known."""
    per_host: dict[str, tuple[int, set[int]]] = {}
    for rank in (record["world"].get("binding") or {}).get("ranks", []):
        if not rank.get("cpus"):
            return None
        count, cpus = per_host.get(rank.get("host", ""), (0, set()))
        per_host[rank.get("host", "")] = (count + 1, cpus | set(parse_cpu_list(rank["cpus"])))
    return per_host


def processes_per_core(per_host: dict[str, tuple[int, set[int]]]) -> float | None:
    """The most processes of the run per core any host of `per_host` (cores_by_host) had."""
    ratios = [count / len(cpus) for count, cpus in per_host.values() if cpus]
    return round(max(ratios), 4) if ratios else None


def shared_cores(per_host: dict[str, tuple[int, set[int]]]) -> str | None:
    """'3 processes on 2 cores of n1' for each host of `per_host` (cores_by_host) where the run's processes
    outnumbered their cores."""
    shared = [f"{count} processes on {len(cpus)} core{'s' if len(cpus) > 1 else ''} of {host}"
              for host, (count, cpus) in sorted(per_host.items()) if count > len(cpus)]
    return ", ".join(shared) or None


def steps(record: dict) -> float | None:
    """Timed steps: the samples timed over a step's samples, both in the unit the throughput counts (tokens
    for a token case, whose global_batch counts sequences)."""
    per_step = utilisation.samples_per_step(record)
    samples = record["metrics"].get("timed_images")
    return samples / per_step if per_step and samples else None


def step_seconds(record: dict) -> float | None:
    count = steps(record)
    return record["metrics"]["timed_seconds"] / count if count else None


def host_cpu_per_step(record: dict) -> float | None:
    """CPU milliseconds the ranks' processes spent per step, per rank (loader processes not counted)."""
    cores, seconds = profile_mean(record, "cores_per_rank"), step_seconds(record)
    return round(cores * seconds * 1000, 2) if cores is not None and seconds else None


def exchange_share(record: dict) -> float | None:
    """The case's own figure where it made one (pytorch-ddp: 1 - the median over passes without the exchange,
    each against a step of the iteration before it); in older records, 1 - (a step without the exchange, timed
    once) / (the window's mean step)."""
    results = [r.get("results") or {} for r in record.get("repetitions", []) if r.get("status") == "ok"]
    shares = [r["exchange_share"] for r in results if r.get("exchange_share") is not None]
    if shares:
        return round(sum(shares) / len(shares), 4)
    local = [r["step_without_exchange_s"] for r in results if r.get("step_without_exchange_s")]
    seconds = step_seconds(record)
    if not local or not seconds:
        return None
    return round(min(1.0, max(0.0, 1 - sum(local) / len(local) / seconds)), 4)


def allreduce_share(record: dict) -> float | None:
    """The interconnect check's time for one all-reduce of the gradient (fp32, interpolated between
    the measured sizes) over a step's time."""
    check = record["metrics"].get("interconnect") or {}
    sizes = [s for s in check.get("sizes") or [] if s.get("bytes") and s.get("latency_us") is not None]
    parameters, seconds = record["config"].get("parameters"), step_seconds(record)
    if check.get("status") != "ok" or not sizes or not parameters or not seconds:
        return None
    return round(min(1.0, allreduce_seconds(sizes, parameters * 4) / seconds), 4)


def checked_exchange(record: dict) -> str:
    """What the interconnect check timed, in words: an all-reduce, or a parameter server's push and pull."""
    if (record["metrics"].get("interconnect") or {}).get("exchange") == "parameter-server":
        return "push and pull of the gradient through the parameter servers"
    return "all-reduce of the gradient"


def allreduce_seconds(sizes: list[dict], nbytes: float) -> float:
    points = sorted((s["bytes"], s["latency_us"] / 1e6) for s in sizes)
    at = bisect_left([b for b, _ in points], nbytes)
    if at == 0:
        return points[0][1]
    if at == len(points):  # beyond the sweep: the largest size's bandwidth
        size, seconds = points[-1]
        return seconds * nbytes / size
    (b0, t0), (b1, t1) = points[at - 1], points[at]
    return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)


def summary_line(diagnosis: dict) -> str:
    return f"{diagnosis['verdict']}-bound: {diagnosis['why']}; try: {diagnosis['hint']}" \
        if diagnosis["verdict"] != "unknown" else f"bound unknown: {diagnosis['why']}; {diagnosis['hint']}"

"""The samples of the telemetry samplers (suite/instack/telemetry_sampler.py, one per host) read over the
probe's timed window into the record's `metrics.telemetry` (warmup excluded). Samples are read as a
piecewise-linear curve, so a window shorter than the sampling interval still gets a value as long as samples lie
on both sides of it."""

import json
import re
from bisect import bisect_left
from pathlib import Path

from suite.records.measure import read_rank_events

GIB = 2**30
SERIES_POINTS = 300  # per host in the record, for the report's plot over time
GPU_MEANS = {"util": "util_pct", "mem_used": "memory_used_gib", "power_w": "power_w", "temp_c": "temperature_c",
             "sm_mhz": "sm_clock_mhz", "pcie_tx_kbs": "pcie_tx_kb_s", "pcie_rx_kbs": "pcie_rx_kb_s"}


def sample_file(rep_dir, host: str) -> Path:
    return Path(rep_dir).resolve() / "telemetry" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', host)}.jsonl"


def timed_window(run_dir) -> tuple[float, float] | None:
    """Wall-clock start of the first and end of the last timed unit over all ranks (the probe's lines:
    iterations, or epochs after the first)."""
    spans = []
    for events in read_rank_events(Path(run_dir)).values():
        units = [e for e in events if e["event"] == "iteration"] or \
                [e for e in events if e["event"] == "epoch" and e["index"] > 0]
        if units:
            spans.append((units[0]["time"] - units[0]["seconds"], units[-1]["time"]))
    return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None


def read_samples(path: Path) -> tuple[dict, list[dict]]:
    """(start line, samples); lines cut short by a kill are skipped."""
    start, samples = {}, []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return start, samples
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "start":
            start = event
        elif "time" in event:
            samples.append(event)
    return start, samples


class Cut:
    """One host's samples of one repetition read over the window [t0, t1] as a piecewise-linear curve."""

    def __init__(self, samples: list[dict], t0: float, t1: float):
        self.samples, self.t0, self.t1 = samples, t0, t1
        self.ts = [s["time"] for s in samples]

    @property
    def covered(self) -> bool:
        return len(self.ts) >= 2 and self.ts[0] <= self.t0 and self.ts[-1] >= self.t1

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    @property
    def inside(self) -> list[dict]:
        """The samples taken within the window, its ends included."""
        return [s for s, t in zip(self.samples, self.ts) if self.t0 <= t <= self.t1]

    def _at(self, vs: list[float], t: float) -> float:
        i = min(max(bisect_left(self.ts, t), 1), len(self.ts) - 1)
        (ta, va), (tb, vb) = (self.ts[i - 1], vs[i - 1]), (self.ts[i], vs[i])
        return va if tb == ta else va + (vb - va) * (t - ta) / (tb - ta)

    def _points(self, get) -> list[tuple[float, float]] | None:
        try:
            vs = [get(s) for s in self.samples]
        except (KeyError, IndexError, TypeError):
            return None
        if any(v is None for v in vs):
            return None
        inside = [(t, v) for t, v in zip(self.ts, vs) if self.t0 < t < self.t1]
        return [(self.t0, self._at(vs, self.t0)), *inside, (self.t1, self._at(vs, self.t1))]

    def integral_max(self, get) -> tuple[float, float] | None:
        """∫ value dt over the window and the largest value in it; None where a sample lacks it."""
        points = self._points(get)
        if points is None:
            return None
        area = sum((tb - ta) * (va + vb) / 2 for (ta, va), (tb, vb) in zip(points, points[1:]))
        return area, max(v for _, v in points)

    def delta(self, get, wrap: float | None = None) -> float | None:
        """Growth of a counter over the window (energy), unwrapping counters that wrap."""
        try:
            raw = [get(s) for s in self.samples]
        except (KeyError, IndexError, TypeError):
            return None
        if any(v is None for v in raw):
            return None
        unwrapped, offset = [raw[0]], 0.0
        for before, now in zip(raw, raw[1:]):
            offset += wrap if wrap and now < before else 0.0
            unwrapped.append(now + offset)
        return self._at(unwrapped, self.t1) - self._at(unwrapped, self.t0)


class Totals:
    """Means (time-weighted), maxima and sums of several repetitions' windows."""

    def __init__(self):
        self.area, self.seconds, self.peak, self.sums = {}, {}, {}, {}

    def add_level(self, name: str, cut: Cut, get) -> None:
        found = cut.integral_max(get)
        if found is None:
            self.area[name] = None
            return
        if self.area.get(name, 0.0) is not None:
            self.area[name] = self.area.get(name, 0.0) + found[0]
            self.seconds[name] = self.seconds.get(name, 0.0) + cut.seconds
            self.peak[name] = max(self.peak.get(name, found[1]), found[1])

    def add_sum(self, name: str, value: float | None) -> None:
        if name not in self.sums or self.sums[name] is not None:
            self.sums[name] = None if value is None else self.sums.get(name, 0.0) + value

    def mean(self, name: str, digits: int = 2) -> float | None:
        area = self.area.get(name)
        return round(area / self.seconds[name], digits) if area is not None and self.seconds.get(name) else None

    def mean_max(self, name: str, digits: int = 2) -> dict | None:
        mean = self.mean(name, digits)
        return None if mean is None else {"mean": mean, "max": round(self.peak[name], digits)}


def _cpu(s: dict) -> float:
    return sum(s["cpu"]) / len(s["cpu"])


def _gpu_get(i: int, key: str, scale: float = 1.0):
    return lambda s: None if s["gpus"][i][key] is None else s["gpus"][i][key] / scale


def _add_cut(totals: Totals, cut: Cut, start: dict) -> None:
    totals.add_level("cpu", cut, _cpu)
    for core in range(len(cut.samples[0]["cpu"])):
        totals.add_level(f"core{core}", cut, lambda s, c=core: s["cpu"][c])
    totals.add_level("mem", cut, lambda s: s["mem_used"] / GIB)
    totals.add_level("rss", cut, lambda s: s["rss"] / GIB)
    for i, _ in enumerate(start.get("gpus") if isinstance(start.get("gpus"), list) else []):
        for key in GPU_MEANS:
            totals.add_level(f"gpu{i}.{key}", cut, _gpu_get(i, key, GIB if key == "mem_used" else 1.0))
        energy = cut.delta(_gpu_get(i, "energy_j"))
        if energy is None and (power := cut.integral_max(_gpu_get(i, "power_w"))):
            energy = power[0]  # no energy counter on this GPU: power integrated over the window
        totals.add_sum(f"gpu{i}.energy", energy)
        for way in ("tx", "rx"):
            totals.add_sum(f"gpu{i}.nvlink_{way}", cut.delta(_gpu_get(i, f"nvlink_{way}_kib")))
            totals.add_sum(f"gpu{i}.pcie_{way}", cut.delta(_gpu_get(i, f"pcie_{way}_bytes", 1024.0)))
    for zone, facts in (start.get("rapl") if isinstance(start.get("rapl"), dict) else {}).items():
        totals.add_sum(f"rapl.{zone}", cut.delta(lambda s, z=zone: s["rapl_j"][z], facts["wrap_j"]))
    totals.add_sum("seconds", cut.seconds)


def _gpus(totals: Totals, start: dict):
    if not isinstance(start.get("gpus"), list):
        return start.get("gpus") or "not available: the sampler wrote no start line"
    gpus = []
    for i, gpu in enumerate(start["gpus"]):
        entry = {"index": i, "name": gpu.get("name"), "uuid": gpu.get("uuid"), "bus_id": gpu.get("bus_id")}
        for key, label in GPU_MEANS.items():
            entry[label] = totals.mean_max(f"gpu{i}.{key}") if key in ("util", "mem_used", "temp_c") \
                else totals.mean(f"gpu{i}.{key}")
        entry["energy_j"] = _round(totals.sums.get(f"gpu{i}.energy"))
        for way in ("tx", "rx"):
            entry[f"nvlink_{way}_kib_s"] = _per_second(totals, f"gpu{i}.nvlink_{way}")
            if (counted := _per_second(totals, f"gpu{i}.pcie_{way}")) is not None:
                entry[f"pcie_{way}_kb_s"] = counted  # from the counters (KiB, as NVML's throughput query says KB)
        gpus.append(entry)
    return gpus


def _per_second(totals: Totals, name: str) -> float | None:
    moved = totals.sums.get(name)
    return _round(moved / totals.sums["seconds"]) if moved is not None else None


def _cpu_package(totals: Totals, start: dict):
    zones = start.get("rapl")
    if not isinstance(zones, dict):
        return zones or "not available: the sampler wrote no start line"
    energy = [totals.sums.get(f"rapl.{zone}") for zone in zones]
    if any(e is None for e in energy):
        return "not available: RAPL counters missing from samples"
    return {"energy_j": _round(sum(energy)), "power_w_mean": _round(sum(energy) / totals.sums["seconds"]),
            "zones": sorted(zones)}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def host_summary(cuts: list[Cut], start: dict, images: float) -> dict:
    """One host's figures over the timed windows of its repetitions; energy = GPUs + CPU packages
    where their figures are known, J/img over the images of this host's devices."""
    totals = Totals()
    for cut in cuts:
        _add_cut(totals, cut, start)
    gpus, package = _gpus(totals, start), _cpu_package(totals, start)
    parts = {"gpu": [g["energy_j"] for g in gpus] if isinstance(gpus, list) else [],
             "cpu-package": [package["energy_j"]] if isinstance(package, dict) else []}
    known = {k: v for k, v in parts.items() if v and all(e is not None for e in v)}
    energy = sum(sum(v) for v in known.values()) if known else None
    cores = len(cuts[0].samples[0]["cpu"])
    return {
        "samples": sum(len(c.inside) for c in cuts), "interval_s": start.get("interval"),
        "timed_seconds": _round(totals.sums["seconds"]),
        "cpu_util_pct": totals.mean_max("cpu"),
        "cpu_util_per_core_pct": [totals.mean(f"core{i}", 1) for i in range(cores)],
        "memory_used_gib": totals.mean_max("mem"), "memory_total_gib": _round(start.get("memory_total", 0) / GIB, 2),
        "run_rss_gib": totals.mean_max("rss"), "run_processes": max(s["processes"] for c in cuts for s in c.samples),
        "sample_ms": _sample_ms(cuts),
        "gpus": gpus, "cpu_package": package,
        "energy_j": _round(energy), "energy_sources": sorted(known),
        "power_w_mean": _round(energy / totals.sums["seconds"]) if energy is not None else None,
        "joules_per_image": _round(energy / images, 4) if energy is not None and images else None,
        "series": series(cuts[0], start),
    }


def _sample_ms(cuts: list[Cut]) -> dict | None:
    """Milliseconds the sampler took per sample (NVML's queries among them) over the windows: its own cost
    beside the run, the first suspect where steps stall about once an interval."""
    took = [s["took_s"] * 1e3 for c in cuts for s in c.inside if "took_s" in s]
    return {"mean": round(sum(took) / len(took), 2), "max": round(max(took), 2)} if took else None


def series(cut: Cut, start: dict) -> dict:
    """Utilisation, memory and power over the whole repetition (t = 0 at the start of the timed window),
    at most SERIES_POINTS points."""
    step = max(1, len(cut.samples) // SERIES_POINTS)
    picked = cut.samples[::step]
    out = {"t": [round(s["time"] - cut.t0, 2) for s in picked], "window_s": [0.0, round(cut.seconds, 3)],
           "cpu_util_pct": [round(_cpu(s), 1) for s in picked],
           "memory_used_gib": [round(s["mem_used"] / GIB, 3) for s in picked]}
    if all(s.get("gpus") for s in picked):
        out["gpu_util_pct"] = [_mean([g["util"] for g in s["gpus"]]) for s in picked]
        out["gpu_power_w"] = [_sum([g["power_w"] for g in s["gpus"]]) for s in picked]
    if isinstance(start.get("rapl"), dict) and all(s.get("rapl_j") for s in cut.samples) and len(cut.samples) > 1:
        wraps = {zone: facts["wrap_j"] for zone, facts in start["rapl"].items()}
        rates = [None] + [_rate(a, b, wraps) for a, b in zip(cut.samples, cut.samples[1:])]
        out["cpu_package_power_w"] = rates[::step]
    return out


def _mean(values):
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 1) if known else None


def _sum(values):
    known = [v for v in values if v is not None]
    return round(sum(known), 1) if known else None


def _rate(a: dict, b: dict, wraps: dict) -> float | None:
    """CPU package power between two samples, from the RAPL counters (each may have wrapped once)."""
    joules = sum(b["rapl_j"][z] - a["rapl_j"][z] + (wraps[z] if b["rapl_j"][z] < a["rapl_j"][z] else 0.0)
                 for z in wraps)
    return round(joules / (b["time"] - a["time"]), 1) if b["time"] > a["time"] else None


UNMATCHED = ("the ranks named no UUID or PCI bus id of their GPUs: the sampled GPUs cannot be told from other "
             "jobs' GPUs of the node")


def mark_used(hosts: dict, starts: list[dict]) -> None:
    """Each sampled GPU says whether a rank of the run trained on it (`used`), where the ranks named
    their GPUs (suite.instack.probe.visible_gpu): by UUID, or by PCI bus id on the same host (for
    where NVML or nvidia-smi gave no UUID); the diagnosis reads those only. Where the ranks named
    neither, a host that sampled GPUs says so (`gpus_unmatched`), and none of its GPUs counts as the run's."""
    named = [(s.get("host"), g) for s in starts for g in s.get("gpus") or []]
    uuids = {g["uuid"] for _, g in named if g.get("uuid")}
    if not uuids and not any(g.get("bus_id") for _, g in named):
        for summary in hosts.values():
            if isinstance(summary, dict) and summary.get("gpus"):
                summary["gpus_unmatched"] = UNMATCHED
        return
    for host, summary in hosts.items():
        buses = {bus_key(g["bus_id"]) for on, g in named if g.get("bus_id") and same_host(on, host, len(hosts))}
        for gpu in summary.get("gpus") if isinstance(summary, dict) and isinstance(summary.get("gpus"), list) else []:
            gpu["used"] = gpu.get("uuid") in uuids or bool(gpu.get("bus_id")) and bus_key(gpu["bus_id"]) in buses


def bus_key(bus_id: str) -> str:
    """A PCI bus id as NVML and nvidia-smi write it, in either form ('00000000:19:00.0', '0000:19:00.0')."""
    parts = bus_id.strip().lower().split(":")
    domain = int(parts[0], 16) if len(parts) == 3 else 0
    return f"{domain:x}:{':'.join(parts[-2:])}"


def same_host(rank_host: str | None, world_host: str, world_hosts: int) -> bool:
    """A rank's host name (its own) names this host of the world (the hostfile's name): the only one,
    the same name, or the same up to the domain (not an address)."""
    if world_hosts == 1 or rank_host == world_host:
        return True
    return bool(rank_host) and not world_host.replace(".", "").isdigit() \
        and rank_host.split(".")[0] == world_host.split(".")[0]


def summarize(reps, world, interval: float | None) -> dict | None:
    """metrics.telemetry: per host of the world, over the timed windows of the repetitions that ran;
    a host without usable samples says why."""
    if not interval:
        return None
    ok = [(rep, window) for rep in reps if rep.status == "ok" and (window := timed_window(rep.run_dir))]
    hosts = {}
    for host in world.hosts:
        start, cuts = {}, []
        for rep, window in ok:
            rep_start, samples = read_samples(sample_file(rep.run_dir, host.name))
            start = start or rep_start
            cut = Cut(samples, *window)
            if cut.covered:
                cuts.append(cut)
        images = sum(rep.images for rep, _ in ok) * host.slots / world.devices
        why = ("no samples on both sides of the timed window (see this host's telemetry log)" if ok
               else "no repetition finished its timed window")
        hosts[host.name] = host_summary(cuts, start, images) if cuts else f"not available: {why}"
    mark_used(hosts, [s for rep, _ in ok for s in rep.starts])
    energies = [h.get("energy_j") if isinstance(h, dict) else None for h in hosts.values()]
    total = sum(energies) if energies and all(e is not None for e in energies) else None
    images = sum(rep.images for rep, _ in ok)
    return {"interval_s": interval, "hosts": hosts, "energy_j": _round(total),
            "joules_per_image": _round(total / images, 4) if total is not None and images else None}

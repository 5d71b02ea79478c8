"""A repetition's rank files (the probe's JSON lines) -> what it measured: images, seconds and
throughput per timed unit (iteration, or epoch after the first), warmup, results, and the mean and
95% confidence interval over repetitions or iterations."""

import json
from dataclasses import dataclass, field
from pathlib import Path

from suite.base.errors import RunFailed
from suite.base.stats import mean_ci95


@dataclass
class Repetition:
    """What one launch measured: throughput samples (img/s, all devices) per timed iteration."""

    index: int
    run_dir: str
    status: str = "ok"
    reason: str | None = None
    samples: list[float] = field(default_factory=list)
    images: int = 0
    seconds: float = 0.0
    warmup: dict = field(default_factory=dict)
    starts: list[dict] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)
    results: dict = field(default_factory=dict)
    exit_codes: dict = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    launched_at: float | None = None
    profile: dict = field(default_factory=dict)  # where the ranks' time went (time_profile)
    ran_on: dict = field(default_factory=dict)  # process name -> hosts it announced (suite.instack.probe.announce)
    work: dict | None = None  # rank 0's `work` line: FLOPs per sample and where they come from
    peaks: list[dict] = field(default_factory=list)  # each rank's measured matmul peak (`peak` lines)
    ended_at: float | None = None  # time.time() when the runner saw the launch end
    timeline: dict = field(default_factory=dict)  # where the launch's wall time went (timeline)

    def summary(self) -> dict:
        mean = sum(self.samples) / len(self.samples) if self.samples else None
        return {"index": self.index, "status": self.status, "reason": self.reason, "run_dir": self.run_dir,
                "throughput": mean, "images": self.images, "timed_seconds": self.seconds,
                "warmup": self.warmup, "epochs": self.epochs, "results": self.results,
                "exit_codes": self.exit_codes, "command": self.command, "processes": self.processes,
                "launched_at": self.launched_at, "ended_at": self.ended_at, "timeline": self.timeline,
                "profile": self.profile, "ran_on": self.ran_on,
                **({"work": self.work, "peaks": self.peaks} if self.work or self.peaks else {}),
                "cpus": [s.get("binding", {}).get("cpus") for s in self.starts]}  # per rank, read back by the probe


def read_rank_events(run_dir: Path) -> dict[int, list[dict]]:
    events: dict[int, list[dict]] = {}
    for path in sorted((run_dir / "ranks").glob("rank-*.jsonl")):
        lines = path.read_text().splitlines()
        # A rank killed mid-write may leave a partial last line; everything before it is sound.
        parsed = []
        for line in lines:
            try:
                parsed.append(json.loads(line))
            except ValueError:
                break
        events[int(path.stem.split("-")[1])] = parsed
    return events


def starts_of(events: dict[int, list[dict]]) -> list[dict]:
    """The start lines of the ranks that wrote one (a failed repetition's too: what they ran on)."""
    return [e for r in sorted(events) for e in events[r][:1] if e.get("event") == "start"]


def measure(rep: Repetition, expected_ranks: int, events: dict[int, list[dict]] | None = None) -> None:
    """Fill the repetition from its rank files' events (read_rank_events; read here where not given). Per
    timed unit (iteration or epoch): images of all ranks / the slowest rank's time. The first epoch of an
    epoch-based case is its warmup."""
    events = read_rank_events(Path(rep.run_dir)) if events is None else events
    if sorted(events) != list(range(expected_ranks)):
        raise RunFailed(f"expected probe files of ranks 0..{expected_ranks - 1}, found ranks {sorted(events)}")
    if any(not ev or ev[-1]["event"] != "end" for ev in events.values()):
        unfinished = [r for r, ev in events.items() if not ev or ev[-1]["event"] != "end"]
        raise RunFailed(f"rank(s) {unfinished} did not finish (no end line in their probe files)")
    rep.starts = [next(e for e in events[r] if e["event"] == "start") for r in sorted(events)]
    rep.results = {k: v for r in sorted(events) for e in events[r] if e["event"] == "result"
                   for k, v in e["metrics"].items()}
    rep.work = next((_fields(e) for r in sorted(events) for e in events[r] if e["event"] == "work"), None)
    rep.peaks = [_fields(e) for r in sorted(events) for e in events[r] if e["event"] == "peak"]
    units = _aligned(events, "iteration")
    epochs = _aligned(events, "epoch")
    if epochs:
        rep.epochs = [_combine(unit, with_metrics=True) for unit in epochs]
        rep.warmup = {k: rep.epochs[0][k] for k in ("images", "seconds")}
        units = epochs[1:]
        if not units:
            raise RunFailed("an epoch-based case needs at least 2 epochs: the first is not timed")
    else:
        warmups = [e for ev in events.values() for e in ev if e["event"] == "warmup"]
        if warmups:
            rep.warmup = {"images": sum(e["images"] for e in warmups), "seconds": max(e["seconds"] for e in warmups)}
    if not units:
        raise RunFailed("the case reported no timed iterations or epochs")
    for unit in units:
        combined = _combine(unit)
        rep.samples.append(combined["throughput"])
        rep.images += combined["images"]
        rep.seconds += combined["seconds"]
    rep.profile = time_profile(units)


# a launch's phases (timeline), each between two of its marks
PHASES = {"to_start_line_s": ("launched", "start"), "to_warmup_s": ("start", "warmup_began"),
          "warmup_s": ("warmup_began", "warmup_ended"), "window_s": ("window_began", "window_ended"),
          "after_window_s": ("window_ended", "end"), "to_exit_s": ("end", "exited"), "total_s": ("launched", "exited")}


def timeline(events: list[dict], launched_at: float | None, ended_at: float | None) -> dict:
    """Where a launch's wall time went, in seconds, from rank 0's probe lines (their times, rank 0's clock)
    and the runner's launch and end (its clock): to the start line (launcher, interpreter, imports, the
    framework and its device, the model), from there to the warmup (compilation, the work's count, the
    matmul peak, waiting for the other ranks; compile_s and matmul_peak_s as the case timed them), the
    warmup, the timed window (first timed unit's start to the last's end), after it (the device's step
    time, memory, the end line) and to the exit. A phase the lines do not bound (a run that stopped early,
    clocks of two hosts apart) is left out."""
    def first(kind: str) -> dict | None:
        return next((e for e in events if e.get("event") == kind), None)

    def at(line: dict | None, before: bool = False) -> float | None:
        """A line's time (its unit's start where `before`: the time less the seconds it timed)."""
        when, took = (line or {}).get("time"), (line or {}).get("seconds", 0) if before else 0
        return when - took if isinstance(when, (int, float)) and isinstance(took, (int, float)) else None

    warmup = first("warmup")
    units = [e for e in events if e.get("event") == "iteration"]
    epochs = [e for e in events if e.get("event") == "epoch"]
    if epochs:  # the first epoch is the warmup
        warmup, units = epochs[0], epochs[1:]
    last = units[-1] if units else None
    marks = {"launched": launched_at, "start": at(first("start")), "end": at(first("end")), "exited": ended_at,
             "warmup_began": at(warmup, before=True), "warmup_ended": at(warmup),
             "window_began": at(units[0] if units else None, before=True), "window_ended": at(last)}
    found = {}
    for name, (a, b) in PHASES.items():
        if marks[a] is not None and marks[b] is not None and marks[b] >= marks[a]:
            found[name] = round(marks[b] - marks[a], 3)
    results = {k: v for e in events if e.get("event") == "result" for k, v in (e.get("metrics") or {}).items()}
    peak = first("peak")
    for name, value in (("compile_s", results.get("compile_seconds")), ("matmul_peak_s", (peak or {}).get("seconds"))):
        if isinstance(value, (int, float)):
            found[name] = round(value, 3)
    return found


def _fields(line: dict) -> dict:
    """A probe line without its event name and time (its rank kept)."""
    return {k: v for k, v in line.items() if k not in ("event", "time")}


def time_profile(units: list[tuple[dict, ...]]) -> dict:
    """Where each rank's time went over the timed units, as shares of its own timed seconds, averaged
    over the ranks: waiting for data, its training thread busy, its process's CPU time (in cores);
    None where the probe lines do not say (older records, cases that do not time their input)."""
    per_rank = list(zip(*units))

    def share(key: str) -> float | None:
        if any(key not in e for events in per_rank for e in events):
            return None
        shares = [sum(e[key] for e in events) / sum(e["seconds"] for e in events) for events in per_rank]
        return round(sum(shares) / len(shares), 4)

    return {"data_wait_share": share("data_wait_s"), "thread_busy": share("thread_s"), "cores_per_rank": share("cpu_s")}


def _aligned(events: dict[int, list[dict]], kind: str) -> list[tuple[dict, ...]]:
    per_rank = [[e for e in events[r] if e["event"] == kind] for r in sorted(events)]
    counts = {len(units) for units in per_rank}
    if len(counts) != 1:
        raise RunFailed(f"ranks reported different numbers of {kind}s: {[len(u) for u in per_rank]}")
    return list(zip(*per_rank))


def _combine(unit: tuple[dict, ...], with_metrics: bool = False) -> dict:
    images = sum(e["images"] for e in unit)
    seconds = max(e["seconds"] for e in unit)
    combined = {"index": unit[0]["index"], "images": images, "seconds": seconds, "throughput": images / seconds}
    if with_metrics:
        combined["metrics"] = unit[0].get("metrics", {})
    return combined


def throughput_metrics(reps: list[Repetition], devices: int, unit: str = "img/s") -> dict:
    """Mean ± 95% CI: over repetition means when there are several, else over iteration samples; `unit`
    says what they count (the case's samples: img/s, tokens/s)."""
    measured = [r for r in reps if r.status == "ok" and r.samples]
    if not measured:
        return {"unit": unit, "mean": None, "per_device": None, "ci95": None, "ci95_basis": None,
                "samples": [], "repetitions": [], "n": 0}
    rep_means = [sum(r.samples) / len(r.samples) for r in measured]
    samples = [s for r in measured for s in r.samples]
    basis = rep_means if len(rep_means) > 1 else samples
    mean, ci = mean_ci95(basis)
    return {
        "unit": unit,
        "mean": mean,
        "per_device": mean / devices,
        "ci95": ci,
        "ci95_basis": "repetitions" if len(rep_means) > 1 else "iterations",
        "n": len(basis),
        "samples": samples,
        "repetitions": rep_means,
    }

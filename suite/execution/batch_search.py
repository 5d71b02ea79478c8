"""`--batch-size max`: the largest batch per device that trains, found by short trial runs of the case before
the measurement. The batch doubles from the one the run would otherwise use (halves where that does not fit), then
bisects between the largest that trained and the smallest that did not. A trial that runs out of memory (the
framework's allocator error, or a rank the kernel killed) bounds the search and is said, never a crash; so does one
cut by its time limit. On CPUs, where nothing raises an out-of-memory error before the host swaps or kills, a
trial is not started where the trials so far predict more memory per rank than the host has available.
The case names its batch option and the options that make a trial short in its case.toml ([batch_search])."""

import re
import resource
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from suite.base.errors import RunFailed, UsageError
from suite.execution.plugins import Scheduler
from suite.inputs.hostfiles import World
from suite.instack.case_options import value_given, with_option, without_option

MAX = "max"
CEILING = 1 << 16  # a batch no device trains: the search's last resort where nothing else bounds it
HOST_SHARE = 0.8  # of the memory a host has available, what the ranks on it may be predicted to take
MEMORY_AVAILABLE = ("sh", "-c", "grep '^MemAvailable:' /proc/meminfo")
# What frameworks say when an allocation fails: PyTorch (CUDA and CPU), XLA, Python, C++, MXNet, TensorFlow, and
# jaxlib's CPU kernels (YNNPACK: "allocate of <8> failed.", before an INTERNAL error that does not say why).
OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError|RESOURCE_EXHAUSTED|can't allocate memory|"
                           r"Cannot allocate memory|\bMemoryError\b|std::bad_alloc|OOM when allocating|"
                           r"failed to allocate|allocate of <\d+> failed", re.IGNORECASE)
LOG_LINES_READ = 400  # of each process's log, from its end
MEASUREMENT_RETRIES = 3  # smaller batches measured where the one found runs out of memory with the run's steps
# (where memory differs from run to run, as JAX's on a CPU with its asynchronous dispatch: --cpu-dispatch)
TRIAL_TIMEOUT_S = 600.0  # a trial's time limit (the case's, where shorter): a batch slower than this bounds the search


@dataclass(frozen=True)
class Asked:
    """A run that asked for `--batch-size max`: the option given `max`, the case's batch option the search sets
    (mxnet-imagenet's is --batch-per-device), where the search starts and the options that make a trial short."""

    given: str
    option: str
    start: int
    trial_args: tuple[str, ...]

    def args_at(self, case_args: list[str], batch: int) -> list[str]:
        """The case arguments with the batch option at `batch` (and `max` taken out)."""
        return with_option(without_option(case_args, self.given), self.option, batch)


@dataclass
class Trial:
    """One batch tried: whether it trained and, if not, why (memory, time, host memory predicted)."""

    batch: int
    fits: bool
    why: str
    run_dir: str | None = None  # None: not started (predicted not to fit, or past the ceiling)
    peak_memory_bytes: int | None = None
    seconds: float | None = None


@dataclass
class Search:
    """The trials of one run point, kept for its record even where the search failed."""

    asked: Asked
    trials: list[Trial] = field(default_factory=list)
    found: int | None = None
    seconds: float = 0.0
    retries: int = 0

    def as_record(self) -> dict:
        bound = min((t for t in self.trials if not t.fits and t.batch > (self.found or 0)),
                    key=lambda t: t.batch, default=None)
        return {"option": self.asked.option, "asked": MAX, "found": self.found, "start": self.asked.start,
                "bound": None if bound is None else {"batch": bound.batch, "why": bound.why},
                "trials": [asdict(t) for t in self.trials], "seconds": round(self.seconds, 1)}

    def trial_at(self, batch: int) -> Trial:
        return next(t for t in reversed(self.trials) if t.batch == batch)

    def smaller_after(self, rep) -> int | None:
        """Where the measurement at the batch found ran out of memory (a trial is shorter than the run: at the
        very edge, more steps can take more), the next smaller batch to measure, the failed measurement kept
        as a trial; None where it did not fail for memory, or nothing smaller is left to try."""
        if rep.status == "ok" or not self.found or self.found <= 1 or self.retries >= MEASUREMENT_RETRIES:
            return None
        if (why := memory_reason(rep, Path(rep.run_dir))) is None:
            return None
        self.trials.append(Trial(self.found, False, why.replace("out of memory", "out of memory in the measurement",
                                                                1), rep.run_dir))
        self.found, self.retries = self.found - 1, self.retries + 1
        return self.found


def asked(case, case_args: list[str]) -> Asked | None:
    """The search a run asks for (--batch-size, or the case's batch option, given as `max`: the last value given
    counts), or None; a UsageError where the case has no [batch_search] table to search with."""
    table = case.spec.get("batch_search")
    option = (table or {}).get("option", "batch-size")
    given = next((o for o in dict.fromkeys(("batch-size", option)) if value_given(case_args, o) == MAX), None)
    if given is None:
        return None
    if table is None:
        raise UsageError(f"case {case.name} cannot search its batch (--{given} max): its case.toml has no "
                         "[batch_search] table naming the options of a short trial run")
    start = case.parse_options(without_option(without_option(case_args, given, which=is_max), option,
                                              which=is_max)).get(option)
    trial = [f"--{name}" if value is True else f"--{name}={value}" for name, value in table.get("trial", {}).items()]
    return Asked(given, option, start if isinstance(start, int) and start >= 1 else 1, tuple(trial))


def is_max(value) -> bool:
    return value == MAX


def host_bytes_per_rank(scheduler: Scheduler, world: World, cluster) -> int | None:
    """The memory the ranks of a CPU run may take each: HOST_SHARE of the least a host has available over its
    ranks; None where no host says."""
    hosts = {host.name: host.slots for host in world.hosts}
    outputs = scheduler.run_on_hosts(list(hosts), MEMORY_AVAILABLE, cluster)
    shares = []
    for host, out in outputs.items():
        if out and (match := re.search(r"MemAvailable:\s+(\d+)\s*kB", out)):
            shares.append(int(int(match.group(1)) * 1024 * HOST_SHARE / max(hosts[host], 1)))
    return min(shares) if shares else None


def predicted_bytes(trials: list[Trial], batch: int) -> int | None:
    """A rank's memory at `batch` from the trials that trained: the line through the two largest batches
    measured (memory grows with the batch by its activations), proportional from one; None without any."""
    measured = sorted({t.batch: t.peak_memory_bytes for t in trials if t.fits and t.peak_memory_bytes}.items())
    if not measured:
        return None
    (b2, m2) = measured[-1]
    if len(measured) == 1:
        return int(m2 * batch / b2)
    (b1, m1) = measured[-2]
    return int(m2 + max(m2 - m1, 0) / (b2 - b1) * (batch - b2))


def outcome(rep, batch: int, run_dir: Path) -> tuple[bool, str]:
    """Whether a trial trained, else why not: ('memory' and 'time' bound the search; anything else is an error
    of the case and raises RunFailed)."""
    if rep.status == "ok":
        return True, "trained"
    reason = rep.reason or "failed"
    if why := memory_reason(rep, run_dir):
        return False, why
    if "time limit" in reason or "stall limit" in reason:
        return False, f"too slow for the trial's time limit: {reason}"
    raise RunFailed(f"--batch-size max: the trial at batch {batch} failed, not for memory: {reason}")


def memory_reason(rep, run_dir: Path) -> str | None:
    """'out of memory: ...' where a failed launch's logs say an allocation failed (a line near the end of a log,
    or the failed process's first error, which the repetition's reason quotes however much the process wrote
    after it) or a rank was SIGKILLed."""
    if line := memory_line(run_dir) or (rep.reason if OUT_OF_MEMORY.search(rep.reason or "") else None):
        return f"out of memory: {line[:200]}"
    if any(code == -signal.SIGKILL for code in rep.exit_codes.values() if code is not None):
        return ("out of memory: a process was killed (SIGKILL, the kernel's out-of-memory killer?): "
                f"{rep.reason or 'failed'}")
    return None


def memory_line(run_dir: Path) -> str | None:
    """The first line of the trial's process logs that says an allocation failed, or None."""
    for log in sorted((run_dir / "logs").glob("*.log")):
        try:
            lines = log.read_text(errors="replace").splitlines()[-LOG_LINES_READ:]
        except OSError:
            continue
        if found := next((line.strip() for line in lines if OUT_OF_MEMORY.search(line)), None):
            return found[:200]
    return None


def run_search(search: Search, launch, folder: Path, host_limit: int | None, log) -> int:
    """The largest batch that trains (search.found), by launch(batch, run_dir) -> Repetition for each trial."""
    started = time.monotonic()

    def attempt(batch: int) -> bool:
        search.trials.append(tried(search, batch, launch, folder, host_limit, log))
        search.seconds = time.monotonic() - started
        return search.trials[-1].fits

    fits, fails = None, None
    batch = search.asked.start
    while fails is None:
        if attempt(batch):
            fits, batch = batch, batch * 2
        else:
            fails = batch
    while fits is None:
        batch = fails // 2
        if batch < 1:
            raise RunFailed(f"--batch-size max: not even batch 1 trains: {search.trials[-1].why}")
        if attempt(batch):
            fits = batch
        else:
            fails = batch
    while fails - fits > 1:
        middle = (fits + fails) // 2
        if attempt(middle):
            fits = middle
        else:
            fails = middle
    search.found = fits
    log(f"batch search: {search.asked.option} {fits}, the largest that trained ({fails}: "
        f"{search.trial_at(fails).why}); {len(search.trials)} trial(s) in {search.seconds:.0f} s")
    return fits


def tried(search: Search, batch: int, launch, folder: Path, host_limit: int | None, log) -> Trial:
    if batch > CEILING:
        return Trial(batch, False, f"past the search's ceiling of {CEILING}")
    predicted = predicted_bytes(search.trials, batch) if host_limit else None
    if predicted and predicted > host_limit:
        return Trial(batch, False, f"not started: the trials predict {predicted / 2**30:.2f} GiB a rank, more than "
                                   f"the {host_limit / 2**30:.2f} GiB a rank may take of the host's available memory")
    run_dir = folder / f"batch-{batch}"
    log(f"batch search: trying {search.asked.option} {batch}")
    began, waited_for = time.monotonic(), largest_child_bytes()
    rep = launch(batch, run_dir)
    fits, why = outcome(rep, batch, run_dir)
    peaks = [m for m in rep.results.get("peak_memory_bytes") or [] if isinstance(m, int)]
    if not peaks and largest_child_bytes() > waited_for:  # a case that reports none: its largest process, if here
        peaks = [largest_child_bytes()]
    return Trial(batch, fits, why, str(run_dir), max(peaks) if peaks else None, round(time.monotonic() - began, 1))


def largest_child_bytes() -> int:
    """The peak resident set of the largest process this runner (or a process it started) has waited for: a
    trial's ranks on this host where the case measures no memory of its own (on other hosts, nothing). It only
    grows, so a trial's figure is known where it raised it: the doubling's trials, each larger than the last."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


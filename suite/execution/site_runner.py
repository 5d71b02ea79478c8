"""Running a site check (`suite check`, make check-site): each path of suite/execution/site_paths.py in turn
through the normal runner in a subprocess of its own, with a time limit, so that a failure stays contained;
its outcome judged from the record it wrote (on GPU nodes: trained on their GPUs, and they were busy), and
the table written beside the records (suite/analysis/site_check.py)."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from suite.analysis import site_check
from suite.analysis.diagnosis import gpu_busy, unmatched_gpus
from suite.analysis.site_check import FAILED, OK, UNAVAILABLE, PathResult, SiteCheck
from suite.base import paths
from suite.execution import plugins
from suite.execution.clusters import Cluster, load_cluster
from suite.execution.site_paths import (
    PROFILES_SITE_ENV,
    Availability,
    SiteEnv,
    SitePath,
    narrowed,
    node_counts,
    runtimes_for,
    site_paths,
)
from suite.inputs.cases import known_cases, load_case
from suite.inputs.host_gpus import host_gpus, pick_flavour
from suite.records.read import new_records, record_files
from suite.records.write import utc_now

PATH_TIMEOUT_S = 1800  # one path, its stack's first install included
LAUNCH_TIMEOUT_S, LAUNCH_STALL_S = 900, 300  # the runner's own limits of a tiny launch (TIMEOUT, STALL)
GRACE_S = 90  # after the limit: the runner's own interruption (SIGTERM) ends its job and writes the record
IDLE_BUSY = 0.05  # below this NVML utilisation over the timed window, the run's GPUs did not train


def runner_argv(path: SitePath, cluster: Cluster | None, results: Path, runs: Path,
                site: SiteEnv = PROFILES_SITE_ENV) -> list[str]:
    return [sys.executable, "-m", "suite", "run", "--case", path.case.name, "--nodes", str(path.nodes),
            "--gpus-per-node", str(path.per_node), "--runtime", path.runtime,
            *(site.options() if path.runtime == "modules" else []),
            *(["--cluster", cluster.given_as] if cluster else []), "--timeout", str(LAUNCH_TIMEOUT_S),
            "--stall", str(LAUNCH_STALL_S), "--results-dir", str(results), "--runs-dir", str(runs),
            "--", *path.tiny_args()]


def why_failed(returncode: int, output: str, record: dict | None) -> str:
    """The run's one-line error: its record's reason, else the runner's error line, else its last line."""
    if record and record.get("reason"):
        return record["reason"]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if line.startswith(("error:", "FAILED:"))), None)
    return said or (f"exit {returncode}: {lines[-1]}" if lines else f"exit {returncode} with no output")


def node_gpus(record: dict) -> dict[str, int]:
    """GPUs per node of the run, as its ranks reported their hosts (provenance.host_info); the launch host
    stands in only where no rank reported, and is not a node of the run."""
    return {host: len(info.get("gpus") or []) for host, info in record["provenance"]["host_info"].items()
            if host != "launch-host" and isinstance(info, dict)}


def gpu_problem(record: dict) -> str | None:
    """On GPU nodes a path must have trained on their GPUs: device in the record, NCCL where the case
    reports a torch.distributed backend, GPU telemetry from every host, MLLOG lines of the ranks, and GPUs
    that were busy over the timed window."""
    with_gpus = {host: n for host, n in node_gpus(record).items() if n}
    if not with_gpus:
        return None
    device = record["world"].get("device_type")
    if device not in ("cuda", "gpu"):
        return f"trained on {device} although {', '.join(f'{h} has {n}' for h, n in with_gpus.items())} GPU(s)"
    backend = record["config"].get("reported_by_case", {}).get("backend")
    if backend not in (None, "nccl"):
        return f"torch.distributed backend {backend} on GPUs (NCCL expected)"
    for host, facts in ((record["metrics"].get("telemetry") or {}).get("hosts") or {}).items():
        found = facts.get("gpus") if isinstance(facts, dict) else facts
        if not (isinstance(found, list) and found):
            return f"no GPU telemetry from {host}: {found}"
    for rep in record["repetitions"]:
        if rep.get("run_dir") and not list(Path(rep["run_dir"]).glob("ranks/*.mllog")):
            return f"no MLLOG lines of the ranks under {rep['run_dir']}/ranks"
    return idle_problem(record)


def idle_problem(record: dict) -> str | None:
    """Whether the GPUs the ranks trained on were busy: where they cannot be told apart from the node's
    others, or their utilisation was not sampled, that is unknown, and no pass."""
    busy = gpu_busy(record)
    if busy is None:
        why = unmatched_gpus(record) or "no utilisation of the run's GPUs in its telemetry"
        return f"{why}: whether the run's GPUs trained is unknown"
    if busy < IDLE_BUSY:
        return f"the run's GPUs were idle: {100 * busy:.1f}% busy over the timed window (NVML)"
    return None


def run_path(path: SitePath, cluster: Cluster | None, folder: Path, timeout_s: float,
             site: SiteEnv = PROFILES_SITE_ENV) -> tuple[PathResult, bool]:
    """One path through the normal runner, in a session of its own, its output shown live; at the limit
    SIGTERM (the runner ends its job and writes a failed record), killed after a grace. Also says whether
    Ctrl-C came meanwhile (the runner got it, and the check goes no further)."""
    results, runs = folder / "results", folder / "runs"
    before = record_files(results)
    argv = runner_argv(path, cluster, results, runs, site)
    print(f"\n== check: {path.named()} on {path.nodes} node(s) x {path.per_node}: {' '.join(argv[2:])}", flush=True)
    started = time.monotonic()
    runner = subprocess.Popen(argv, cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", start_new_session=True)
    output, limit, interrupted = follow(runner, timeout_s)
    seconds = time.monotonic() - started
    written = new_records(results, before)
    record = json.loads(written[-1].read_text()) if written else None
    where = str(written[-1]) if written else None
    if limit or interrupted:
        said = f"{limit or 'interrupted (SIGINT) while it ran'}; {why_failed(runner.returncode, output, record)}"
        return path.result(FAILED, said, seconds, where), interrupted
    if runner.returncode == 0 and record and record["status"] == "ok":
        problem = gpu_problem(record)
        return path.result(FAILED if problem else OK, problem or "", seconds, where), False
    return path.result(FAILED, why_failed(runner.returncode, output, record), seconds, where), False


def follow(runner: subprocess.Popen, timeout_s: float) -> tuple[str, str | None, bool]:
    """The runner's output (echoed as it comes), which limit ended it where it overran, and whether Ctrl-C
    came: passed on to the runner once (it has a session of its own), which then ends its job."""
    kept: list[str] = []
    deadline, overran, interrupted = time.monotonic() + timeout_s, None, False

    def pump():
        for line in runner.stdout:
            kept.append(line)
            sys.stdout.write(f"   | {line}")
            sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while runner.poll() is None:
        try:
            time.sleep(0.2)
            if overran is None and time.monotonic() > deadline:
                overran = f"no end within the check's limit of {timeout_s:.0f} s"
                stop(runner)
        except KeyboardInterrupt:
            if not interrupted:  # once: the runner is ending its job
                interrupted = True
                runner.send_signal(signal.SIGINT)
    reader.join(timeout=5)
    return "".join(kept), overran, interrupted


def stop(runner: subprocess.Popen) -> None:
    """SIGTERM: the runner's interruption path; SIGKILL of its group when it does not end in GRACE_S."""
    runner.send_signal(signal.SIGTERM)
    try:
        runner.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(runner.pid, signal.SIGKILL)


def new_check_id(cluster: str) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{re.sub(r'[^A-Za-z0-9_.-]', '-', cluster)}-check"


def run_paths(found: list[SitePath], check: SiteCheck, available: Availability, cluster: Cluster | None,
              folder: Path, timeout_s: float) -> bool:
    """Each path in turn, its row added to the check; False where Ctrl-C ended the check."""
    try:
        for path in found:
            if problem := available.problem(path):
                check.paths.append(path.result(UNAVAILABLE, problem))
                continue
            result, interrupted = run_path(path, cluster, folder, timeout_s, available.site)
            check.paths.append(result)
            if interrupted:
                return False
    except KeyboardInterrupt:  # while a path's availability was looked at
        return False
    return True


def check_site(cluster_name: str | None, only: list[str] | None, results_dir: Path, runs_dir: Path,
               timeout_s: float = PATH_TIMEOUT_S, site: SiteEnv = PROFILES_SITE_ENV) -> int:
    """Every path the profile (or this host) offers, each in turn; the table printed and written; the exit
    status of suite/analysis/site_check.py (130 where Ctrl-C ended it)."""
    cluster = load_cluster(cluster_name) if cluster_name else None
    scheduler = plugins.load("schedulers", cluster.scheduler if cluster else "local")
    gpus = host_gpus()
    found = narrowed(site_paths(cluster, [load_case(n) for n in known_cases()], runtimes_for(cluster),
                                node_counts(scheduler), gpus), only)
    check = SiteCheck(new_check_id(cluster.name if cluster else "localhost"), cluster.name if cluster else "localhost",
                      scheduler.name, socket.gethostname(), utc_now(), gpus, " ".join(only) if only else None)
    folder = Path(runs_dir).resolve() / check.check_id
    available = Availability(cluster, scheduler, pick_flavour(None, gpus), site)
    started = time.monotonic()
    check.interrupted = not run_paths(found, check, available, cluster, folder, timeout_s)
    check.seconds = round(time.monotonic() - started, 1)
    written = site_check.write_check(check, results_dir)
    print(f"\n{site_check.format_table(check)}\n\n{site_check.summary_line(check)}\ntable: {written}")
    return site_check.exit_status(check)

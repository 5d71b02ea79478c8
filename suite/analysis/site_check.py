"""`suite check`'s table: one row per path a site offers (case, runtime, launcher, nodes, devices) with
its outcome (ok, failed, or not available here with why), written as JSON beside the result records
(<results>/../site-checks/<check id>.json) and shown by the report on a page of its own. Plain data:
running the paths is suite/execution/site_runner.py's."""

import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from suite.base.jsonfile import write_json_atomic

OK = "ok"
FAILED = "failed"
UNAVAILABLE = "not available here"
OUTCOMES = (OK, FAILED, UNAVAILABLE)
FOLDER = "site-checks"  # beside the results folder, as sweeps/ is
WHY_CHARS = 300
# exit statuses beside 0 (every path that ran passed) and 1 (one that was available failed)
EXIT_NOTHING_CHECKED = 3  # no path was available here: automation must not read that as a pass
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT) or SIGTERM ended the check, as a shell reports a SIGINT


@dataclass(frozen=True)
class PathResult:
    """One path and how it went; `why` is one line (empty for ok), `seconds` None where nothing ran."""

    case: str
    runtime: str
    launcher: str
    nodes: int
    devices: int  # in all, over the nodes
    outcome: str
    why: str = ""
    seconds: float | None = None
    record: str | None = None  # the run's result record, where it wrote one

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")


@dataclass
class SiteCheck:
    """A whole check: where it ran, and its paths in the order they ran."""

    check_id: str
    cluster: str
    scheduler: str
    host: str
    started_at: str
    gpus: int = 0
    only: str | None = None
    seconds: float = 0.0
    paths: list[PathResult] = field(default_factory=list)
    interrupted: bool = False  # the paths after the last row did not run


def one_line(text: str) -> str:
    """The why of a row: one line, at most WHY_CHARS characters."""
    joined = " ".join(text.split())
    return joined if len(joined) <= WHY_CHARS else joined[:WHY_CHARS - 3] + "..."


def exit_status(check: SiteCheck) -> int:
    """EXIT_INTERRUPTED where the check was cut short; 1 when a path that was available failed; EXIT_NOTHING_CHECKED
    when no path ran (a path not available here is no pass, and no failure); else 0."""
    if check.interrupted:
        return EXIT_INTERRUPTED
    if any(p.outcome == FAILED for p in check.paths):
        return 1
    return 0 if any(p.outcome == OK for p in check.paths) else EXIT_NOTHING_CHECKED


def counts(check: SiteCheck) -> dict[str, int]:
    return {outcome: sum(p.outcome == outcome for p in check.paths) for outcome in OUTCOMES}


def summary_line(check: SiteCheck) -> str:
    found = counts(check)
    ran = "" if found[OK] + found[FAILED] else "; no path ran here, so nothing of this site was checked"
    cut = "; interrupted: the paths after the last row did not run" if check.interrupted else ""
    return (f"site check {check.check_id} ({check.cluster}, scheduler {check.scheduler}): {found[OK]} ok, "
            f"{found[FAILED]} failed, {found[UNAVAILABLE]} not available here, in {check.seconds:.0f} s{ran}{cut}")


COLUMNS = ("case", "runtime", "launcher", "nodes", "devices", "outcome", "seconds", "why")


def cells(p: PathResult) -> list[str]:
    return [p.case, p.runtime, p.launcher, str(p.nodes), str(p.devices), p.outcome,
            "-" if p.seconds is None else f"{p.seconds:.0f}", p.why or "-"]


def format_table(check: SiteCheck) -> str:
    """The table as text, columns aligned (the why last, as long as it is)."""
    rows = [list(COLUMNS), *(cells(p) for p in check.paths)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    lines = ["  ".join(c.rjust(w) if COLUMNS[i] in ("nodes", "devices", "seconds") else c.ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths))) + "  " + r[-1] for r in rows]
    return "\n".join(lines)


def to_json(check: SiteCheck) -> dict:
    return asdict(check)


def from_json(data: dict) -> SiteCheck:
    return SiteCheck(**{**data, "paths": [PathResult(**p) for p in data["paths"]]})


def folder_of(results_dir: Path) -> Path:
    return Path(results_dir).parent / FOLDER


def write_check(check: SiteCheck, results_dir: Path) -> Path:
    path = folder_of(results_dir) / f"{check.check_id}.json"
    write_json_atomic(path, to_json(check))
    return path


def load_checks(results_dir: Path, warn=print) -> list[SiteCheck]:
    """Every check beside the results, oldest first; files that are not a check are skipped with a warning."""
    found = []
    for path in sorted(folder_of(results_dir).glob("*.json")):
        try:
            found.append(from_json(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            warn(f"warning: {path} is not a site check, skipped ({type(exc).__name__}: {exc})")
    return sorted(found, key=lambda c: (c.started_at, c.check_id))


def latest_per_cluster(checks: list[SiteCheck]) -> list[SiteCheck]:
    """The latest whole check of each cluster (a check narrowed with --only does not replace a whole one),
    else its latest narrowed one."""
    chosen: dict[str, SiteCheck] = {}
    for check in checks:  # oldest first: later ones win
        kept = chosen.get(check.cluster)
        if kept is None or not check.only or kept.only:
            chosen[check.cluster] = check
    return [chosen[name] for name in sorted(chosen)]


OUTCOME_STYLE = {OK: "background:#dfd", FAILED: "background:#fdd", UNAVAILABLE: "color:#777"}


def report_body(results_dir: Path, warn=print) -> str:
    """The report's page of site checks: the latest check of each cluster as a table."""
    checks = latest_per_cluster(load_checks(results_dir, warn))
    if not checks:
        return ("<p>No site check yet (<code>make check-site [CLUSTER=name]</code> runs every path a cluster "
                "offers at tiny sizes).</p>")
    parts = []
    for check in checks:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
        body = "".join(f'<tr style="{OUTCOME_STYLE[p.outcome]}">'
                       + "".join(f"<td>{html.escape(c)}</td>" for c in cells(p)) + "</tr>"
                       for p in check.paths)
        narrowed = f" (only {html.escape(check.only)})" if check.only else ""
        parts.append(f"<h2>{html.escape(check.cluster)}{narrowed}</h2><p>{html.escape(summary_line(check))}; on "
                     f"{html.escape(check.host)} at {html.escape(check.started_at)}, {check.gpus} GPU(s) there.</p>"
                     f"<table><tr>{head}</tr>{body}</table>")
    return "".join(parts)

"""`suite compare A B`: throughput of B against A, per case x cluster x stack x device count.

A side is a record file, a folder of records, or a folder with a selection of its records after `?`
in the fields of `suite query` (read from the folder's results index, suite/records/index.py):
  reports/results?case=pytorch-ddp&cluster=jsc&stack=pytorch&fingerprint=ab12&devices=8,16&since=2026-11-01
--case, --cluster and --since narrow both sides further. When a configuration has several records on a
side, the latest counts. Verdicts:
  faster / slower     the difference is beyond --tolerance and beyond noise
  same                within the tolerance, or not distinguishable from noise
  not comparable      model, image size, batch, dtype, data or stack lock (a site's environment) differ
  only in A / only in B
Below the table, a line for each row whose two records' systems differ (suite/records/system_description.py),
and one where the settings a site makes beside the system differ (settings_line).
Beyond noise: where both sides have >= 2 repetitions, Welch's t-test on the repetition means gives
p < 0.05; otherwise the two 95% confidence intervals do not overlap (a side without an interval
counts as exact). Exit status 1 when any configuration is slower.
"""

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from suite.analysis.systems import described
from suite.analysis.what_ran import unit_of
from suite.base.errors import UsageError
from suite.base.stats import fmt_number
from suite.records.index import Selection, devices_list
from suite.records.read import Point, first_host_info, latest, load_points
from suite.records.system_description import system_differences


@dataclass
class Row:
    key: tuple
    a: Point | None
    b: Point | None
    diff_pct: float | None = None
    p_value: float | None = None
    verdict: str = ""
    note: str = ""


SIDE_FIELDS = ("case", "cluster", "stack", "fingerprint", "devices", "since", "until")
NEWEST_PER = ("case_name", "cluster", "stack", "devices")  # the index's columns of _latest's key


def select(source: str, case: str | None, cluster: str | None, since: str | None, warn=print) -> list[Point]:
    """The records of a side that count: of a folder only the latest per configuration, chosen by the
    index (of 10,000 records, a few dozen are read)."""
    path, chosen = side(source)
    given = Selection(case=case, cluster=cluster, since=since)
    points = load_points(path, warn, chosen, given, newest_per=NEWEST_PER)
    return [p for p in points if (not case or p.case == case) and (not cluster or p.cluster == cluster)
            and (not since or p.finished_at >= since)]


def side(source: str) -> tuple[Path, Selection]:
    """A side as given: a record file or folder, or FOLDER?FIELD=VALUE&... (SIDE_FIELDS)."""
    if not source.strip():  # Path("") is the working folder: its records index would be written there
        raise UsageError("an empty side: name a record file or folder (or a selection FOLDER?FIELD=VALUE)")
    folder, mark, query = source.partition("?")
    if Path(source).exists() or not mark:
        if not Path(source).exists():
            raise UsageError(f"no such record file or folder: {source}")
        return Path(source), Selection()
    if not Path(folder).is_dir():
        raise UsageError(f"a selection (after '?') needs a folder of records: no such folder {folder}")
    try:
        fields = dict(parse_qsl(query, strict_parsing=True))
    except ValueError:
        raise UsageError(f"selection {query!r}: FIELD=VALUE pairs joined by '&', "
                         "e.g. case=pytorch-ddp&since=2026-11-01") from None
    unknown = sorted(set(fields) - set(SIDE_FIELDS))
    if unknown:
        raise UsageError(f"selection {query!r}: unknown field(s) {', '.join(unknown)}; known: {', '.join(SIDE_FIELDS)}")
    if "devices" in fields:
        fields["devices"] = devices_list(fields["devices"])
    return Path(folder), Selection(**fields)


def _latest(points: list[Point]) -> dict[tuple, Point]:
    return latest(points, lambda p: (p.case, p.cluster, p.stack, p.devices))


def _beyond_noise(a: Point, b: Point) -> tuple[bool, float | None]:
    ra, rb = a.throughput["repetitions"], b.throughput["repetitions"]
    if len(ra) >= 2 and len(rb) >= 2:
        from scipy import stats  # here: its import costs every `suite` command half a second

        p_value = float(stats.ttest_ind(ra, rb, equal_var=False).pvalue)
        return p_value < 0.05, p_value
    lo_a, hi_a = _interval(a)
    lo_b, hi_b = _interval(b)
    return hi_b < lo_a or hi_a < lo_b, None


def _interval(p: Point) -> tuple[float, float]:
    mean, ci = p.throughput["mean"], p.throughput["ci95"] or 0.0
    return mean - ci, mean + ci


def compare(a_points: list[Point], b_points: list[Point], tolerance: float) -> list[Row]:
    a, b = _latest(a_points), _latest(b_points)
    rows = []
    for key in sorted(set(a) | set(b)):
        rows.append(judge(Row(key, a.get(key), b.get(key)), tolerance))
    return rows


def judge(row: Row, tolerance: float) -> Row:
    """Fills the row's difference, p-value and verdict (also used by `suite rerun` for one pair)."""
    if row.a is None or row.b is None:
        row.verdict = "only in A" if row.b is None else "only in B"
        return row
    if row.a.config_key != row.b.config_key:
        row.verdict = "not comparable"
        row.note = _differences(row.a, row.b)
        return row
    mean_a, mean_b = row.a.throughput["mean"], row.b.throughput["mean"]
    row.diff_pct = 100 * (mean_b - mean_a) / mean_a
    beyond, row.p_value = _beyond_noise(row.a, row.b)
    if abs(row.diff_pct) <= 100 * tolerance or not beyond:
        row.verdict = "same"
    else:
        row.verdict = "faster" if row.diff_pct > 0 else "slower"
    return row


def _differences(a: Point, b: Point) -> str:
    # A site's environment (runtime modules) has a fingerprint where a stack has its lock.
    site = "modules" in (a.record["execution"].get("runtime"), b.record["execution"].get("runtime"))
    names = ["model", "image size", "batch", "dtype", "data", "environment" if site else "stack lock"]
    return "; ".join(f"{n}: {x} vs {y}" for n, x, y in zip(names, a.config_key, b.config_key) if x != y)


def systems_line(row: Row) -> str | None:
    """How the systems of a row's two records differ (A -> B: processor, memory, accelerators, host networking,
    frameworks, GPU software, OS), or None where they do not or a side is missing: the first thing to read
    beside a verdict of slower."""
    if row.a is None or row.b is None:
        return None
    moved = system_differences(described(row.a), described(row.b))
    return f"the systems differ (A -> B): {'; '.join(moved)}" if moved else None


def settings_line(row: Row) -> str | None:
    """How the settings a site makes beside its system differ between a row's two records (A -> B): the cluster
    profile's [env], what loading a site's environment set (runtime modules) and NCCL's files on the first host;
    each kind only where both records say it (older records do not), or None where nothing differs."""
    if row.a is None or row.b is None:
        return None
    was, now = site_settings(row.a.full_record()), site_settings(row.b.full_record())  # the index keeps no host_info
    moved = [f"{kind} {name}: {was[kind].get(name, '(unset)')} -> {now[kind].get(name, '(unset)')}"
             for kind in was.keys() & now.keys() for name in sorted(was[kind].keys() | now[kind].keys())
             if was[kind].get(name) != now[kind].get(name)]
    return f"the site's settings differ (A -> B): {'; '.join(sorted(moved))}" if moved else None


def site_settings(record: dict) -> dict[str, dict]:
    """A record's site settings by kind, for those kinds the record says (see settings_line)."""
    provenance, found = record["provenance"], {}
    if (env := record["execution"].get("cluster_env")) is not None:
        found["[env]"] = env
    if (loaded := provenance.get("environment_set_by_loading")) is not None:
        found["set by loading"] = loaded
    if (files := first_host_info(record).get("nccl_conf")) is not None:
        found["NCCL's files"] = {f"{path}: {name}": value for path, settings in files.items()
                                 for name, value in settings.items()}
    return found


def format_rows(rows: list[Row]) -> str:
    lines = [f"{'case':<20} {'cluster':<12} {'stack':<16} {'dev':>4} {'A':>10} {'B':>10} {'unit':<8} {'diff':>8} "
             f"{'p':>6}  verdict"]
    for r in rows:
        case, cluster, stack, devices = r.key
        a = f"{r.a.throughput['mean']:.2f}" if r.a else "-"
        b = f"{r.b.throughput['mean']:.2f}" if r.b else "-"
        unit = unit_of(r.b or r.a)
        diff = f"{fmt_number(r.diff_pct, 1, sign=True)}%" if r.diff_pct is not None else "-"
        p = f"{r.p_value:.3f}" if r.p_value is not None else "-"
        note = f" ({r.note})" if r.note else ""
        lines.append(f"{case:<20} {cluster:<12} {stack:<16} {devices:>4} {a:>10} {b:>10} {unit:<8} {diff:>8} {p:>6}  "
                     f"{r.verdict}{note}")
    return "\n".join(lines)

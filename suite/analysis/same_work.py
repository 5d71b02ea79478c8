"""The same work in every framework, as a table of records: each case with a `[same_work]` table in
its case.toml trains, with `--same-work`, ResNet-50 v1.5 at 224 px, 1000 classes, batch 32 per
device, float32, on a random batch in device memory. `python -m suite compare-frameworks`
(suite/execution/same_work_runs.py) prints this table after its runs; the report's frameworks page shows
it too. A row whose configuration (model, image size, batch, dtype, data, parameter count) differs
from the most common one is flagged with what differs. Below it, for cases that train one model under
several data-parallel strategies (pytorch-gpt: ddp and fsdp; jax-gpt: dp and fsdp), the records of each case
and strategy at the same work and global batch side by side (parallel_rows). Reads records only."""

import html
from collections import Counter
from dataclasses import dataclass

from suite.analysis.utilisation import mfu_cell
from suite.base.stats import speedup_efficiency
from suite.records.read import Point, latest, record_frameworks

CONFIG = {"model": "model", "image size": "image_size", "batch": "batch_per_device", "dtype": "dtype",
          "data": "data", "parameters": "parameters"}


@dataclass
class Row:
    point: Point
    efficiency: float | None  # % against the 1-device record of the same case, cluster and stack
    differs: str  # what differs from the most common configuration, or ""

    @property
    def framework(self) -> str:
        names = [f"{name} {version}" for name, version in record_frameworks(self.point.record)]
        launcher = self.point.record["execution"].get("launcher")
        return " + ".join(names or [self.point.stack]) + (f" ({launcher})" if launcher else "")


def config(point: Point) -> tuple:
    return tuple(point.record["config"].get(key) for key in CONFIG.values())


def is_same_work(point: Point) -> bool:
    return point.record["config"]["options"].get("same-work") is True


def build_rows(points: list[Point]) -> list[Row]:
    """The latest same-work record per case, cluster, stack and device count."""
    chosen = latest([p for p in points if is_same_work(p)], lambda p: (p.case, p.cluster, p.stack, p.devices))
    ordered = sorted(chosen.values(), key=lambda p: (p.cluster, p.case, p.stack, p.devices))
    if not ordered:
        return []
    usual = Counter(config(p) for p in ordered).most_common(1)[0][0]
    groups = Counter((p.case, p.cluster, p.stack) for p in ordered)
    rows = []
    for p in ordered:
        base = chosen.get((p.case, p.cluster, p.stack, 1))
        efficiency = None
        if base and groups[(p.case, p.cluster, p.stack)] > 1:  # a sweep with a 1-device point
            [(_, efficiency)] = speedup_efficiency([(p.devices, p.throughput["mean"])], (1, base.throughput["mean"]))
        differs = "; ".join(f"{name} {ours} vs {theirs}" for name, ours, theirs in zip(CONFIG, config(p), usual)
                            if ours != theirs)
        rows.append(Row(p, efficiency, differs))
    return rows


COLUMNS = ("case", "framework", "cluster", "model", "parameters", "devices", "img/s per device", "img/s total",
           "efficiency")


def cells(row: Row) -> list[str]:
    p, cfg = row.point, row.point.record["config"]
    params = f"{cfg['parameters']:,}" if cfg.get("parameters") else "?"
    efficiency = f"{row.efficiency:.0f}%" if row.efficiency is not None else "-"
    return [p.case, row.framework, p.cluster, cfg.get("model") or "?", params, str(p.devices),
            f"{p.throughput['per_device']:.2f}", f"{p.throughput['mean']:.2f}", efficiency]


def summary(rows: list[Row]) -> str:
    flagged = sum(1 for r in rows if r.differs)
    if flagged:
        return f"{flagged} of {len(rows)} row(s) differ from the most common configuration (flagged DIFFERS)"
    model, size, batch, dtype, data, params = config(rows[0].point) if rows else (None,) * 6
    return (f"{len(rows)} row(s), all the same configuration: {model}, {size} px, batch {batch} per device, "
            f"{dtype}, {data} data, {params or 0:,} parameters")


def aligned(table: list[list[str]]) -> list[str]:
    """The rows of a text table, each column as wide as its widest cell."""
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table]


def format_table(rows: list[Row]) -> str:
    lines = aligned([list(COLUMNS)] + [cells(r) for r in rows])
    flagged = [f"{text}  DIFFERS: {row.differs}" if row and row.differs else text
               for text, row in zip(lines, [None, *rows])]
    return "\n".join([*flagged, summary(rows)])


# --- The same training under each data-parallel strategy -------------------------------------------
# Cases that report how they parallelise (pytorch-gpt: --parallel ddp|fsdp) put their records side by
# side where the same model trained at the same global batch on the same devices: the strategy is the
# only difference, and tokens/s, MFU and peak memory per device show what it costs or saves.

WORK = ("model_name", "context", "global_batch", "dtype", "data")  # what must be equal, as the case reports it
PARALLEL_COLUMNS = ("case", "cluster", "model", "devices", "global batch", "parallel", "tokens/s total",
                    "tokens/s per device", "MFU", "peak memory per device")


def reported(point: Point) -> dict:
    return point.record["config"].get("reported_by_case") or {}


def work_of(point: Point) -> tuple:
    return tuple(reported(point).get(key) for key in WORK)


def parallel_rows(points: list[Point]) -> list[Point]:
    """The latest record per cluster, work, device count, case and strategy, where more than one case or
    strategy did that work on that many devices (pytorch-gpt's ddp and fsdp beside jax-gpt's dp and fsdp);
    in order of cluster, work, devices, case, strategy."""
    chosen = latest([p for p in points if reported(p).get("parallel")],
                    lambda p: (p.cluster, work_of(p), p.devices, p.case, reported(p)["parallel"]))
    strategies = Counter(key[:3] for key in chosen)
    ordered = sorted((key for key in chosen if strategies[key[:3]] > 1), key=lambda k: tuple(map(str, k)))
    return [chosen[key] for key in ordered]


def peak_memory_cell(point: Point) -> str:
    """The largest of the ranks' peak memory, in MiB (the case's results: peak_memory_bytes)."""
    peaks = [m for r in point.record["metrics"].get("results") or [] for m in r.get("peak_memory_bytes") or []]
    return f"{max(peaks) / 2**20:,.0f} MiB" if peaks else "-"


def parallel_cells(point: Point) -> list[str]:
    tp, facts = point.throughput, reported(point)
    return [point.case, point.cluster, str(facts.get("model_name") or "?"), str(point.devices),
            f"{facts.get('global_batch')} x {facts.get('context')} tokens", facts["parallel"], f"{tp['mean']:,.0f}",
            f"{tp['per_device']:,.0f}", mfu_cell(point.record["metrics"].get("utilisation")),
            peak_memory_cell(point)]


def format_parallel_table(points: list[Point]) -> str:
    return "\n".join(aligned([list(PARALLEL_COLUMNS)] + [parallel_cells(p) for p in points]))


def parallel_table_html(points: list[Point]) -> str:
    """parallel_rows as the report's frameworks page shows them; nothing where no such pair ran."""
    rows = parallel_rows(points)
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in PARALLEL_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in parallel_cells(p)) + "</tr>" for p in rows)
    return ("<h2>The same training under each data-parallel strategy</h2><p>The same model at the same global "
            "batch on as many devices: only <code>--parallel</code> differs, and the framework (pytorch-gpt, "
            f"jax-gpt).</p><table><tr>{head}</tr>{body}</table>")

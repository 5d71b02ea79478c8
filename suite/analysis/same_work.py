"""The same work in every framework, as a table of records: each case with a `[same_work]` table in
its case.toml trains, with `--same-work`, ResNet-50 v1.5 at 224 px, 1000 classes, batch 32 per
device, float32, on a random batch in device memory. `python -m suite compare-frameworks`
(suite/commands/compare_frameworks.py) prints this table after its runs; the report's frameworks page shows
it too. A row whose configuration (model, image size, batch, dtype, data, parameter count) differs
from the most common one is flagged with what differs. Reads records only."""

from collections import Counter
from dataclasses import dataclass

from suite.base.stats import speedup_efficiency
from suite.records.read import Point, latest

CONFIG = {"model": "model", "image size": "image_size", "batch": "batch_per_device", "dtype": "dtype",
          "data": "data", "parameters": "parameters"}
FRAMEWORKS = {"torch": "PyTorch", "horovod": "Horovod", "mxnet": "MXNet", "tensorflow": "TensorFlow"}


@dataclass
class Row:
    point: Point
    efficiency: float | None  # % against the 1-device record of the same case, cluster and stack
    differs: str  # what differs from the most common configuration, or ""

    @property
    def framework(self) -> str:
        versions = self.point.record["provenance"].get("versions", {})
        names = [f"{label} {versions[key]}" for key, label in FRAMEWORKS.items() if versions.get(key)]
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


def format_table(rows: list[Row]) -> str:
    table = [list(COLUMNS)] + [cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = []
    for line, row in zip(table, [None, *rows]):
        text = "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
        lines.append(f"{text}  DIFFERS: {row.differs}" if row and row.differs else text)
    return "\n".join([*lines, summary(rows)])

"""`suite query`: the records of a results folder, read from its index (suite/records/index.py) without
parsing them, selected by case, cluster, stack, environment fingerprint, devices, date and status,
as a table or CSV, oldest first. Files that are not records are named on stderr and skipped."""

import csv
import functools
from pathlib import Path

from suite.base.errors import UsageError
from suite.records.index import Entry, Selection, select
from suite.records.read import case_unit

CSV_COLUMNS = ["finished_at", "started_at", "case", "cluster", "stack", "nodes", "devices", "status", "throughput",
               "unit", "fingerprint", "run_id", "record"]
unit_of = functools.lru_cache(case_unit)  # a case's unit, its case.toml read once per command


def query(results_dir: Path, selection: Selection, form: str, out, warn=print) -> None:
    if not Path(results_dir).is_dir():
        raise UsageError(f"no such results folder: {results_dir}")
    entries = sorted(select(results_dir, selection, warn=warn, summaries=False),
                     key=lambda e: (e.finished_at, e.run_id))
    if form == "csv":
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(csv_row(e) for e in entries)
    else:
        out.write(table(entries) + "\n")


def csv_row(e: Entry) -> list:
    return [e.finished_at, e.started_at, e.case, e.cluster, e.stack, e.nodes, e.devices, e.status,
            "" if e.throughput is None else e.throughput, unit_of(e.case), e.fingerprint or "", e.run_id, str(e.path)]


def table(entries: list[Entry]) -> str:
    lines = [f"{'finished (UTC)':<20} {'case':<20} {'cluster':<12} {'stack':<16} {'nodes':>5} {'dev':>4} "
             f"{'status':<6} {'throughput':>10} {'unit':<8}  {'fingerprint':<12}  run_id"]
    for e in entries:
        throughput = "-" if e.throughput is None else f"{e.throughput:.2f}"
        lines.append(f"{e.finished_at:<20} {e.case:<20} {e.cluster:<12} {e.stack:<16} {e.nodes:>5} {e.devices:>4} "
                     f"{e.status:<6} {throughput:>10} {unit_of(e.case):<8}  {(e.fingerprint or '-')[:12]:<12}  "
                     f"{e.run_id}")
    lines.append(f"{len(entries)} record(s)")
    return "\n".join(lines)

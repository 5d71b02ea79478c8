"""`suite compare A B`: the throughput of records B against records A (suite/analysis/compare.py)."""

import argparse
import sys
from dataclasses import dataclass

from suite.base.errors import UsageError
from suite.commands import common_args
from suite.execution.request import request_of

NAME = "compare"
HELP = "compare the throughput of records B against records A"
EPILOG = """A selection picks records of a folder by the fields of `suite query` (quote it in a shell):
  python -m suite compare 'reports/results?case=pytorch-ddp&cluster=jsc&until=2026-10-31' \\
                          'reports/results?case=pytorch-ddp&cluster=jsc&since=2026-11-01'
fields: case, cluster, stack, fingerprint (first characters), devices (8 or 1,2,4), since, until (UTC dates)
"""
FORMATTER = argparse.RawDescriptionHelpFormatter


@dataclass(frozen=True)
class CompareRequest:
    a: str
    b: str
    case: str | None = None
    cluster: str | None = None
    since: str | None = None
    tolerance: float = 0.05


def add_arguments(parser) -> None:
    parser.add_argument("a", help="side A (the reference): a record file, a folder of records, or FOLDER?SELECTION")
    parser.add_argument("b", help="side B (the candidate): a record file, a folder of records, or FOLDER?SELECTION")
    parser.add_argument("--case", help="only this case (both sides)")
    common_args.cluster(parser, "only this cluster (both sides)")
    parser.add_argument("--since", help="only records finished at or after this UTC date (YYYY-MM-DD; both sides)")
    common_args.tolerance(parser, "slowdown that counts as a regression (0.05 = 5%%)")


def make_request(args, case_args: list[str], argv: list[str]) -> CompareRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(CompareRequest, args)


def run(req: CompareRequest) -> int:
    from suite.analysis.compare import compare, format_rows, select, settings_line, systems_line

    def warn(message):
        print(message, file=sys.stderr)

    a = select(req.a, req.case, req.cluster, req.since, warn)
    b = select(req.b, req.case, req.cluster, req.since, warn)
    if not a or not b:
        raise UsageError(f"nothing to compare: {len(a)} record(s) in A, {len(b)} in B after selection")
    rows = compare(a, b, req.tolerance)
    print(format_rows(rows))
    for row in rows:
        case, cluster, stack, devices = row.key
        for said in filter(None, (systems_line(row), settings_line(row))):
            print(f"{case} on {cluster}, {stack}, {devices} device(s): {said}")
    return 1 if any(r.verdict == "slower" for r in rows) else 0

"""`suite query`: the records of a results folder from its index, as a table or CSV (suite/records/query.py)."""

import sys
from dataclasses import dataclass
from pathlib import Path

from suite.commands import common_args
from suite.execution.request import request_of

NAME = "query"
HELP = "list the records of a results folder from its index (table or CSV)"


@dataclass(frozen=True)
class QueryRequest:
    results_dir: Path
    case: str | None = None
    cluster: str | None = None
    stack: str | None = None
    fingerprint: str | None = None
    devices: str | None = None
    since: str | None = None
    until: str | None = None
    status: str = "all"
    format: str = "table"


def add_arguments(parser) -> None:
    add = parser.add_argument
    common_args.results_dir(parser)
    add("--case", help="only this case (Make: CASE)")
    common_args.cluster(parser, "only this cluster (Make: CLUSTER)")
    add("--stack", help="only this stack (Make: STACK)")
    add("--fingerprint", help="only this environment fingerprint (for now the stack lock's sha256), or its first "
        "characters (Make: FINGERPRINT)")
    add("--devices", help="only these device counts, e.g. 8 or 1,2,4 (Make: DEVICES)")
    add("--since", help="only records finished at or after this UTC date, YYYY-MM-DD[THH:MM:SS] (Make: SINCE)")
    add("--until", help="only records finished on or before this UTC date (Make: UNTIL)")
    add("--status", choices=["ok", "failed", "all"], default="all", help="default all (Make: STATUS)")
    add("--format", choices=["table", "csv"], default="table", help="default table (Make: FORMAT)")


def make_request(args, case_args: list[str], argv: list[str]) -> QueryRequest:
    common_args.no_case_args(NAME, case_args)
    common_args.refuse_no_folder_to_read(args.results_dir, "--results-dir")
    return request_of(QueryRequest, args)


def run(req: QueryRequest) -> int:
    from suite.records.index import Selection, devices_list
    from suite.records.query import query

    selection = Selection(case=req.case, cluster=req.cluster, stack=req.stack, fingerprint=req.fingerprint,
                          devices=devices_list(req.devices) if req.devices else (), since=req.since,
                          until=req.until, status=req.status)
    query(req.results_dir, selection, req.format, sys.stdout, warn=lambda m: print(m, file=sys.stderr))
    return 0

"""`suite report`: HTML pages and a CSV from the result records (suite/analysis/report.py)."""

import sys
from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.commands import common_args
from suite.execution.request import request_of

NAME = "report"
HELP = "write HTML pages and a CSV from the result records"


@dataclass(frozen=True)
class ReportRequest:
    results_dir: Path
    out: Path


def add_arguments(parser) -> None:
    common_args.results_dir(parser)
    parser.add_argument("--out", type=paths.given, default=None,
                        help="folder for the pages (default: the one that holds the results folder, reports/ for "
                             "reports/results, where its sweeps, tuning studies and site checks are too)")


def make_request(args, case_args: list[str], argv: list[str]) -> ReportRequest:
    common_args.no_case_args(NAME, case_args)
    args.out = args.out or args.results_dir.resolve().parent
    common_args.refuse_no_folder_to_read(args.results_dir, "--results-dir")
    paths.refuse_unwritable(args.out, "--out")  # before the records are read: a report of 10,000 takes a while
    return request_of(ReportRequest, args)


def run(req: ReportRequest) -> int:
    from suite.analysis.report import write_report

    for path in write_report(req.results_dir, req.out, warn=lambda m: print(m, file=sys.stderr)):
        print(path)
    return 0

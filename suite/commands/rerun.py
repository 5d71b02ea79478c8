"""`suite rerun RECORD.json`: the record's run point again, on the hosts at hand, and how it compares
(suite/execution/rerun.py)."""

from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.commands import common_args
from suite.execution.request import request_of

NAME = "rerun"
HELP = ("run a record's case again as it ran (same options, world shape, runtime, stack, repetitions), refusing on "
        "drift, and compare with it")


@dataclass(frozen=True)
class RerunRequest:
    record: str
    argv: list[str]  # the command line as typed, for the new record's rerun_of
    cluster: str | None = None
    hostfile: str | None = None
    allow_drift: bool = False
    data_dir: Path | None = None
    results_dir: Path = paths.RESULTS
    runs_dir: Path = paths.RUNS
    tolerance: float = 0.05
    dry_run: bool = False


def add_arguments(parser) -> None:
    add = parser.add_argument
    add("record", help="the result record to reproduce (Make: RECORD)")
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument("--cluster", default=None, help="cluster profile for the hosts (default: the record's "
                       "cluster where hostfiles/ has its profile, else the record's hostfile where it exists, else "
                       "localhost)")
    hosts.add_argument("--hostfile", default=None, help="hostfile for the hosts (Make: HOSTFILE)")
    add("--allow-drift", action="store_true", help="run even where stack lock, image, suite checkout, case option "
        "defaults or devices differ from the record (Make: ALLOW_DRIFT=1)")
    add("--data-dir", type=paths.given, default=None, help="where datasets live (Make: DATA_DIR)")
    common_args.results_dir(parser, "where the new record goes")
    common_args.runs_dir(parser)
    common_args.tolerance(parser, "difference the comparison tolerates (0.05 = 5%%)")
    add("--dry-run", action="store_true", help="check and print the plan; start nothing")


def make_request(args, case_args: list[str], argv: list[str]) -> RerunRequest:
    if case_args:
        raise UsageError("rerun takes the case options from the record; nothing goes after '--'")
    return request_of(RerunRequest, args, argv=list(argv))


def run(req: RerunRequest) -> int:
    from suite.execution.rerun import rerun

    return rerun(req)

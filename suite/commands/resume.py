"""`suite resume SWEEP_ID`: the points of a sweep without an ok record run again as the same sweep, and its
table is completed (suite/execution/resume.py)."""

from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.commands import common_args
from suite.execution.request import request_of

NAME = "resume"
HELP = ("run again, with the sweep's own options and stack, the points of a sweep that have no ok record (failed, "
        "cut short, never started) and complete its table, refusing on drift")


@dataclass(frozen=True)
class ResumeRequest:
    sweep_id: str
    argv: list[str]  # the command line as typed, for the sweep plan's resumes
    allow_drift: bool = False
    results_dir: Path = paths.RESULTS
    runs_dir: Path = paths.RUNS
    dry_run: bool = False


def add_arguments(parser) -> None:
    add = parser.add_argument
    add("sweep_id", help="the sweep's id, as its records' sweep_id and reports/sweeps/<sweep_id>.json name it "
        "(Make: SWEEP)")
    add("--allow-drift", action="store_true", help="run even where stack lock, image, suite checkout, case option "
        "defaults or devices differ from the sweep's records (Make: ALLOW_DRIFT=1)")
    common_args.results_dir(parser, "where the sweep's records are and the new ones go (its plan and table: "
                            "sweeps/ beside it)")
    common_args.runs_dir(parser)
    add("--dry-run", action="store_true", help="list the points to run again, check and print their plans; start "
        "nothing (Make: DRY_RUN=1)")


def make_request(args, case_args: list[str], argv: list[str]) -> ResumeRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(ResumeRequest, args, argv=list(argv))


def run(req: ResumeRequest) -> int:
    from suite.execution.resume import resume

    return resume(req)

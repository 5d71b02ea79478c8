"""`suite compare-frameworks`: the cases with a `[same_work]` table, one after the other through the
normal runner with the same run options, then one table (suite/execution/same_work_runs.py)."""

import argparse
from dataclasses import dataclass

from suite.execution import plugins, request
from suite.execution.request import RunRequest

NAME = "compare-frameworks"
HELP = ("run every case's --same-work configuration (ResNet-50 v1.5, 224 px, batch 32 per device, float32, "
        "synthetic data) one after the other and print one table")
EPILOG = "Case options after '--' (Make: ARGS) go to every case, after its --same-work values."


@dataclass(frozen=True)
class FrameworksRequest:
    run: RunRequest  # the run options it shares with `run`; its case is set per case
    tiny: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    request.add_run_options(parser, plugins.available("runtimes"), plugins.available("schedulers"),
                            leave_out=frozenset({"case", "baseline", "run_id"}))
    parser.add_argument("--tiny", action="store_true", help="each case's [tiny] sizes (and [same_work.tiny]): "
                        "a check that all run, not a measurement (Make: TINY=1)")


def make_request(args, case_args: list[str], argv: list[str]) -> FrameworksRequest:
    return FrameworksRequest(request.from_namespace(args, case_args), args.tiny)


def run(req: FrameworksRequest) -> int:
    from suite.execution.same_work_runs import compare_frameworks

    return compare_frameworks(req.run, req.tiny)

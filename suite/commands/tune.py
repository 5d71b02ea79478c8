"""`suite tune`: the case's speed settings tried one at a time within a budget, each trial a record, the best
written as a preset (suite/execution/tune.py)."""

from dataclasses import dataclass

from suite.base.errors import UsageError
from suite.commands import common_args
from suite.execution import plugins, request
from suite.execution.request import RunRequest

NAME = "tune"
HELP = ("try the case's settings that change its speed and not its work (its [tune] table) one at a time within "
        "a budget; each trial a record; the best written as a preset for --preset tuned:<file>")


@dataclass(frozen=True)
class TuneRequest:
    run: RunRequest
    budget_min: float


def add_arguments(parser) -> None:
    request.add_run_options(parser, plugins.available("runtimes"), plugins.available("schedulers"))
    parser.add_argument("--tiny", action="store_true", help="the case's [tiny] sizes, before the case options "
                        "(Make: TINY=1)")
    parser.add_argument("--budget", type=float, default=30.0, help="minutes the trials may take together; no "
                        "trial starts that the longest so far would take past it (Make: BUDGET, default 30)")


def make_request(args, case_args: list[str], argv: list[str]) -> TuneRequest:
    if not 0 < args.budget <= 24 * 60:
        raise UsageError(f"--budget (Make: BUDGET) is minutes from 0 to 1440, got {args.budget:g}")
    case_args = common_args.run_case_args(args.case, args.tiny, case_args)
    return TuneRequest(request.from_namespace(args, case_args, argv), args.budget)


def run(req: TuneRequest) -> int:
    from suite.execution.tune import tune

    return tune(req.run, req.budget_min * 60)

"""`suite stacks`: the local stacks kept under the stack home, their size and use, and the removal of those no
recipe of this checkout makes and nothing used for a while (suite/stacks/kept.py)."""

import argparse
from dataclasses import dataclass

from suite.commands import common_args
from suite.execution.request import request_of

NAME = "stacks"
HELP = "list the local stacks kept here (size, built, last used, made by this checkout) and remove unused ones"


@dataclass(frozen=True)
class StacksRequest:
    remove_unused_days: float | None = None


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of days above 0, got {text}")
    return value


def add_arguments(parser) -> None:
    parser.add_argument("--remove-unused-days", type=_days, default=None, metavar="DAYS",
                        help="remove the stacks that no recipe of this checkout makes and that no run or install "
                             "has used for DAYS days (Make: REMOVE_UNUSED_DAYS)")


def make_request(args, case_args: list[str], argv: list[str]) -> StacksRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(StacksRequest, args)


def run(req: StacksRequest) -> int:
    from suite.base import paths
    from suite.stacks.kept import kept_stacks, listing, remove_unused

    stacks = kept_stacks()
    print("\n".join([f"stack home: {paths.stack_home()}", *listing(stacks)]))
    if req.remove_unused_days is not None:
        print("\n".join(remove_unused(stacks, req.remove_unused_days)))
    return 0

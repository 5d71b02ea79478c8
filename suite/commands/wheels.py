"""`suite wheels`: every file of a stack's locks into a folder, for installing where there is no network."""

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.commands import common_args
from suite.execution.request import request_of
from suite.inputs.host_gpus import FLAVOURS

NAME = "wheels"
HELP = ("download every file of a stack's locks (hash-checked, sdists included) into a folder, for installing "
        "where there is no network")


@dataclass(frozen=True)
class WheelsRequest:
    dest: Path
    case: str | None = None
    stack: str | None = None
    flavour: list[str] | None = None


def add_arguments(parser) -> None:
    common_args.stack_choice(parser, "the files of")
    common_args.flavour(parser, "cpu or cuda, repeatable (default: both) (Make: FLAVOUR)", action="append")
    parser.add_argument("--dest", type=paths.given, required=True, help="the wheel folder (Make: WHEELS)")


def make_request(args, case_args: list[str], argv: list[str]) -> WheelsRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(WheelsRequest, args)


def run(req: WheelsRequest) -> int:
    from suite.stacks import wheelhouse
    from suite.stacks.recipes import load_flavour

    stack = common_args.stack_of(NAME, req.case, req.stack)
    for flavour in [load_flavour(stack, name) for name in (req.flavour or FLAVOURS)]:
        if flavour.no_local and not req.flavour:
            print(f"wheels: {flavour.id} left out: {flavour.no_local}")
            continue
        started, before = time.monotonic(), wheelhouse.size_mb(req.dest) if req.dest.is_dir() else 0.0
        try:
            wheelhouse.fill(req.dest, flavour.locks(), flavour.pip_extra_index, needs=flavour.extra_index_builds())
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"wheels: {flavour.id}: {wheelhouse.size_mb(req.dest) - before:.0f} MB added in "
              f"{time.monotonic() - started:.0f} s; install with WHEELS={req.dest} FLAVOUR={flavour.name}")
    return 0

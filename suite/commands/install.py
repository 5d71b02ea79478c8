"""`suite install`: a case's (or a stack's) local stack, ahead of a run."""

import sys
from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.commands import common_args
from suite.execution.request import request_of

NAME = "install"
HELP = "install the local stack of a case or stack"


@dataclass(frozen=True)
class InstallRequest:
    case: str | None = None
    stack: str | None = None
    flavour: str | None = None
    wheels: Path | None = None


def add_arguments(parser) -> None:
    common_args.stack_choice(parser, "install")
    common_args.flavour(parser)
    parser.add_argument("--wheels", type=paths.given, default=None,
                        help="install from this wheel folder alone, with no network (Make: WHEELS)")


def make_request(args, case_args: list[str], argv: list[str]) -> InstallRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(InstallRequest, args)


def run(req: InstallRequest) -> int:
    from suite.stacks.install import ensure_installed, local_flavour

    if req.wheels and not req.wheels.is_dir():
        raise UsageError(f"WHEELS={req.wheels} is not a folder (fill one with `make wheels`)")
    try:
        installed = ensure_installed(local_flavour(common_args.stack_of(NAME, req.case, req.stack), req.flavour),
                                     wheels=req.wheels)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(installed.prefix)
    return 0

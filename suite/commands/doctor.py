"""`suite doctor [--cluster NAME]`: what a cluster profile needs on this machine and whether it is
there, one line each (suite/execution/doctor.py). Exit status 1 when anything a default run needs is
missing; nothing is installed or started."""

from dataclasses import dataclass

from suite.commands import common_args
from suite.execution.request import request_of

NAME = "doctor"
HELP = "what a cluster profile needs and what is missing here, one line each"


@dataclass(frozen=True)
class DoctorRequest:
    cluster: str | None = None
    case: list[str] | None = None
    flavour: str | None = None


def add_arguments(parser) -> None:
    common_args.cluster(parser, "cluster profile hostfiles/NAME.toml or a PATH.toml (default: this machine)")
    parser.add_argument("--case", action="append", default=None,
                        help="check only this case's stack, image and data (repeatable; default: every case)")
    common_args.flavour(parser, "the stacks' cpu or cuda flavour (default: what this host fits) (Make: FLAVOUR)")


def make_request(args, case_args: list[str], argv: list[str]) -> DoctorRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(DoctorRequest, args)


def run(req: DoctorRequest) -> int:
    from suite.execution.doctor import doctor

    return doctor(req.cluster, req.case, req.flavour)

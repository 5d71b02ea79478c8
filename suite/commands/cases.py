"""`suite cases`: the cases and their options."""

from dataclasses import dataclass

from suite.commands import common_args
from suite.inputs.cases import known_cases, load_case
from suite.instack.case_options import build_parser

NAME = "cases"
HELP = "list the cases and their options"


@dataclass(frozen=True)
class CasesRequest:
    pass


def add_arguments(parser) -> None:
    pass


def make_request(args, case_args: list[str], argv: list[str]) -> CasesRequest:
    common_args.no_case_args(NAME, case_args)
    return CasesRequest()


def run(req: CasesRequest) -> int:
    for name in known_cases():
        case = load_case(name)
        print(f"{name}: {case.spec.get('summary', '')}  [stack {case.stack}, launcher {case.launcher}]")
        print("  " + build_parser(case.spec).format_help().replace("\n", "\n  ").rstrip())
    return 0

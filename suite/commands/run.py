"""`suite run`: check every input, then install the stack, launch each repetition and write one record
(suite/execution/run.py)."""

import argparse

from suite.commands import common_args
from suite.execution import plugins, request
from suite.execution.request import RunRequest
from suite.inputs.cases import known_cases, load_case
from suite.instack.case_options import build_parser

NAME = "run"
HELP = "run a case and write a result record"
CASE_OPTIONS = """Case options go after '--' (Make: ARGS) and are checked against the case before anything
starts, e.g.  python -m suite run --case pytorch-synthetic --gpus-per-node 2 -- --image-size 64 --batch-size 8
--batch-size max: the largest batch per device that trains, found by short trial runs, then measured
(docs/running.md, "The largest batch a device trains").
"""


def _case_options_help() -> str:
    """CASE_OPTIONS, then each case's options as its own parser shows them."""
    sections = []
    for name in known_cases():
        usage = build_parser(load_case(name).spec).format_help()
        sections.append(f"case {name}:\n" + usage.split("\n\n", 1)[-1].split("options:\n", 1)[-1])
    return CASE_OPTIONS + "\n" + "\n".join(sections)


EPILOG = _case_options_help()
FORMATTER = argparse.RawDescriptionHelpFormatter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    request.add_run_options(parser, plugins.available("runtimes"), plugins.available("schedulers"))
    parser.add_argument("--tiny", action="store_true", help="the case's [tiny] sizes, before the case options "
                        "after '--' (later options win): a check that the case runs, not a measurement (Make: TINY=1)")


def make_request(args, case_args: list[str], argv: list[str]) -> RunRequest:
    """The request; --tiny and --preset tuned:FILE become the options they stand for (common_args.run_case_args)."""
    return request.from_namespace(args, common_args.run_case_args(args.case, args.tiny, case_args), argv)


def run(req: RunRequest) -> int:
    from suite.execution.run import run

    return run(req)

"""What several commands share: their options, defined once, and the checks of what they are given.
A command's typed request is made from its parsed arguments by suite.execution.request.request_of."""

import argparse
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.inputs import tuned_presets
from suite.inputs.cases import load_case
from suite.inputs.host_gpus import FLAVOURS


def fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


def no_case_args(name: str, case_args: list[str]) -> None:
    if case_args:
        raise UsageError(f"{name} takes no case options; nothing goes after '--'")


def run_case_args(case: str, tiny: bool, case_args: list[str]) -> list[str]:
    """A run's case arguments: --tiny's sizes in front of the given ones (later options win), and each
    `--preset tuned:FILE` replaced by the file's options, so that the record, a rerun and a batch job's runner all
    see the values that ran."""
    sizes = load_case(case).tiny_args() if tiny else []
    return [*sizes, *tuned_presets.expand(case, case_args)]


def refuse_no_folder_to_read(path: Path, given: str) -> None:
    """Refuses a folder to read from that is not there, or is a file (a mistyped one would read as empty)."""
    if not path.exists():
        raise UsageError(f"{given} {path}: no such folder")
    if not path.is_dir():
        raise UsageError(f"{given} {path} is a file, not a folder")


def results_dir(parser, help="where the records are (default: reports/results)", make: bool = True) -> None:
    """--results-dir; `make`: a Makefile target passes it as RESULTS."""
    parser.add_argument("--results-dir", type=paths.given, default=paths.RESULTS,
                        help=help + (" (Make: RESULTS)" if make else ""))


def runs_dir(parser, help="where run directories go (default: runs)") -> None:
    parser.add_argument("--runs-dir", type=paths.given, default=paths.RUNS, help=help + " (Make: RUNS)")


def cluster(parser, help="cluster profile hostfiles/NAME.toml or a PATH.toml (Make: CLUSTER)") -> None:
    parser.add_argument("--cluster", default=None, help=help)


def flavour(parser, help="the stack's cpu or cuda build (default: cuda where this host has NVIDIA GPUs) "
            "(Make: FLAVOUR)", **how) -> None:
    parser.add_argument("--flavour", choices=FLAVOURS, default=None, help=help, **how)


def stack_choice(parser, what: str) -> None:
    parser.add_argument("--case", help=f"{what} the stack this case uses")
    parser.add_argument("--stack", help=f"{what} this stack (folder under containers/)")


def stack_of(command: str, case: str | None, stack: str | None):
    """The stack of --stack, else of --case's case; refuses neither given."""
    from suite.stacks.recipes import load_stack

    if not (case or stack):
        raise UsageError(f"{command} needs --case NAME or --stack NAME")
    return load_stack(stack or load_case(case).stack)


def tolerance(parser, help: str) -> None:
    parser.add_argument("--tolerance", type=fraction, default=0.05, help=help)

"""What several commands share: their options, defined once, and the typed request of a command made
from its parsed arguments."""

import argparse
from dataclasses import fields
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.inputs.host_gpus import FLAVOURS


def request_of(cls, args: argparse.Namespace, **given):
    """An instance of the dataclass `cls` from the arguments of the same names (and `given`)."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}, **given)


def fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


def no_case_args(name: str, case_args: list[str]) -> None:
    if case_args:
        raise UsageError(f"{name} takes no case options; nothing goes after '--'")


def folder_or_none(path: Path, given: str) -> None:
    """Refuses a path that is there but is not a folder (a folder not there yet is left to the command)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{given} {path} is a file, not a folder")


def results_dir(parser, help="where the records are (default: reports/results)") -> None:
    parser.add_argument("--results-dir", type=Path, default=paths.RESULTS, help=help)


def cluster(parser, help="cluster profile hostfiles/NAME.toml (Make: CLUSTER)") -> None:
    parser.add_argument("--cluster", default=None, help=help)


def flavour(parser, help="the stack's cpu or cuda build (default: cuda where this host has NVIDIA GPUs) "
            "(Make: FLAVOUR)", **how) -> None:
    parser.add_argument("--flavour", choices=FLAVOURS, default=None, help=help, **how)


def stack_choice(parser, what: str) -> None:
    parser.add_argument("--case", help=f"{what} the stack this case uses")
    parser.add_argument("--stack", help=f"{what} this stack (folder under containers/)")


def tolerance(parser, help: str) -> None:
    parser.add_argument("--tolerance", type=fraction, default=0.05, help=help)

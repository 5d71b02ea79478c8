"""Command line: python -m suite COMMAND ... (`python -m suite --help` lists the commands). Each command
is one module of suite/commands/ that meets the contract below (`Command`); this is only the entry point
that finds them, parses, and turns a refusal into one line and exit status 2."""

import argparse
import importlib
import pkgutil
import signal
import sys
from types import ModuleType
from typing import Any, Protocol

import suite.commands
from suite.base.errors import UsageError
from suite.execution import request
from suite.instack.arguments import OneLineParser

# Modules of suite/commands/ that are not commands: what several commands share.
NOT_COMMANDS = frozenset({"common_args"})


class Command(Protocol):
    """What every module of suite/commands/ but NOT_COMMANDS defines; CommandDefaults gives the members a
    module may leave out. A module that lacks any other stops the command line (`commands`) instead of
    vanishing from it. A command parses and calls: its work is in the layers below (CONTRIBUTING.md)."""

    NAME: str  # the command's name on the command line
    HELP: str  # its line in `python -m suite --help`
    EPILOG: str | None  # the text after its options in `python -m suite NAME --help`; None (default): none
    FORMATTER: type[argparse.HelpFormatter]  # how that help is laid out (default: argparse.HelpFormatter)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its options, each with its help (and Make variable)."""

    def make_request(self, args: argparse.Namespace, case_args: list[str], argv: list[str]) -> Any:
        """The typed request (a dataclass) of its parsed options, the case options after '--' and the
        command line as typed; refuses bad input with UsageError."""

    def run(self, req: Any) -> int:
        """Does the command; returns its exit status."""


class CommandDefaults:
    """The members of the contract a command module may leave out, as it then gets them."""

    EPILOG = None
    FORMATTER = argparse.HelpFormatter


def member(module: ModuleType, name: str) -> Any:
    """A member of a command module's contract: its own, else the default of CommandDefaults."""
    return getattr(module, name, getattr(CommandDefaults, name, None))


def contract_problems(module: ModuleType) -> list[str]:
    """What a command module lacks of the contract, one phrase each; [] where it meets it."""
    members = [*Command.__annotations__, *(m for m in vars(Command) if not m.startswith("_"))]
    problems = [f"no {m}" for m in members if not hasattr(module, m) and not hasattr(CommandDefaults, m)]
    for name in ("NAME", "HELP"):
        if hasattr(module, name) and not (isinstance(getattr(module, name), str) and getattr(module, name)):
            problems.append(f"{name} is not a non-empty string")
    if not isinstance(member(module, "EPILOG"), (str, type(None))):
        problems.append("EPILOG is neither a string nor None")
    formatter = member(module, "FORMATTER")
    if not (isinstance(formatter, type) and issubclass(formatter, argparse.HelpFormatter)):
        problems.append("FORMATTER is not an argparse.HelpFormatter class")
    problems += [f"{m} is not a function" for m in ("add_arguments", "make_request", "run")
                 if hasattr(module, m) and not callable(getattr(module, m))]
    return problems


def commands() -> dict[str, ModuleType]:
    """The command modules by command name, in the order of their names; a module of suite/commands/ that
    does not meet the contract is an error naming what it lacks."""
    found = {}
    for info in pkgutil.iter_modules(suite.commands.__path__):
        if info.name in NOT_COMMANDS:
            continue
        module = importlib.import_module(f"suite.commands.{info.name}")
        if problems := contract_problems(module):
            raise RuntimeError(f"suite/commands/{info.name}.py is not a command: {'; '.join(problems)} "
                               "(the contract: suite/cli.py, Command)")
        found[module.NAME] = module
    return dict(sorted(found.items()))


class CommandLineParser(OneLineParser):
    """`python -m suite`'s parser; the commands' parsers (of this class too) kept in `commands`."""

    commands: dict[str, argparse.ArgumentParser]

    def parse_command_line(self, own: list[str]) -> argparse.Namespace:
        """parse_args, but options no command knows are refused by that command's parser, which names it."""
        args, extra = self.parse_known_args(own)
        if extra:
            self.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        return args


def build_cli(found: dict[str, ModuleType] | None = None) -> argparse.ArgumentParser:
    parser = CommandLineParser(prog="python -m suite",
                               description="Distributed deep-learning training benchmarks for HPC clusters.")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = {}
    for name, module in (found or commands()).items():
        command = sub.add_parser(name, help=module.HELP, epilog=member(module, "EPILOG"),
                                 formatter_class=member(module, "FORMATTER"))
        module.add_arguments(command)
        parser.commands[name] = command
    return parser


def interrupt(signum, frame):
    """SIGINT and SIGTERM end the runner the same way, as KeyboardInterrupt (its run leaves a record saying so)."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, case_args = request.split_case_args(argv)
    found = commands()
    args = build_cli(found).parse_command_line(own)
    # Set explicitly: a runner started in the background of a non-interactive shell (nohup, a batch
    # script) inherits SIGINT as ignored, and Python then installs no handler of its own.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        module = found[args.command]
        return module.run(module.make_request(args, case_args, argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

"""Command line: python -m suite COMMAND ... (`python -m suite --help` lists the commands). Each command
is one module of suite/commands/ (NAME, HELP, add_arguments, make_request, run); this is only the entry
point that finds them, parses, and turns a refusal into one line and exit status 2."""

import argparse
import importlib
import pkgutil
import signal
import sys
from types import ModuleType

import suite.commands
from suite.base.errors import UsageError
from suite.execution import request


def commands() -> dict[str, ModuleType]:
    """The command modules by command name, in the order of their names."""
    found = (importlib.import_module(f"suite.commands.{info.name}")
             for info in pkgutil.iter_modules(suite.commands.__path__))
    return dict(sorted((module.NAME, module) for module in found if hasattr(module, "NAME")))


def build_cli(found: dict[str, ModuleType] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m suite",
                                     description="Distributed deep-learning training benchmarks for HPC clusters.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in (found or commands()).items():
        epilog = module.epilog() if hasattr(module, "epilog") else getattr(module, "EPILOG", None)
        command = sub.add_parser(name, help=module.HELP, epilog=epilog,
                                 formatter_class=getattr(module, "FORMATTER", argparse.HelpFormatter))
        module.add_arguments(command)
    return parser


def interrupt(signum, frame):
    """SIGINT and SIGTERM end the runner the same way, as KeyboardInterrupt (its run leaves a record saying so)."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, case_args = request.split_case_args(argv)
    found = commands()
    args = build_cli(found).parse_args(own)
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

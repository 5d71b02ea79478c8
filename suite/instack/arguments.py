"""The command lines' parser: a refusal in one line and exit status 2, as every other refusal of the suite
(argparse's own prints the whole usage first). Standard library only: `python -m suite`, the benchmarks'
scripts and the cases' data scripts (inside their stacks) use it."""

import argparse


class OneLineParser(argparse.ArgumentParser):
    """help_command: what lists the options, where `PROG --help` is not the command a user types (a data
    script that make runs)."""

    def __init__(self, *args, help_command: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.help_command = help_command or f"{self.prog} --help"

    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message} ('{self.help_command}' lists the options)\n")


def data_parser(case: str, description: str) -> OneLineParser:
    """The parser of a case's data script, named as a user runs it: `make data CASE=...`."""
    return OneLineParser(prog=f"make data CASE={case}", description=description,
                         help_command=f"make data CASE={case} ARGS=--help")

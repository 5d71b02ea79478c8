"""The command lines' parser: a refusal in one line and exit status 2, as every other refusal of the suite
(argparse's own prints the whole usage first). Used by `python -m suite` and the benchmarks' scripts."""

import argparse


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message} ('{self.prog} --help' lists the options)\n")

"""make as a user starts it, and the variables the Makefile says each goal takes (vars.<goal>)."""

import os
import re
import subprocess
from functools import cache

from conftest import ROOT


def first_make_env() -> dict:
    """This environment less what a parent make passes (under `make test` the tests run inside one), so that a
    make started here is a first one: it checks its command line's variables as a user's does."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def dry_run(goal: str, *variables: str) -> subprocess.CompletedProcess:
    """`make -n goal VARIABLE=value ...` in the checkout, as a first make."""
    return subprocess.run(["make", "--no-print-directory", "-n", goal, *variables], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=first_make_env())


@cache
def goal_variables() -> dict[str, tuple[str, ...]]:
    """{goal: its variables}, from make's own reading of the Makefile."""
    database = subprocess.run(["make", "-pn", "cases"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env=first_make_env()).stdout
    return {m[1]: tuple(m[2].split()) for m in re.finditer(r"^vars\.([a-z0-9-]+) :?= ?(.*)$", database, re.M)}

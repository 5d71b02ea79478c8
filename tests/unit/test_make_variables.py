"""make's command line: a variable the asked goal does not take is refused in one line, before anything runs, where
another goal takes it or it looks misspelt; every variable a goal names changes what it runs; and every
`make <goal> VARIABLE=...` the docs and the suite's messages show names variables of that goal."""

import re
import subprocess

import pytest
from support.makefile import ROOT, dry_run, first_make_env, goal_variables


@pytest.mark.parametrize("goal, given, message", [
    ("run", ["CASE=pytorch-gpt", "NODE=4"], "make run takes no NODE: did you mean NODES? Its variables: ARGS CASE"),
    ("run", ["GPU_PER_NODE=2"], "make run takes no GPU_PER_NODE: did you mean GPUS_PER_NODE?"),
    ("tune", ["TELEMETRY_INTERVAL=1"], "make tune takes no TELEMETRY_INTERVAL: did you mean TELEMETRY? Its variables:"),
    ("install", ["GPU_PER_NODE=2"], "make install takes no GPU_PER_NODE: did you mean GPUS_PER_NODE? (make "
                                    "compare-frameworks, make run and make tune take it); its variables: CASE FLAVOUR"),
    ("check-site", ["RUNTIME=docker"], "make check-site takes no RUNTIME (make compare-frameworks, make gpu-check, "
                                       "make run and make tune take it); its variables: CLUSTER MODULES ONLY PYTHON "
                                       "RESULTS RUNS SOURCE"),
    ("report", ["CASE=pytorch-gpt"], "make report takes no CASE (make data, make install, make query, make run, "),
    ("cases", ["NODES=2"], "its variables: none"),
])
def test_a_variable_the_goal_does_not_take_is_refused_in_one_line_before_anything_runs(goal, given, message):
    result = dry_run(goal, *given)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert result.stdout == ""  # not even the runner's .venv


@pytest.mark.parametrize("goal, given", [("run", "PYTHONPATH=/opt/x"), ("run", "OMP_NUM_THREADS=4"),
                                         ("containers", "SOURCE_DATE_EPOCH=1700000000"), ("test", "CI=true")])
def test_a_name_that_only_begins_like_a_variable_is_not_refused(goal, given):
    """Environment variables for the recipes (PYTHONPATH begins as PYTHON does; SOURCE_DATE_EPOCH as SOURCE,
    which make containers does not take) pass as make passes them."""
    assert dry_run(goal, given).returncode == 0


def test_two_goals_take_the_variables_of_both():
    assert dry_run("report", "compare", "RESULTS=r", "A=a", "B=b").returncode == 0
    assert "make report compare takes no CASE" in dry_run("report", "compare", "A=a", "B=b", "CASE=x").stderr


def test_other_names_reach_the_runs_environment(tmp_path):
    """NCCL_DEBUG=INFO on make's command line is how some users set a run's environment: it is not refused and
    the runner has it (the runner here is a stand-in .venv's python that prints it)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text('#!/bin/sh\necho "NCCL_DEBUG=$NCCL_DEBUG"\n')
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".installed").touch()  # newer than pyproject.toml: make installs nothing
    done = subprocess.run(["make", "--no-print-directory", "-s", "run", f"VENV={venv}", "NCCL_DEBUG=INFO"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=first_make_env())
    assert done.returncode == 0 and done.stdout == "NCCL_DEBUG=INFO\n", done.stdout + done.stderr


def test_a_make_a_recipe_starts_does_not_refuse_what_its_parent_passed():
    """make test-all's `$(MAKE) test TEST_SELECT=`, and the tests' own makes under make test TEST_WORKERS=0, inherit
    their parent's variables: only the first make checks its command line."""
    inherited = {**first_make_env(), "MAKELEVEL": "1", "MAKEFLAGS": "-- TEST_WORKERS=0"}
    done = subprocess.run(["make", "--no-print-directory", "-n", "run"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=inherited)
    assert done.returncode == 0 and "-m suite run" in done.stdout, done.stderr
    first = subprocess.run(["make", "--no-print-directory", "-n", "run"], cwd=ROOT, capture_output=True, text=True,
                           timeout=300, env={**inherited, "MAKELEVEL": "0"})
    assert first.returncode == 2 and "make run takes no TEST_WORKERS" in first.stderr, first.stderr


# What a goal needs to run at all, and the variables its recipe's script reads from the environment make passes
NEEDED = {"rerun": ("RECORD=r.json",), "resume": ("SWEEP=s",), "compare": ("A=a", "B=b"), "wheels": ("WHEELS=w",)}
READ_FROM_THE_ENVIRONMENT = {"PYTHON_MATRIX": "tools/python-matrix.sh"}
SWITCHES = re.search(r"^SWITCHES := (.*)$", (ROOT / "Makefile").read_text(), re.M)[1].split()


def given_with(goal: str, variable: str) -> list[str]:
    value = "1" if variable in SWITCHES else "--given-value" if variable.endswith("ARGS") else "given-value"
    return [*(v for v in NEEDED.get(goal, ()) if not v.startswith(f"{variable}=")), f"{variable}={value}"]


@pytest.mark.parametrize("goal, variable", [(g, v) for g, vs in sorted(goal_variables().items()) for v in vs])
def test_each_variable_a_goal_names_changes_what_it_runs(goal, variable):
    """A goal's list holds only what its recipe reads: given, each changes the commands `make -n` shows (or, for
    a script that reads it from the environment, that script runs and reads it)."""
    plain = dry_run(goal, *NEEDED.get(goal, ()))
    assert plain.returncode == 0, plain.stderr
    if variable in READ_FROM_THE_ENVIRONMENT:
        script = READ_FROM_THE_ENVIRONMENT[variable]
        assert script in plain.stdout and variable in (ROOT / script).read_text()
        return
    given = dry_run(goal, *given_with(goal, variable))
    assert "takes no" not in given.stderr and (given.stdout, given.stderr) != (plain.stdout, plain.stderr)


VALUE = r"""(?:"[^"]*"|'[^']*'|[^\s"'`\]]*)"""
MAKE_COMMAND = re.compile(rf"\bmake ([a-z][a-z0-9-]*)((?:\s+\[?[A-Z][A-Z0-9_]*={VALUE}\]?)+)")
WHERE_SHOWN = ["README.md", "CONTRIBUTING.md", "Makefile", "docs/*.md", "containers/README.md", "suite/**/*.py",
               "benchmarks/*.py", "tools/*", "cases/*/*.py", "cases/*/case.toml", "hostfiles/*"]


def shown_make_commands() -> list[tuple[str, str, str]]:
    """(file, goal, variable) for each variable of each `make <goal> VARIABLE=value ...` in the docs and sources."""
    found = []
    for pattern in WHERE_SHOWN:
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file():
                for match in MAKE_COMMAND.finditer(path.read_text(errors="replace")):
                    found += [(str(path.relative_to(ROOT)), match[1], name)
                              for name in re.findall(r"\[?([A-Z][A-Z0-9_]*)=", match[2])]
    return found


def test_every_make_command_the_docs_and_messages_show_names_variables_of_its_goal():
    shown = shown_make_commands()
    assert len({(goal, name) for _, goal, name in shown}) > 60  # the scan finds them
    takes = goal_variables()
    wrong = sorted({f"{file}: make {goal} {name}=" for file, goal, name in shown
                    if goal in takes and name not in (*takes[goal], "BOOTSTRAP_PYTHON")})
    assert wrong == []
    assert {goal for _, goal, _ in shown} <= {*takes, "-C", "-n", "-s"}, "a goal shown without its variables named"


def test_every_goal_of_the_makefile_names_its_variables():
    rules = re.findall(r"^([a-z][a-z0-9-]*(?: [a-z][a-z0-9-]*)*):", (ROOT / "Makefile").read_text(), re.M)
    goals = {goal for rule in rules for goal in rule.split()}
    assert goals - set(goal_variables()) == set()


def test_make_help_lists_every_goal_with_its_variables():
    shown = subprocess.run(["make", "--no-print-directory", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                           timeout=300, env=first_make_env())
    assert shown.returncode == 0, shown.stderr
    listed = {line.split()[0]: tuple(line.split()[1:]) for line in shown.stdout.splitlines()[1:]}
    assert listed == goal_variables() and "run" in listed

"""Every command is one module of suite/commands/ with its arguments beside its run, and gets a typed
request, never the parser's Namespace."""

import argparse
import dataclasses
import pkgutil
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from support.makefile import goal_variables

import suite.commands
from suite import cli
from suite.inputs.cases import load_case

COMMANDS = cli.commands()
# the least each command needs on its command line to parse
MINIMAL = {"data": ["--case", "mxnet-imagenet"], "wheels": ["--dest", "w"], "validate": [str(ROOT / "pyproject.toml")],
           "predict": ["--case", "pytorch-ddp", "--devices", "8"], "compare": ["a", "b"], "rerun": ["r.json"],
           "resume": ["s"], "containers": ["check"]}


def test_the_commands_a_user_knows_are_all_there():
    assert {"run", "rerun", "resume", "report", "compare", "compare-frameworks", "query", "predict", "doctor", "data",
            "install", "wheels", "cases", "containers", "validate"} <= set(COMMANDS)


def test_every_module_of_the_commands_folder_is_a_command_but_the_named_helpers():
    modules = {info.name for info in pkgutil.iter_modules(suite.commands.__path__)}
    assert cli.NOT_COMMANDS <= modules
    assert {m.__name__.rsplit(".", 1)[-1] for m in COMMANDS.values()} == modules - cli.NOT_COMMANDS


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_module_meets_the_command_contract(name):
    module = COMMANDS[name]
    assert cli.contract_problems(module) == [], f"suite/commands: {name}"
    assert module.NAME == name and isinstance(module.HELP, str)
    args = cli.build_cli().parse_args([name, *MINIMAL.get(name, [])])
    request = module.make_request(args, [], [name])
    assert dataclasses.is_dataclass(request) and not isinstance(request, argparse.Namespace)


def test_a_module_that_does_not_meet_the_contract_stops_the_command_line(tmp_path, monkeypatch):
    """A module in suite/commands/ with an EPILOG that is not text, a HELP that is not text and a run that is not
    a function, or without a NAME, is named with what it lacks, instead of vanishing from the commands (or
    failing later, in one command's --help)."""
    (tmp_path / "half.py").write_text('NAME = "half"\nHELP = 3\nEPILOG = 3\n\ndef add_arguments(parser):\n    pass\n\n'
                                      'def make_request(args, case_args, argv):\n    return None\n\nrun = None\n')
    (tmp_path / "nameless.py").write_text('"""A command that forgot its NAME."""\n')
    monkeypatch.setattr(suite.commands, "__path__", [*suite.commands.__path__, str(tmp_path)])
    for name in ("half", "nameless"):
        monkeypatch.delitem(sys.modules, f"suite.commands.{name}", raising=False)
    with pytest.raises(RuntimeError) as refused:
        cli.commands()
    said = str(refused.value)
    assert said.startswith("suite/commands/half.py is not a command: HELP is not a non-empty string; "
                           "EPILOG is neither a string nor None; run is not a function"), said
    (tmp_path / "half.py").unlink()
    with pytest.raises(RuntimeError, match="nameless.py is not a command: no NAME; no HELP; no add_arguments; "
                                           "no make_request; no run "):
        cli.commands()
    for name in ("half", "nameless"):
        sys.modules.pop(f"suite.commands.{name}", None)


def test_a_command_without_epilog_and_formatter_gets_the_contract_s_defaults():
    """EPILOG and FORMATTER are the contract's two members with defaults (cli.CommandDefaults): none of the
    commands that take them repeats them."""
    plain = [name for name, module in COMMANDS.items() if not {"EPILOG", "FORMATTER"} & set(vars(module))]
    assert "doctor" in plain and "predict" in plain
    assert all(vars(module).get("EPILOG", "") is not None for module in COMMANDS.values())
    assert all(vars(module).get("FORMATTER") is not argparse.HelpFormatter for module in COMMANDS.values())
    parsers = cli.build_cli().commands
    assert parsers["doctor"].epilog is None and parsers["doctor"].formatter_class is argparse.HelpFormatter
    assert parsers["compare"].formatter_class is argparse.RawDescriptionHelpFormatter and parsers["compare"].epilog


def test_options_shared_by_run_and_compare_frameworks_are_defined_once():
    parser = cli.build_cli()
    frameworks = parser.parse_args(["compare-frameworks", "--nodes", "2", "--tiny"])
    request = COMMANDS["compare-frameworks"].make_request(frameworks, ["--num-iters", "1"], [])
    assert request.run.nodes == "2" and request.tiny and request.run.case_args == ["--num-iters", "1"]
    with pytest.raises(SystemExit):
        parser.parse_args(["compare-frameworks", "--case", "tf-cifar"])  # each case is run by it


def test_run_tiny_puts_the_case_s_tiny_sizes_before_the_options_given():
    typed = ["run", "--case", "pytorch-gpt", "--tiny"]
    req = COMMANDS["run"].make_request(cli.build_cli().parse_args(typed), ["--num-iters", "5"], typed)
    case = load_case("pytorch-gpt")
    assert req.case_args == [*case.tiny_args(), "--num-iters", "5"]
    options = case.parse_options(req.case_args)
    assert options["layers"] == case.spec["tiny"]["layers"] == 2 and options["num-iters"] == 5  # the later wins
    plain = ["run", "--case", "pytorch-gpt"]
    assert COMMANDS["run"].make_request(cli.build_cli().parse_args(plain), [], plain).case_args == []
    make = subprocess.run(["make", "-n", "run", "CASE=pytorch-gpt", "TINY=1", "ARGS=--num-iters 5"], cwd=ROOT,
                          capture_output=True, text=True)
    assert make.returncode == 0 and "--tiny -- --num-iters 5" in make.stdout, make.stdout + make.stderr


@pytest.mark.parametrize("target", ["run", "tune", "compare-frameworks"])
def test_make_echoes_one_command_line_of_the_options_given_and_parses_them_as_the_cli_does(target):
    """What `make run` prints is the command it runs, one line with no gaps for the variables left out, and
    every variable given becomes its option."""
    case_variable = ["CASE=jax-gpt"] if target != "compare-frameworks" else []  # every case's there
    plain = subprocess.run(["make", "-n", target, *case_variable, "TINY=1"], cwd=ROOT, capture_output=True, text=True)
    commands = [line for line in plain.stdout.splitlines() if "-m suite" in line]
    assert plain.returncode == 0 and len(commands) == 1, plain.stdout + plain.stderr
    assert "  " not in commands[0] and "\\" not in commands[0] and commands[0].rstrip().endswith("--tiny --")
    given = {"GPUS_PER_NODE": "2", "HOSTFILE": "hostfiles/loopback4", "RUNTIME": "modules", "TIMEOUT": "60",
             "WHEELS": "/w", "MODULES": "a b", "PYTHON": "/usr/bin/python3"}
    full = subprocess.run(["make", "-n", target, *case_variable, *(f"{k}={v}" for k, v in given.items()),
                           "ARGS=--num-iters 5"], cwd=ROOT, capture_output=True, text=True)
    line = next(line for line in full.stdout.splitlines() if "-m suite" in line)
    argv = shlex.split(line.split(" -m suite ", 1)[1])
    assert argv[0] == target and argv[-3:] == ["--", "--num-iters", "5"]
    options = dict(zip(argv[1:-3:2], argv[2:-3:2]))
    case = {"--case": "jax-gpt"} if case_variable else {}
    assert options == {**case, "--nodes": "1", "--repeat": "1",
                       "--gpus-per-node": "2", "--hostfile": "hostfiles/loopback4", "--runtime": "modules",
                       "--timeout": "60", "--wheels": "/w", "--modules": "a b", "--python": "/usr/bin/python3"}


# the Makefile targets that write or read records: the variables each passes on (targets with runs pass RUNS too)
RECORD_FOLDERS = {"run": ("RESULTS", "RUNS"), "tune": ("RESULTS", "RUNS"), "compare-frameworks": ("RESULTS", "RUNS"),
                  "rerun": ("RESULTS", "RUNS"), "resume": ("RESULTS", "RUNS"), "check-site": ("RESULTS", "RUNS"),
                  "report": ("RESULTS",), "query": ("RESULTS",)}


@pytest.mark.parametrize("target", sorted(RECORD_FOLDERS))
def test_make_passes_the_records_and_runs_folders_to_the_command(target):
    """RESULTS and RUNS reach the command as the folders it writes and reads, parsed as the CLI parses them; left
    out, the command keeps its defaults (reports/results, runs)."""
    folders = {"RESULTS": "/study/results", "RUNS": "/study/runs"}
    needed = {"rerun": ["RECORD=r.json"], "resume": ["SWEEP=s"]}.get(target, [])

    def parsed(*variables: str) -> argparse.Namespace:
        make = subprocess.run(["make", "-n", target, *needed, *variables], cwd=ROOT, capture_output=True, text=True)
        line = next((line for line in make.stdout.splitlines() if " -m suite " in line), None)
        assert make.returncode == 0 and line, make.stdout + make.stderr
        argv = shlex.split(line.split(" -m suite ", 1)[1])
        return cli.build_cli().parse_args(argv[:argv.index("--")] if "--" in argv else argv)

    given = parsed(*(f"{name}={folders[name]}" for name in RECORD_FOLDERS[target]))
    assert given.results_dir == Path(folders["RESULTS"])
    if "RUNS" in RECORD_FOLDERS[target]:
        assert given.runs_dir == Path(folders["RUNS"])
    plain = parsed()
    assert plain.results_dir == ROOT / "reports" / "results"
    assert getattr(plain, "runs_dir", ROOT / "runs") == ROOT / "runs"


def test_every_command_that_takes_a_records_folder_names_its_make_variable_where_make_passes_it():
    """--results-dir's and --runs-dir's help names RESULTS and RUNS in the commands a Makefile target starts,
    and only there (predict has no target)."""
    targets = {"check-site": "check"}
    started = {targets.get(target, target) for target in RECORD_FOLDERS}
    for name, module in COMMANDS.items():
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        helps = {action.dest: action.help or "" for action in parser._actions}
        if "results_dir" in helps:
            assert ("(Make: RESULTS)" in helps["results_dir"]) == (name in started), name
        if "runs_dir" in helps:
            assert "(Make: RUNS)" in helps["runs_dir"], name


def test_the_report_s_pages_go_beside_the_results_folder_unless_out_says_where(tmp_path):
    """reports/results -> reports/, as a study's sweeps and tuning studies go beside its results folder."""
    def request(*argv: str):
        args = cli.build_cli().parse_args(["report", *argv])
        return COMMANDS["report"].make_request(args, [], ["report", *argv])

    assert request().out == ROOT / "reports"
    (tmp_path / "study" / "results").mkdir(parents=True)
    (tmp_path / "r").mkdir()
    assert request("--results-dir", str(tmp_path / "study" / "results")).out == tmp_path / "study"
    assert request("--results-dir", str(tmp_path / "r"), "--out", str(tmp_path / "pages")).out == tmp_path / "pages"


def test_run_tiny_of_an_unknown_case_is_refused_with_exit_2(capsys):
    assert cli.main(["run", "--case", "no-such-case", "--tiny"]) == 2
    assert "unknown case 'no-such-case'" in capsys.readouterr().err


def test_a_bad_tolerance_is_refused_with_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["compare", "a", "b", "--tolerance", "1.5"])
    assert exit_.value.code == 2 and "fraction" in capsys.readouterr().err


def test_case_options_after_a_command_that_takes_none_are_refused_in_one_line(capsys):
    assert cli.main(["report", "--", "--batch-size", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report takes no case options" in err


def test_a_runner_started_with_sigint_ignored_still_stops_on_it(tmp_path):
    """A process started in the background of a non-interactive shell inherits SIGINT as ignored; the
    entry point sets its own handler, so Ctrl-C (or scancel --signal=INT) still ends it."""
    code = ("import signal, sys, time\n"
            "from suite import cli\n"
            "cli.commands = lambda: {'wait': Wait}\n"
            "class Wait:\n"
            "    NAME, HELP, EPILOG, FORMATTER = 'wait', 'waits', None, __import__('argparse').HelpFormatter\n"
            "    add_arguments = staticmethod(lambda parser: None)\n"
            "    make_request = staticmethod(lambda args, case_args, argv: None)\n"
            "    @staticmethod\n"
            "    def run(request):\n"
            "        try:\n"
            "            print('ready', flush=True)\n"
            "            time.sleep(600)\n"
            "        except KeyboardInterrupt:\n"
            "            print('interrupted', flush=True)\n"
            "            return 130\n"
            "sys.exit(cli.main(['wait']))\n")
    runner = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert runner.stdout.readline().strip() == "ready"
        status = open(f"/proc/{runner.pid}/status").read()
        ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
        assert not ignored & (1 << (signal.SIGINT - 1)), "the entry point left SIGINT ignored"
        runner.send_signal(signal.SIGINT)
        # Ended by the signal, not by its sleep's end (600 s): the wait allows a starved host (the niced
        # interpreter matrix beside the integration tests) its seconds to deliver it and exit.
        assert runner.wait(timeout=300) == 130 and runner.stdout.read().strip() == "interrupted"
    finally:
        runner.kill()
        runner.wait()


RUNNER_LINE = re.compile(r"\t\$\((SUITE\)|VENV\)/bin/python )")  # a recipe line that starts the runner's Python


def runner_targets() -> list[str]:
    """The Makefile's targets whose recipe starts the runner's Python (`$(SUITE)` or the .venv's python) and
    otherwise only checks its variables (`$(if ...)`), read from the Makefile so that a new one is checked too."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    rules = re.findall(r"^([a-z][a-z-]*):[^\n=]*\n((?:\t[^\n]*\n)+)", text, re.M)
    return sorted(name for name, recipe in rules
                  if any(RUNNER_LINE.match(line) for line in recipe.splitlines())
                  and all(RUNNER_LINE.match(line) or line.startswith("\t$(if ") for line in recipe.splitlines()))


# Short sleeps, not `wait` on one long one: a signal that comes just before sh blocks in `wait` is taken only
# when that sleep ends (30 s later), and the test passed after a needless half minute.
FAKE_RUNNER = """#!/bin/sh
trap 'echo "ended by SIGTERM"; exit 143' TERM
echo ready
i=0
while [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
"""


def test_the_makefile_s_runner_targets_are_found():
    assert {"run", "tune", "check-site", "compare-frameworks", "rerun", "resume", "bench", "gpu-check",
            "containers", "wheels"} <= set(runner_targets()) and "test" not in runner_targets()


@pytest.mark.parametrize("target", runner_targets())
def test_a_sigterm_to_make_reaches_the_runner(tmp_path, target):
    """`kill <make>` (a batch script's, a tool's) must end the run: make passes SIGTERM only to its own child,
    so that child has to be the runner itself, not a shell around it that dies and leaves the runner going.
    The runner here is a stand-in .venv's python that says whether the signal came."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_RUNNER)
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".installed").touch()  # newer than pyproject.toml: make installs nothing
    needed = [given for given in ("CASE=pytorch-ddp", "A=a", "B=b", "RECORD=r.json", "SWEEP=s", "WHEELS=w")
              if given.split("=")[0] in goal_variables()[target]]
    make = subprocess.Popen(["make", "--no-print-directory", target, f"VENV={venv}", *needed], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        while (line := make.stdout.readline()) and line.strip() != "ready":
            lines.append(line)
        assert line.strip() == "ready", "".join(lines)
        make.send_signal(signal.SIGTERM)
        make.wait(timeout=60)
        rest, _ = make.communicate(timeout=60)  # to the stand-in's end: by the signal, or its sleep's after 30 s
        assert "ended by SIGTERM" in rest, rest
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(make.pid)], check=False)  # what is left of make's session
        make.wait()

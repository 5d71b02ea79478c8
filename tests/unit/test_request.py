"""suite/execution/request.py: one owner of the `run` options. A request survives its command line and its
record both ways, for every option; the entry point, the batch job and rerun all go through it."""

import dataclasses
import sys
from pathlib import Path

import pytest

from suite import cli
from suite.base.errors import UsageError
from suite.execution import request
from suite.execution.clusters import load_cluster
from suite.execution.request import RunRequest, from_argv, from_record, recorded, to_argv
from suite.inputs.cases import load_case

# Every field set to a value other than its default: a field that to_argv forgets, or that the parser
# reads into another field, makes the round trip fail.
EVERYTHING = RunRequest(
    case="mxnet-imagenet", nodes="1,2", gpus_per_node="2,4", cluster="juwels-booster", hostfile="hostfiles/loopback",
    runtime="docker", scheduler="ssh", repeat="3", timeout="900", stall="120", baseline="reports/results/b.json",
    results_dir=Path("/tmp/results"), runs_dir=Path("/tmp/runs"), data_dir=Path("/tmp/data"), dry_run=True,
    run_id="20260101T000000Z-x", precheck="off", telemetry_interval=0.5, cpu_bind="numa", flavour="cuda",
    wheels=Path("/tmp/wheels"), modules="Stages/2024 GCC/12 PyTorch/2.1.2", source="/p/venv/activate.sh",
    python="/p/venv/bin/python",
    case_args=["--image-size", "64", "--same-work"])
OPTIONS = {f.name for f in dataclasses.fields(RunRequest)} - request.NOT_OPTIONS


def test_every_field_differs_from_its_default_in_the_example():
    default = RunRequest()
    assert [name for name in OPTIONS if getattr(EVERYTHING, name) == getattr(default, name)] == []


@pytest.mark.parametrize("precheck", ["auto", "on", "off"])
def test_a_request_survives_its_command_line(precheck):
    req = dataclasses.replace(EVERYTHING, precheck=precheck)
    assert from_argv(to_argv(req)) == req
    assert from_argv(["python", "-m", "suite", *to_argv(req)]) == req
    assert from_argv(to_argv(RunRequest())) == RunRequest()


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_each_option_alone_survives_its_command_line(name):
    req = dataclasses.replace(RunRequest(), **{name: getattr(EVERYTHING, name)})
    argv = to_argv(req)
    assert from_argv(argv) == req
    assert argv[:2] != ["run", "--"] or name == "case_args"  # it is written, not left to a default


def test_every_option_of_the_entry_point_is_a_field_of_the_request():
    run = cli.build_cli().commands["run"]
    dests = {a.dest for a in run._actions if a.dest != "help"}
    assert dests == OPTIONS | {"tiny"}  # --tiny is no field: `run` turns it into the case's options (case_args)
    parsed = run.parse_args(to_argv(EVERYTHING)[1:to_argv(EVERYTHING).index("--")])
    assert request.from_namespace(parsed, EVERYTHING.case_args) == EVERYTHING


def test_a_request_survives_its_record():
    kept = recorded(EVERYTHING)
    import json

    again = from_record({"provenance": {"request": json.loads(json.dumps(kept)), "argv": ["ignored"]}})
    for name in request.RECORDED:
        assert getattr(again, name) == getattr(EVERYTHING, name), name


def test_an_older_record_is_read_back_from_its_command_line():
    argv = ["python", "-m", "suite", "run", "--case", "tf-cifar", "--repeat", "2", "--timeout", "60",
            "--gpus-per-node", "2", "--some-old-option", "x", "--", "--epochs", "2"]
    req = from_record({"provenance": {"argv": argv}})
    assert (req.case, req.repeat, req.timeout, req.gpus_per_node, req.case_args) == ("tf-cifar", "2", "60", "2",
                                                                                       ["--epochs", "2"])
    with pytest.raises(UsageError, match="not a `suite run` command line"):
        from_record({"provenance": {"argv": ["python", "-m", "suite", "report"]}})


def test_the_entry_point_records_what_was_typed_and_others_their_own_line():
    args = cli.build_cli().parse_args(["run", "--nodes", "2"])
    typed = request.from_namespace(args, ["--epochs", "1"], ["run", "--nodes", "2", "--", "--epochs", "1"])
    assert typed.provenance_argv() == ["python", "-m", "suite", "run", "--nodes", "2", "--", "--epochs", "1"]
    built = RunRequest(nodes="2", case_args=["--epochs", "1"])
    assert built.provenance_argv() == typed.provenance_argv()


def test_the_batch_job_runs_the_resolved_request(tmp_path):
    from suite.execution.run import batch_job, check, run_context

    req = RunRequest(case="pytorch-ddp", scheduler="slurm", dry_run=True, precheck="on", telemetry_interval=0,
                     runs_dir=tmp_path / "runs", results_dir=tmp_path / "results", case_args=["--num-iters", "2"])
    checked = check(req)
    ctx = run_context(req, checked, checked.worlds[0], None)
    job = batch_job(req, checked, ctx)
    assert job.inner_argv[:3] == (sys.executable, "-m", "suite")
    inner = from_argv(list(job.inner_argv))
    assert (inner.case, inner.nodes, inner.gpus_per_node, inner.run_id) == ("pytorch-ddp", "1", "1", ctx.run_id)
    assert (inner.timeout, inner.stall) == (f"{checked.timeout_s:.0f}", f"{checked.stall_s:.0f}")
    assert (inner.precheck, inner.telemetry_interval, inner.cpu_bind) == ("on", 0.0, "none")
    assert inner.results_dir == (tmp_path / "runs").resolve() / ctx.run_id / "record" and not inner.dry_run
    assert inner.case_args == ["--num-iters", "2"]


def test_a_rerun_asks_for_what_the_record_asked(tmp_path):
    from suite.execution import rerun

    record = {"case": "pytorch-synthetic", "run_id": "r",
              "world": {"nodes": 1, "devices": 2, "slots": {"localhost": 2}, "hostfile": "hostfiles/localhost",
                        "cluster": "localhost", "binding": {"policy": "cores", "ranks": []}},
              "execution": {"runtime": "local"},
              "provenance": {"argv": ["whatever"], "request": recorded(RunRequest(
                  gpus_per_node="2", repeat="3", timeout="600", stall="60", precheck="on", telemetry_interval=2.0,
                  case_args=["--num-iters", "2"]))}}
    args = cli.build_cli().parse_args(["rerun", "x.json", "--results-dir", str(tmp_path)])
    args.record = "x.json"
    req = rerun.request(record, args)
    assert (req.repeat, req.timeout, req.stall, req.gpus_per_node) == ("3", "600", "60", "2")
    assert (req.precheck, req.telemetry_interval, req.cpu_bind, req.case_args) == ("on", 2.0, "cores",
                                                                                   ["--num-iters", "2"])
    assert req.results_dir == tmp_path and req.run_id.endswith(tuple("0123456789abcdef"))
    assert from_argv(req.provenance_argv()) == dataclasses.replace(req, argv=[])


def loaded_by(module: str) -> set[str]:
    """The suite modules that importing `module` loads, in a fresh interpreter."""
    import subprocess

    code = f"import sys, {module}; print(' '.join(m for m in sys.modules if m.startswith('suite')))"
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(cli.__file__).parent.parent, capture_output=True,
                          text=True, check=True)
    return set(done.stdout.split())


RUNNING = {"suite.cli", "suite.execution.run", "suite.execution.rerun", "suite.execution.resume",
           "suite.execution.same_work_runs", "suite.commands.compare_frameworks", "suite.execution.plugins",
           "suite.stacks.install"}


@pytest.mark.parametrize("module", ["suite.execution.run", "suite.execution.rerun", "suite.execution.resume",
                                    "suite.execution.same_work_runs", "suite.commands.compare_frameworks"])
def test_the_runner_does_not_import_the_entry_point(module):
    assert "suite.cli" not in loaded_by(module)


@pytest.mark.parametrize("module", ["suite.analysis.report", "suite.analysis.same_work", "suite.analysis.compare",
                                    "suite.records.read"])
def test_what_reads_records_imports_no_running_code(module):
    assert loaded_by(module) & RUNNING == set()


def test_profiles_and_cases_used_above_exist():
    load_cluster("juwels-booster")
    load_case("mxnet-imagenet")


@pytest.mark.parametrize("module", ["suite.cli", "suite.execution.run", "suite.analysis.scaling",
                                    "suite.analysis.compare"])
def test_commands_start_without_scipy(module):
    """scipy (and numpy) are imported where a fit or a test needs them: at the top of a module the `suite`
    command imports, they cost every command, and every rank's runner, half a second."""
    import subprocess

    code = f"import sys, {module}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(cli.__file__).parent.parent, capture_output=True,
                          text=True, check=True)
    assert "suite" in done.stdout.split() and {"scipy", "numpy"} & set(done.stdout.split()) == set()

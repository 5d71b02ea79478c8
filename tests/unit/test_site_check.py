"""`suite check`'s logic without running a case: the table, its JSON and report page, the exit status,
which paths a host offers, why a path is not available, and how a path that ran is judged
(suite/analysis/site_check.py, suite/execution/site_paths.py, suite/execution/site_runner.py)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from suite.analysis import site_check
from suite.analysis.site_check import FAILED, OK, UNAVAILABLE, PathResult, SiteCheck
from suite.base.errors import UsageError
from suite.execution import plugins, site_paths, site_runner
from suite.execution.clusters import Cluster
from suite.inputs.cases import load_case


def a_check(*outcomes: str, cluster: str = "localhost", only: str | None = None, at: str = "2026-11-25T06:00:00Z"):
    paths = [PathResult("pytorch-ddp", "local", f"launcher{i}", 1, 2, outcome,
                        "" if outcome == OK else f"why {i}", None if outcome == UNAVAILABLE else 12.3)
             for i, outcome in enumerate(outcomes)]
    return SiteCheck(f"{at}-{cluster}-check", cluster, "local", "host1", at, 0, only, 40.0, paths)


@pytest.mark.parametrize("outcomes, status", [((OK, UNAVAILABLE), 0), ((OK, FAILED, UNAVAILABLE), 1),
                                              ((FAILED, UNAVAILABLE), 1), ((FAILED,), 1)])
def test_exit_status_is_1_only_when_an_available_path_failed(outcomes, status):
    assert site_check.exit_status(a_check(*outcomes)) == status


@pytest.mark.parametrize("outcomes", [(UNAVAILABLE,), (UNAVAILABLE, UNAVAILABLE), ()])
def test_a_check_where_no_path_ran_exits_with_its_own_status_not_0(outcomes):
    assert site_check.exit_status(a_check(*outcomes)) == site_check.EXIT_NOTHING_CHECKED == 3


def test_an_interrupted_check_exits_130_whatever_its_rows_say():
    for outcomes in ((OK,), (UNAVAILABLE,), (FAILED,)):
        check = a_check(*outcomes)
        check.interrupted = True
        assert site_check.exit_status(check) == 130
        assert "interrupted" in site_check.summary_line(check)


def test_a_check_where_nothing_ran_says_that_nothing_was_checked():
    line = site_check.summary_line(a_check(UNAVAILABLE, UNAVAILABLE))
    assert "0 ok, 0 failed, 2 not available here" in line and "nothing of this site was checked" in line
    assert "nothing" not in site_check.summary_line(a_check(OK, UNAVAILABLE))


def test_the_table_has_a_row_per_path_with_outcome_why_and_seconds():
    table = site_check.format_table(a_check(OK, FAILED, UNAVAILABLE)).splitlines()
    assert table[0].split() == list(site_check.COLUMNS)
    assert table[1].split()[:7] == ["pytorch-ddp", "local", "launcher0", "1", "2", "ok", "12"]
    assert table[2].endswith("why 1") and " failed " in table[2]
    assert " not available here " in table[3] and table[3].split()[-3:] == ["-", "why", "2"]  # nothing ran: no seconds


def test_an_unknown_outcome_is_refused():
    with pytest.raises(ValueError, match="outcome must be one of"):
        PathResult("c", "local", "l", 1, 1, "passed")


def test_the_why_is_one_line_of_bounded_length():
    assert site_check.one_line("a\n  b\tc") == "a b c"
    assert len(site_check.one_line("x" * 1000)) == site_check.WHY_CHARS


def test_the_json_beside_the_results_reads_back_and_the_report_shows_the_latest_whole_check(tmp_path):
    results = tmp_path / "reports" / "results"
    older = a_check(FAILED, at="2026-11-24T06:00:00Z")
    whole = a_check(OK, UNAVAILABLE, at="2026-11-25T06:00:00Z")
    narrowed = a_check(OK, only="ranks", at="2026-11-25T07:00:00Z")
    other = a_check(FAILED, cluster="loopback-ssh")
    for one in (older, whole, narrowed, other):
        path = site_check.write_check(one, results)
        assert path.parent == tmp_path / "reports" / "site-checks"
    (tmp_path / "reports" / "site-checks" / "junk.json").write_text("[]")
    warnings = []
    checks = site_check.load_checks(results, warnings.append)
    assert [c.check_id for c in checks][:2] == [older.check_id, whole.check_id] and len(checks) == 4
    assert checks[1] == whole and len(warnings) == 1 and "junk.json" in warnings[0]
    assert [c.check_id for c in site_check.latest_per_cluster(checks)] == [whole.check_id, other.check_id]
    page = site_check.report_body(results, warnings.append)
    local = page.split("<h2>localhost")[1].split("<h2>")[0]
    assert page.count("<h2>") == 2 and whole.check_id in local
    assert older.check_id not in page and narrowed.check_id not in page
    assert "not available here" in page and "1 ok, 0 failed, 1 not available here" in page


def test_the_report_page_says_how_to_make_a_check_when_there_is_none(tmp_path):
    assert "make check-site" in site_check.report_body(tmp_path / "results")


def test_the_report_links_a_page_of_site_checks(tmp_path):
    from suite.analysis.report import write_report

    results = tmp_path / "results"
    results.mkdir()
    site_check.write_check(a_check(OK, FAILED), results)
    written = write_report(results, tmp_path / "out", warn=lambda m: None)
    page = tmp_path / "out" / "site-check.html"
    assert page in written and "why 1" in page.read_text()
    assert 'href="site-check.html"' in (tmp_path / "out" / "index.html").read_text()


# --- which paths --------------------------------------------------------------------------------------

def test_each_launcher_of_a_case_is_a_path():
    assert site_paths.launchers_of(load_case("pytorch-ddp")) == [("torchrun", ("--launcher", "torchrun")),
                                                           ("ranks", ("--launcher", "ranks"))]
    assert site_paths.launchers_of(load_case("tf-cifar")) == [("tfdist", ())]


def test_the_paths_of_this_host_run_on_one_node_and_other_hosts_add_two():
    local, ssh = plugins.load("schedulers", "local"), plugins.load("schedulers", "ssh")
    assert site_paths.node_counts(local) == [1] and site_paths.node_counts(ssh) == [1, 2]
    cases = [load_case("pytorch-ddp"), load_case("tf-cifar")]
    found = site_paths.site_paths(None, cases, ["local", "docker"], [1, 2], gpus=0)
    assert len(found) == (2 + 1) * 2 * 2
    assert {(p.nodes, p.per_node) for p in found} == {(1, 2), (2, 1)}  # CPU workers: two in all
    assert {p.per_node for p in site_paths.site_paths(None, cases, ["local"], [1, 2], gpus=4)} == {4}
    assert site_paths.runtimes_for(None)[0] == "local"
    assert set(site_paths.runtimes_for(None)) == set(plugins.available("runtimes"))


def test_only_narrows_by_case_runtime_or_launcher_and_refuses_a_pattern_matching_nothing():
    found = site_paths.site_paths(None, [load_case("pytorch-ddp"), load_case("tf-cifar")], ["local", "docker"], [1], 0)
    assert {p.named() for p in site_paths.narrowed(found, ["ddp/local/ranks"])} == {"pytorch-ddp/local/ranks"}
    assert {p.runtime for p in site_paths.narrowed(found, ["/docker/"])} == {"docker"}
    assert len(site_paths.narrowed(found, None)) == len(found)
    with pytest.raises(UsageError, match="--only nosuch matches none of the 6 paths here"):
        site_paths.narrowed(found, ["nosuch"])


def test_the_runner_gets_the_case_at_its_tiny_sizes_with_the_launcher_chosen(tmp_path):
    [path] = site_paths.narrowed(site_paths.site_paths(None, [load_case("pytorch-ddp")], ["local"], [1], 0), ["ranks"])
    argv = site_runner.runner_argv(path, None, tmp_path / "r", tmp_path / "w")
    assert argv[1:4] == ["-m", "suite", "run"] and argv[argv.index("--gpus-per-node") + 1] == "2"
    assert argv[argv.index("--") + 1:] == [*load_case("pytorch-ddp").tiny_args(), "--launcher", "ranks"]


def test_the_runner_is_given_the_profile_as_the_check_was(tmp_path):
    """A shipped profile by its name; one given by its path (a site's own) by that path, which the runner reads."""
    from suite.execution.clusters import load_cluster

    [path] = site_paths.narrowed(site_paths.site_paths(None, [load_case("pytorch-ddp")], ["local"], [1], 0), ["ranks"])
    (tmp_path / "site.toml").write_text('scheduler = "local"\n')
    for given, passed in [("localhost", "localhost"), (str(tmp_path / "site.toml"), str(tmp_path / "site.toml"))]:
        argv = site_runner.runner_argv(path, load_cluster(given), tmp_path / "r", tmp_path / "w")
        assert argv[argv.index("--cluster") + 1] == passed


# --- why a path is not available ----------------------------------------------------------------------

def test_a_container_runtime_without_its_tool_is_not_available_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SUITE_APPTAINER", raising=False)
    apptainer = site_paths.runtime_problem("apptainer", None, "pytorch", "cpu")
    assert apptainer.startswith("apptainer (or singularity) on PATH")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert "Docker engine" in site_paths.runtime_problem("docker", None, "pytorch", "cpu")
    assert site_paths.runtime_problem("local", None, "pytorch", "cpu") is None  # the run builds it


def test_modules_without_an_environment_or_a_module_system_are_not_available(tmp_path):
    assert "no environment of the site named" in site_paths.runtime_problem("modules", None, "pytorch", "cpu")
    no_system = Cluster("site", tmp_path / "site.toml", plugins={"modules": {
        "init": str(tmp_path / "no-init.sh"), "load": ["PyTorch"], "purge": True}})
    assert site_paths.runtime_problem("modules", no_system, "pytorch", "cpu").startswith("no module system")


def test_a_sites_environment_without_the_stacks_framework_is_not_available(tmp_path):
    plain = Cluster("site", tmp_path / "site.toml", plugins={"modules": {"python": sys.executable, "purge": True}})
    assert site_paths.stack_frameworks("pytorch-horovod") == {"torch", "horovod"}
    assert site_paths.stack_frameworks("tensorflow") == {"tensorflow"}
    assert site_paths.stack_frameworks("jax") == {"jax"}  # a site's environment without jax is said before jax-gpt runs
    assert "has no mxnet" in site_paths.runtime_problem("modules", plain, "mxnet", "cpu")


def test_missing_data_and_too_few_hosts_are_not_available(tmp_path):
    data_less = Cluster("site", tmp_path / "site.toml", data_dir=tmp_path / "data")
    tf_cifar = load_case("tf-cifar")
    assert "data missing under" in site_paths.data_problem(tf_cifar, data_less, tf_cifar.tiny_args())
    assert site_paths.data_problem(load_case("pytorch-ddp"), data_less, load_case("pytorch-ddp").tiny_args()) is None
    one_host = Cluster("one", tmp_path / "one.toml", hostfile=ROOT / "hostfiles" / "localhost", scheduler="ssh")
    ssh = plugins.load("schedulers", "ssh")
    assert site_paths.hosts_problem(ssh, one_host, 2).startswith("2 nodes, but")
    assert site_paths.hosts_problem(ssh, one_host, 1) is None


# --- how a path went ----------------------------------------------------------------------------------

def test_the_why_of_a_failure_is_the_records_reason_else_the_runners_error_line():
    said = site_runner.why_failed(1, "lots\n", {"reason": "repetition 0: rank 1 exited with 1"})
    assert said.startswith("repetition 0")
    assert site_runner.why_failed(2, "x\nerror: no Docker image y\n", None) == "error: no Docker image y"
    assert site_runner.why_failed(1, "a\nlast words\n", None) == "exit 1: last words"
    assert site_runner.why_failed(-9, "", None) == "exit -9 with no output"


def gpu_record(device="cuda", backend="nccl", gpus=({"index": 0, "used": True, "util_pct": {"mean": 93.0}},),
               run_dir=None, node_gpus=1):
    """A record of a run on one node, node1, whose ranks reported `node_gpus` GPUs there."""
    return {"world": {"device_type": device, "slots": {"node1": 1}},
            "config": {"reported_by_case": {"backend": backend}},
            "metrics": {"telemetry": {"hosts": {"node1": {"gpus": list(gpus)}}}},
            "provenance": {"host_info": {"node1": {"gpus": [{"name": "NVIDIA H100"}] * node_gpus}}},
            "repetitions": [{"run_dir": run_dir}]}


def test_on_gpu_nodes_a_path_must_have_trained_on_their_gpus(tmp_path):
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank-00000.mllog").write_text(":::MLLOG {}\n")
    assert site_runner.gpu_problem(gpu_record("cpu", node_gpus=0)) is None  # CPU nodes ask nothing of the kind
    assert site_runner.gpu_problem(gpu_record(run_dir=str(tmp_path), node_gpus=4)) is None
    assert site_runner.gpu_problem(gpu_record("cpu", node_gpus=4)) == "trained on cpu although node1 has 4 GPU(s)"
    assert "backend gloo" in site_runner.gpu_problem(gpu_record(backend="gloo"))
    assert "no GPU telemetry from node1" in site_runner.gpu_problem(gpu_record(gpus=()))
    assert "no MLLOG lines" in site_runner.gpu_problem(gpu_record(run_dir=str(tmp_path / "elsewhere")))


def test_the_gpu_expectations_come_from_the_nodes_that_ran_not_from_the_host_that_checks():
    """The record alone decides: a check run on a login node without GPUs still holds a run on GPU nodes to
    the GPU checks; the launch host's facts (a record whose ranks reported none) make no node of the run."""
    assert site_runner.gpu_problem(gpu_record("cpu", node_gpus=2)) == "trained on cpu although node1 has 2 GPU(s)"
    record = gpu_record("cpu", node_gpus=0)
    record["provenance"]["host_info"]["launch-host"] = {"gpus": [{"name": "NVIDIA A100"}]}
    assert site_runner.gpu_problem(record) is None
    assert site_runner.node_gpus(record) == {"node1": 0}


def test_a_gpu_path_whose_gpus_were_idle_is_failed(tmp_path):
    idle = gpu_record(gpus=({"index": 0, "used": True, "util_pct": {"mean": 0.4}},
                            {"index": 1, "used": False, "util_pct": {"mean": 97.0}}))  # another job's
    assert site_runner.gpu_problem(idle) == "the run's GPUs were idle: 0.4% busy over the timed window (NVML)"
    unsampled = gpu_record(gpus=({"index": 0, "used": True, "util_pct": None},))
    assert site_runner.gpu_problem(unsampled) == ("no utilisation of the run's GPUs in its telemetry: whether the "
                                                  "run's GPUs trained is unknown")
    unmatched = gpu_record(gpus=({"index": 0, "util_pct": {"mean": 97.0}},))  # the ranks named no GPU
    assert site_runner.gpu_problem(unmatched).startswith("GPUs unmatched on node1")
    assert site_runner.gpu_problem(gpu_record()) is None  # 93% busy


def test_ctrl_c_during_the_availability_checks_ends_the_check_with_130(tmp_path, monkeypatch, capsys):
    def interrupted(self, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(site_paths.Availability, "problem", interrupted)
    monkeypatch.setattr(site_runner, "host_gpus", lambda: 0)
    status = site_runner.check_site(None, ["pytorch-ddp/local/ranks"], tmp_path / "results", tmp_path / "runs")
    assert status == 130
    [written] = (tmp_path / "site-checks").glob("*.json")
    table = json.loads(written.read_text())
    assert table["interrupted"] is True and table["paths"] == []
    assert "interrupted" in capsys.readouterr().out


def test_a_check_where_every_path_was_not_available_exits_3(tmp_path, monkeypatch):
    monkeypatch.setattr(site_paths.Availability, "problem", lambda self, path: "no such thing here")
    monkeypatch.setattr(site_runner, "host_gpus", lambda: 0)
    status = site_runner.check_site(None, ["pytorch-ddp/local/"], tmp_path / "results", tmp_path / "runs")
    assert status == 3
    [written] = (tmp_path / "site-checks").glob("*.json")
    assert {p["outcome"] for p in json.loads(written.read_text())["paths"]} == {UNAVAILABLE}


def test_the_command_refuses_a_pattern_matching_nothing_in_one_line_before_anything_runs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "suite", "check", "--only", "no-such-path", "--results-dir",
                           str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: --only no-such-path matches none of"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
    assert not json.dumps(done.stdout).count("== check:")


def test_on_a_gpu_host_the_paths_take_its_gpus(tmp_path):
    """A host whose nvidia-smi lists 3 GPUs (tests/support/gpus.py): each path gets them all, and the table
    says how many GPUs the host had (a path not available here runs nothing, so this takes a second)."""
    from support.gpus import fake_nvidia_smi

    env = {**os.environ, "PATH": f"{fake_nvidia_smi(tmp_path / 'fake', 3)}{os.pathsep}{os.environ['PATH']}"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, "-m", "suite", "check", "--only", "pytorch-ddp/modules/ranks",
                           "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == site_check.EXIT_NOTHING_CHECKED, done.stdout + done.stderr  # its one path: not available
    [written] = (tmp_path / "site-checks").glob("*.json")
    table = json.loads(written.read_text())
    assert table["gpus"] == 3 and [(p["nodes"], p["devices"]) for p in table["paths"]] == [(1, 3)]
    assert table["paths"][0]["outcome"] == UNAVAILABLE


def test_make_check_site_passes_the_cluster_each_only_pattern_and_the_sites_environment():
    # --no-print-directory: under `make test` this make is a sub-make, which would print its directory
    done = subprocess.run(["make", "--no-print-directory", "-n", "check-site", "CLUSTER=slurm",
                           "ONLY=pytorch-ddp/local/ /docker/", "MODULES=PyTorch/2.1 Horovod",
                           "PYTHON=/opt/py/bin/python3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    words = " ".join(done.stdout.replace("\\\n", " ").split())  # the runner's .venv, if it is not built, first
    assert words[words.index("-m suite check"):].startswith(
        "-m suite check --cluster \"slurm\" --only \"pytorch-ddp/local/\" --only \"/docker/\" "
        "--modules \"PyTorch/2.1 Horovod\""), words
    assert words.endswith("--python \"/opt/py/bin/python3\""), words

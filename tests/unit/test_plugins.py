"""The written contracts of runtimes, launchers and schedulers (suite/execution/plugins.py), checked over every
plugin of every kind; and a plugin added as one file is picked up everywhere without other edits."""

import json
import textwrap

import pytest

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import clusters, doctor, plugins
from suite.execution.plan import Launch, Plan, Process, StackEnv
from suite.inputs.cases import known_cases, load_case
from suite.inputs.hostfiles import Host, World

ALL = [(kind, name) for kind in plugins.KINDS for name in plugins.available(kind)]
TWO_HOSTS = World((Host("node1", 2), Host("node2", 2)), "test")


@pytest.mark.parametrize("kind, name", ALL, ids=[f"{k}/{n}" for k, n in ALL])
def test_every_plugin_satisfies_its_contract(kind, name):
    plugin = plugins.load(kind, name)
    protocol, _ = plugins.CONTRACTS[kind]
    assert isinstance(plugin, protocol) and plugin.name == name
    for member in plugins._protocol_members(protocol):
        hook = getattr(plugin, member)
        assert member in protocol.__annotations__ or callable(hook), member
    assert all(isinstance(s, plugins.Setting) and s.help for s in plugin.PROFILE.values())


def cases_launched_by(launcher: str) -> list[tuple[str, dict]]:
    """(case, options) pairs whose options pick this launcher."""
    found = []
    for name in known_cases():
        case = load_case(name)
        options = case.parse_options([])
        choice = case.spec.get("launcher_option")
        picks = case.spec["options"][choice].get("choices", []) if choice else [case.launcher]
        found += [(name, {**options, choice: launcher} if choice else options) for p in picks if p == launcher]
    return found


@pytest.mark.parametrize("name", plugins.available("launchers"))
def test_every_launcher_plans_plain_data_for_a_case(name):
    used_by = cases_launched_by(name)
    assert used_by, f"launcher {name} is used by no case"
    launcher = plugins.load("launchers", name)
    for case, options in used_by:
        stack = StackEnv("local", "/stack/bin", env={"PYTHONPATH": "/suite"})
        launch = Launch(f"/cases/{case}/train.py", [], TWO_HOSTS, stack, "/runs/r/rep-0", "/data", options)
        launcher.check(launch)
        plan = launcher.plan(launch)
        assert isinstance(plan, Plan) and plan.processes and plan.ranks >= 1
        for process in plan.processes:
            assert isinstance(process, Process) and process.host in ("node1", "node2")
            assert all(isinstance(a, str) for a in process.argv)
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in process.env.items())
        json.dumps(plan.details)  # goes into the record as it is


@pytest.mark.parametrize("name", plugins.available("schedulers"))
def test_every_scheduler_describes_a_plan_for_a_dry_run(name, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    scheduler = plugins.load("schedulers", name)
    plan = Plan((Process("worker-0", "localhost", ["python", "train.py"], {"A": "1"}, "/runs/r/rep-0"),), ranks=1)
    job = plugins.BatchJob("r", "pytorch-synthetic", World((Host("localhost", 1),), "test"),
                           ("python", "-m", "suite", "run"), 60.0, 60.0, 1, paths.RUNS / "r")
    assert scheduler.describe(plan, job).strip()


THROWAWAY_SCHEDULER = '''
"""A scheduler written by a site: one file."""
from suite.execution.plugins import Setting
from suite.schedulers.local import execute  # noqa: F401 (starts processes as the local scheduler does)

PROFILE = {"queue": Setting(str, "batch", "queue the jobs go to")}


def doctor_lines(cluster):
    return [f"ok: pbs queue {cluster.section('pbs')['queue']}"]
'''

THROWAWAY_RUNTIME = '''
"""A runtime written by a site: one file."""
from suite.execution.plugins import Setting
from suite.runtimes.local import prepare  # noqa: F401 (prepares the stack as the local runtime does)

PROFILE = {"modules": Setting(list, [], "modules that hold the stack")}


def doctor_lines(cluster, stacks, flavour):
    return [f"ok: site stack for {', '.join(stacks)}"]
'''


def test_a_plugin_file_is_picked_up_by_doctor_profiles_and_contracts(tmp_path, monkeypatch, capsys):
    for kind, text, name in (("schedulers", THROWAWAY_SCHEDULER, "pbs"), ("runtimes", THROWAWAY_RUNTIME, "sitemods")):
        folder = tmp_path / kind
        folder.mkdir()
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
        monkeypatch.setitem(plugins.EXTRA_PATHS, kind, [str(folder)])
    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    (tmp_path / "hosts").write_text("localhost slots=2\n")
    (tmp_path / "site.toml").write_text('hostfile = "hosts"\nscheduler = "pbs"\nruntime = "sitemods"\n'
                                        '[pbs]\nqueue = "gpu"\n[sitemods]\nmodules = ["x/1"]\n')
    assert "pbs" in plugins.available("schedulers") and "sitemods" in plugins.available("runtimes")
    assert isinstance(plugins.load("schedulers", "pbs"), plugins.Scheduler)
    assert clusters.load_cluster("site").section("pbs") == {"queue": "gpu"}
    doctor.doctor("site", ["pytorch-synthetic"])
    out = capsys.readouterr().out
    assert "ok: pbs queue gpu" in out and "ok: site stack for pytorch-horovod" in out
    (tmp_path / "typo.toml").write_text('scheduler = "pbs"\n[pbs]\nqueu = "gpu"\n')
    with pytest.raises(UsageError, match=r"unknown key \[pbs\] 'queu' \(allowed: queue\)"):
        clusters.load_cluster("typo")
    (tmp_path / "wrongtype.toml").write_text('scheduler = "pbs"\n[pbs]\nqueue = 3\n')
    with pytest.raises(UsageError, match=r"\[pbs\] queue must be a string \(queue the jobs go to\), got 3"):
        clusters.load_cluster("wrongtype")


@pytest.mark.parametrize("kind, hook", [("runtimes", "prepare"), ("launchers", "plan"), ("schedulers", "execute")])
def test_a_plugin_without_a_required_hook_is_refused_in_one_line(tmp_path, monkeypatch, kind, hook):
    assert plugins.required_hooks(kind) == [hook]
    folder = tmp_path / kind
    folder.mkdir()
    (folder / "halfdone.py").write_text('"""A plugin that forgot its main hook."""\n\ndef doctor_lines(*args):\n'
                                        '    return []\n')
    monkeypatch.setitem(plugins.EXTRA_PATHS, kind, [str(folder)])
    with pytest.raises(UsageError) as refused:
        plugins.load(kind, "halfdone")
    message = str(refused.value)
    assert "\n" not in message and f"does not define {hook}" in message and "halfdone.py" in message
    (folder / "halfdone.py").write_text(f"def {hook}(*args):\n    return None\n")
    assert callable(getattr(plugins.load(kind, "halfdone"), hook))

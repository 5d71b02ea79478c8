"""`suite rerun RECORD.json`: refusals on drift (one line each) and what cannot be rerun, checked in
process on a record made by the real record code; then real reruns of a pytorch-synthetic record and
of a 2-node mxnet-imagenet record, compared with their originals."""

import json
import re
import signal
from pathlib import Path

import pytest
from conftest import records_in, tiny
from support.fixture_records import make_record

from suite import cli
from suite.base import paths
from suite.execution import rerun
from suite.execution.request import RunRequest, recorded
from suite.inputs.cases import load_case
from suite.records.read import load_point
from suite.records.schema import SCHEMA_VERSION, validate
from suite.stacks.recipes import load_stack

# The checkout these in-process tests pretend to run from, so that they do not depend on the state of
# the real one (the git check itself is tested by editing the record).
CHECKOUT = {"git_commit": "c0ffee" * 6 + "c0ff", "git_dirty": False, "git_diff_sha256": None}
TINY = tiny("pytorch-synthetic")


@pytest.fixture
def original(tmp_path, monkeypatch) -> Path:
    """A valid pytorch-synthetic record of 1 node x 1 device from hostfiles/localhost, as this checkout
    would write it now: no drift until a test edits it."""
    monkeypatch.setattr(rerun, "git_state", lambda: dict(CHECKOUT))
    record = make_record(tmp_path / "made", tmp_path / "made-runs", cluster="localhost", stack="pytorch-horovod")
    record["provenance"].update(CHECKOUT, stack_lock_sha256=load_stack("pytorch-horovod").lock_sha256,
                                argv=["python", "-m", "suite", "run", "--case", "pytorch-synthetic", "--", *TINY],
                                request=recorded(RunRequest(case="pytorch-synthetic", case_args=list(TINY))),
                                environment={})
    record["config"]["options"] = load_case("pytorch-synthetic").parse_options(list(TINY))
    record["world"].update(hosts=["localhost"], slots={"localhost": 1})
    return save(record, tmp_path / "original.json")


def save(record: dict, path: Path) -> Path:
    validate(record)
    path.write_text(json.dumps(record))
    return path


def edit(path: Path, change) -> Path:
    record = json.loads(path.read_text())
    change(record)
    return save(record, path)


def rerun_in_process(capture, path: Path, *args: str, results: Path | None = None,
                     runs: Path | None = None) -> tuple[int, str, str]:
    """`python -m suite rerun PATH ARGS` in this process; capture: capsys, or capfd where processes run."""
    previous = signal.getsignal(signal.SIGTERM)  # main() makes SIGTERM an interrupt
    try:
        code = cli.main(["rerun", str(path), "--results-dir", str(results or path.parent / "results"),
                         "--runs-dir", str(runs or path.parent / "runs"), *args])
    finally:
        signal.signal(signal.SIGTERM, previous)
    out, err = capture.readouterr()
    return code, out, err


def drift_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("drift: ")]


def test_an_unchanged_record_reruns_as_it_ran(original, capsys, pytorch_stack):
    code, out, err = rerun_in_process(capsys, original, "--dry-run")
    assert code == 0, out + err
    assert "drift" not in out + err
    assert f"-np 1 -H localhost:1 --gloo {pytorch_stack.python}" in out and " ".join(TINY) in out
    assert "dry run: nothing was started" in out


def set_lock(r):
    r["provenance"]["stack_lock_sha256"] = "0" * 64


def set_default(r):  # the record resolved --num-classes to 10 from the same arguments: its default was 10
    r["config"]["options"]["num-classes"] = 10


def set_devices(r):  # the record's node gave 2 devices; hostfiles/localhost gives 1
    r["world"].update(devices=2, slots={"localhost": 2})


def set_commit(r):
    r["provenance"]["git_commit"] = "1" * 40


def set_dirty(r):
    r["provenance"].update(git_dirty=True, git_diff_sha256="2" * 64)


DRIFT = {
    "edited lock": (set_lock, "stack pytorch-horovod/cpu: requirements.lock sha256 000000000000 in the record, "),
    "changed default": (set_default, "case option --num-classes: 10 in the record, 1000 now from the same arguments "
                                     "(its default in cases/pytorch-synthetic/case.toml changed)"),
    "device count": (set_devices, "devices per node: 2 in the record, 1 from "),
    "other commit": (set_commit, "suite checkout: commit 111111111111 in the record, c0ffeec0ffee here"),
    "dirty checkout": (set_dirty, "suite checkout: the record's had uncommitted changes (diff sha256 222222222222), "
                                  "none here"),
}


@pytest.mark.parametrize("name", DRIFT)
def test_drift_is_refused_with_one_line(original, capsys, name):
    change, expected = DRIFT[name]
    code, out, err = rerun_in_process(capsys, edit(original, change))
    assert code == 2
    [line] = drift_lines(err)
    assert line.startswith(f"drift: {expected}"), line
    assert err.splitlines()[-1].startswith("error: rerun of ") and "1 difference(s)" in err and "--allow-drift" in err
    assert not (original.parent / "runs").exists() and not (original.parent / "results").exists()


def test_every_difference_has_its_line(original, capsys):
    edit(original, lambda r: [change(r) for change, _ in DRIFT.values() if change is not set_dirty])
    code, out, err = rerun_in_process(capsys, original)
    assert code == 2 and len(drift_lines(err)) == 4 and "4 difference(s)" in err


def test_allowed_drift_runs_the_record_world_shape(original, capsys, pytorch_stack):
    code, out, err = rerun_in_process(capsys, edit(original, set_devices), "--allow-drift", "--dry-run")
    assert code == 0, out + err
    assert "drift (allowed): devices per node: 2 in the record, 1 from" in out
    assert "-np 2 -H localhost:2" in out


def to_schema_1(record: dict) -> None:
    record["schema_version"] = 1
    for key in ("git_diff_sha256", "rerun_of"):
        del record["provenance"][key]


def test_schema_1_records_stay_readable_and_rerun(original, capsys, pytorch_stack):
    edit(original, to_schema_1)
    assert load_point(original) is not None
    code, out, err = rerun_in_process(capsys, original, "--dry-run")
    assert code == 0, out + err
    edit(original, lambda r: r["provenance"].update(git_dirty=True))
    code, out, err = rerun_in_process(capsys, original)
    assert code == 2 and drift_lines(err) == [
        "drift: suite checkout: the record's had uncommitted changes that it does not identify (schema 1); "
        "this checkout cannot be checked against them"]


@pytest.mark.parametrize("change, expected", [
    (lambda r: r.update(schema_version=SCHEMA_VERSION + 1),
     f"record schema version {SCHEMA_VERSION + 1}; this suite reads versions 1 to {SCHEMA_VERSION}"),
    (lambda r: r.update(case="no-such-case"), "cannot rerun original.json: unknown case 'no-such-case'"),
    (lambda r: r["world"].update(nodes=2, devices=2, hosts=["a", "b"], slots={"a": 1, "b": 1}),
     "cannot rerun original.json: NODES=2 but hostfile"),
    (lambda r: r["world"].update(devices=3, hosts=["a", "b"], nodes=2, slots={"a": 1, "b": 2}),
     "the record's hosts had different device counts"),
])
def test_what_cannot_be_rerun_says_why_in_one_line(original, capsys, change, expected):
    record = json.loads(original.read_text())
    change(record)
    original.write_text(json.dumps(record))
    code, out, err = rerun_in_process(capsys, original)
    assert code == 2 and err.count("\n") == 1 and expected in err, err


def test_hosts_come_from_the_record_profile_or_hostfile_where_this_checkout_has_them(tmp_path):
    args = cli.build_cli().parse_args(["rerun", "x.json"])
    world = {"cluster": "loopback", "hostfile": "hostfiles/loopback"}
    assert rerun.host_source(world, args) == (None, str(paths.ROOT / "hostfiles" / "loopback"))
    assert rerun.host_source({"cluster": "localhost", "hostfile": "/elsewhere/hosts"}, args) == ("localhost", None)
    assert rerun.host_source({"cluster": "gone", "hostfile": "/elsewhere/hosts"}, args) == (None, None)
    given = cli.build_cli().parse_args(["rerun", "x.json", "--hostfile", "h"])
    assert rerun.host_source(world, given) == (None, "h")
    site = tmp_path / "site.toml"  # a profile the run was given by its path, still there
    site.write_text('scheduler = "local"\n')
    assert rerun.host_source({"cluster": "site", "hostfile": "/elsewhere/hosts"}, args, str(site)) == (str(site), None)
    site.unlink()
    assert rerun.host_source({"cluster": "site", "hostfile": "/elsewhere/hosts"}, args, str(site)) == (None, None)


# --- real reruns ------------------------------------------------------------------------------------

def as_recorded(monkeypatch, path: Path) -> None:
    """Several people edit this checkout at once, so its uncommitted changes differ from second to
    second: the rerun (in this process) sees the checkout the record names; the git check itself is
    tested above by editing records."""
    prov = json.loads(path.read_text())["provenance"]
    monkeypatch.setattr(rerun, "git_state", lambda: {k: prov[k] for k in CHECKOUT})


def the_rerun(results: Path, original: dict) -> dict:
    [new] = [r for r in records_in(results) if r["run_id"] != original["run_id"]]
    validate(new)
    assert new["provenance"]["rerun_of"]["run_id"] == original["run_id"]
    assert new["provenance"]["rerun_of"]["drift"] == []
    return new


def assert_same_configuration(a: dict, b: dict) -> None:
    assert b["status"] == "ok", b["reason"]
    for part, keys in {"config": ("model", "data", "batch_per_device", "global_batch", "image_size", "dtype", "lr_rule",
                                  "repeat", "options"),
                       "world": ("nodes", "devices", "slots", "device_type"),
                       "execution": ("runtime", "stack", "launcher"),
                       "provenance": ("stack_lock_sha256", "stack_recipe_sha256", "git_commit")}.items():
        assert {k: a[part].get(k) for k in keys} == {k: b[part].get(k) for k in keys}, part


def comparison_line(stdout: str, case: str, with_p: bool) -> str:
    p = r"0\.\d{3}|1\.000" if with_p else "-"
    [line] = [line for line in stdout.splitlines() if line.startswith(case)]
    # a change that rounds to zero prints 0.0% without a sign (fmt_number)
    assert re.search(rf" ([+-]\d+\.\d|0\.0)% +({p})  (same|faster|slower)$", line), line
    return line


def on_another_system(record: dict) -> None:
    """The record's host, its CPU and its links changed (its description made again from them, as an older
    record's is)."""
    [host] = record["provenance"]["host_info"].values()
    host.update(cpu_model="AMD EPYC 7763", network=[{"name": f"mlx5_{i}/1", "type": "InfiniBand",
                                                     "rate_gbit_s": 200, "state": "ACTIVE"} for i in range(4)])
    del record["provenance"]["system_description"]


def test_pytorch_record_reruns_with_the_same_configuration(suite_cli, pytorch_stack, monkeypatch, capfd):
    result = suite_cli("run", "--repeat", "2", case_args=TINY)
    assert result.returncode == 0, result.stdout + result.stderr
    [original] = records_in(suite_cli.results)
    path = suite_cli.results / f"{original['run_id']}.json"
    as_recorded(monkeypatch, path)
    edit(path, on_another_system)  # the same GPUs (none), another CPU and network: notes, not drift
    dirs = {"results": suite_cli.results, "runs": suite_cli.runs}
    code, out, err = rerun_in_process(capfd, path, **dirs)
    assert code == 0, out[-3000:] + err
    new = the_rerun(suite_cli.results, original)
    here = new["provenance"]["system_description"]
    moved = [f"host_processor_model_name: AMD EPYC 7763 -> {here['host_processor_model_name']}"]
    if "host_network_card_count" in here:  # this machine has a link of a device
        moved.append(f"host_network_card_count: 4x 200 Gb/s InfiniBand -> {here['host_network_card_count']}")
    assert f"\nthe systems differ (A -> B): {'; '.join(moved)}\n" in out, out
    assert_same_configuration(original, new)
    assert new["metrics"]["throughput"]["ci95_basis"] == "repetitions" and len(new["repetitions"]) == 2
    assert new["provenance"]["argv"][:4] == ["python", "-m", "suite", "run"]
    assert new["provenance"]["rerun_of"]["argv"] == ["python", "-m", "suite", "rerun", str(path),
                                                     "--results-dir", str(suite_cli.results),
                                                     "--runs-dir", str(suite_cli.runs)]
    assert f"against the original {original['run_id']} (A)" in out
    comparison_line(out, "pytorch-synthetic", with_p=True)
    # The rerun's own record reruns too: its argv is the `suite run` it performed.
    rerun_path = suite_cli.results / f"{new['run_id']}.json"
    as_recorded(monkeypatch, rerun_path)
    code, out, err = rerun_in_process(capfd, rerun_path, "--dry-run", **dirs)
    assert code == 0 and "drift" not in out + err, out + err


def test_two_node_mxnet_record_reruns_on_loopback_hosts(suite_cli, monkeypatch, capfd):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # several MXNet processes share this machine's few cores
    result = suite_cli("run", "--case", "mxnet-imagenet", "--nodes", "2", "--hostfile", "hostfiles/loopback",
                       "--no-precheck", case_args=(*tiny("mxnet-imagenet"), "--benchmark"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    [original] = records_in(suite_cli.results)
    path = suite_cli.results / f"{original['run_id']}.json"
    as_recorded(monkeypatch, path)
    code, out, err = rerun_in_process(capfd, path, "--hostfile", "hostfiles/loopback", results=suite_cli.results,
                                      runs=suite_cli.runs)
    assert code == 0, out[-3000:] + err
    new = the_rerun(suite_cli.results, original)
    assert_same_configuration(original, new)
    assert new["world"]["hosts"] == ["127.0.0.1", "127.0.0.2"]
    assert (new["execution"]["servers"], new["execution"]["workers"]) == (2, 2)
    comparison_line(out, "mxnet-imagenet", with_p=False)

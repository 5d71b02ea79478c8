"""`suite resume SWEEP_ID`, in process, from records made by the real record code and plans made by the real
plan code: which points run again (failed, missing, never started) and with what, nothing where every point is
ok, the refusals (unknown sweep, nothing to resume, drift) in one `error:` line with exit 2 before anything is
launched, the dry run; and the run engine's side: a sweep's plan written before its first point and kept up to
date, the table of a resume made of the old records and the new."""

import json
import signal
from pathlib import Path

import pytest
from support.fixture_records import make_record

from suite import cli
from suite.analysis.sweeps import new_plan, plan_path, read_plan, sweeps_folder, write_plan
from suite.execution import rerun, resume
from suite.execution import run as run_engine
from suite.execution.plan import StackEnv
from suite.execution.request import RunRequest, recorded, to_argv
from suite.inputs.cases import load_case
from suite.records.schema import validate
from suite.records.write import utc_now
from suite.stacks.recipes import load_flavour, load_stack

# The checkout these tests pretend to run from (the git check itself is rerun's, tested there).
CHECKOUT = {"git_commit": "c0ffee" * 6 + "c0ff", "git_dirty": False, "git_diff_sha256": None}
CASE = load_case("pytorch-synthetic")
TINY = CASE.tiny_args()
SWEEP = "20260101T000000Z-pytorch-synthetic-sweep-abc123"
LOCK = load_flavour(load_stack(CASE.stack), "cpu").lock_sha256


def request(gpus="1,2,3", hostfile=None) -> RunRequest:
    return RunRequest(case=CASE.name, gpus_per_node=gpus, hostfile=hostfile, case_args=list(TINY))


@pytest.fixture
def folders(tmp_path, monkeypatch):
    monkeypatch.setattr(rerun, "git_state", lambda: dict(CHECKOUT))
    monkeypatch.setattr(run_engine, "git_state", lambda: dict(CHECKOUT))
    return tmp_path / "results", tmp_path / "runs"


def point_record(folders, devices: int, status="ok", req=None, change=None) -> dict:
    """A record of the sweep at 1 node x `devices`, as this checkout would write it now (no drift)."""
    results, runs = folders
    record = make_record(results, runs, cluster="localhost", stack=CASE.stack, devices=devices)
    path = results / f"{record['run_id']}.json"
    record["sweep_id"] = SWEEP
    req = req or request()
    record["provenance"].update(CHECKOUT, stack_lock_sha256=LOCK, argv=["python", "-m", "suite", *to_argv(req)],
                                request=recorded(req), environment={}, host_info={"localhost": {}})
    record["config"]["options"] = CASE.parse_options(list(TINY))
    record["world"].update(hosts=["localhost"], slots={"localhost": devices}, hostfile=str(req.hostfile or
                                                                                            "hostfiles/localhost"))
    if status == "failed":
        record.update(status="failed", reason="horovodrun-0 on localhost exited with 1; first error: 'boom'")
        record["metrics"]["throughput"].update(mean=None, per_device=None, ci95=None, n=0)
    if change:
        change(record)
    validate(record)
    path.write_text(json.dumps(record))
    return record


def plan(folders, points=((1, 1), (1, 2), (1, 3)), req=None, stack=True) -> Path:
    """The sweep's plan as `run` writes it; stack=False: written before its stack was prepared."""
    req = req or request()
    provenance = {"argv": ["python", "-m", "suite", *to_argv(req)], "request": recorded(req), **CHECKOUT}
    if stack:
        provenance.update(stack=CASE.stack, stack_flavour="cpu", stack_lock_sha256=LOCK, stack_location="/stack",
                          runtime="local", image=None, image_sha256=None)
    made = new_plan(SWEEP, CASE.name, list(points), provenance,
                    {"stack": CASE.stack, "runtime": "local", "scheduler": "local"},
                    CASE.parse_options(list(TINY)), None, utc_now())
    return write_plan(made, sweeps_folder(folders[0]))


@pytest.fixture
def launched(monkeypatch):
    """What resume hands the run engine (nothing is launched): [(request, sweep)]."""
    calls = []
    monkeypatch.setattr(resume, "run", lambda req, sweep: calls.append((req, sweep)) or 0)
    return calls


def resume_in_process(capsys, folders, *args: str, sweep_id: str = SWEEP) -> tuple[int, str, str]:
    """`python -m suite resume SWEEP_ID ARGS` in this process."""
    previous = signal.getsignal(signal.SIGTERM)  # main() makes SIGTERM an interrupt
    try:
        code = cli.main(["resume", sweep_id, "--results-dir", str(folders[0]), "--runs-dir", str(folders[1]), *args])
    finally:
        signal.signal(signal.SIGTERM, previous)
    out, err = capsys.readouterr()
    return code, out, err


def one_error(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if not line.startswith("drift: ")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_the_failed_and_the_never_started_points_run_again_as_the_same_sweep(folders, launched, capsys):
    plan(folders)
    ok = point_record(folders, 1)
    failed = point_record(folders, 2, "failed")
    code, out, err = resume_in_process(capsys, folders)
    assert code == 0, out + err
    [(req, sweep)] = launched
    assert sweep.id == SWEEP and sweep.points == {(1, 2), (1, 3)}
    assert [r["run_id"] for r, _ in sweep.kept] == [ok["run_id"]]
    assert (req.case, req.nodes, req.gpus_per_node, req.case_args) == (CASE.name, "1", "2,3", list(TINY))
    assert req.results_dir == folders[0] and req.runs_dir == folders[1] and not req.dry_run and req.argv == []
    assert f"sweep {SWEEP}: 2 of 3 points to run again, 1 node(s) x 2 device(s) (failed: {failed['run_id']}: " \
           "horovodrun-0 on localhost exited with 1" in out
    assert "1 node(s) x 3 device(s) (never started); kept: 1 node(s) x 1 device(s)" in out
    [entry] = sweep.plan["resumes"]
    assert entry["points"] == [[1, 2], [1, 3]] and entry["drift"] == [] and entry["argv"][3:5] == ["resume", SWEEP]


def test_the_latest_ok_record_of_a_point_counts_and_a_record_the_plan_names_but_is_gone_is_run_again(
        folders, launched, capsys):
    made = plan(folders, points=((1, 1), (1, 2)))
    point_record(folders, 1, "failed")
    ok = point_record(folders, 1)  # an earlier resume ran it again
    gone = point_record(folders, 2)
    saved = read_plan(made.parent, SWEEP)
    saved["points"][1]["records"].append({"run_id": gone["run_id"], "status": "ok", "record": "elsewhere"})
    write_plan(saved, made.parent)
    (folders[0] / f"{gone['run_id']}.json").unlink()
    code, out, err = resume_in_process(capsys, folders)
    assert code == 0, out + err
    [(req, sweep)] = launched
    assert sweep.points == {(1, 2)} and [r["run_id"] for r, _ in sweep.kept] == [ok["run_id"]]
    assert f"1 node(s) x 2 device(s) (its record {gone['run_id']} is not in the results folder)" in out


def test_nothing_is_run_where_every_point_has_an_ok_record(folders, launched, capsys):
    plan(folders, points=((1, 1), (1, 2)))
    point_record(folders, 1)
    point_record(folders, 2, "failed")
    point_record(folders, 2)
    code, out, err = resume_in_process(capsys, folders)
    assert one_error(code, err) == (f"error: sweep {SWEEP}: nothing to resume, all 2 points have an ok record "
                                    "(1 node(s) x 1 device(s), 1 node(s) x 2 device(s))")
    assert launched == []


def test_an_unknown_sweep_is_refused(folders, launched, capsys):
    point_record(folders, 1, change=lambda r: r.update(sweep_id="another-sweep"))
    code, out, err = resume_in_process(capsys, folders)
    assert one_error(code, err) == (f"error: no sweep {SWEEP}: no plan {sweeps_folder(folders[0])}/{SWEEP}.plan.json "
                                    f"and no record in {folders[0]} with that sweep_id")
    code, out, err = resume_in_process(capsys, folders, sweep_id="../x")
    assert one_error(code, err).startswith("error: not a sweep id: '../x'")
    assert launched == []


def set_lock(r):
    r["provenance"]["stack_lock_sha256"] = "0" * 64


def set_default(r):  # the sweep resolved --num-classes to 10 from the same arguments: its default was 10
    r["config"]["options"]["num-classes"] = 10


def set_stack(r):  # the case's case.toml named another stack then
    r["execution"]["stack"] = "mxnet-horovod"


@pytest.mark.parametrize("change, said", [
    (set_lock, f"drift: stack {CASE.stack}/cpu: requirements.lock sha256 000000000000 in the record"),
    (set_default, "drift: case option --num-classes: 10 in the record, 1000 now from the same arguments"),
    (set_stack, f"drift: stack: mxnet-horovod in the record, {CASE.stack} in cases/pytorch-synthetic/case.toml now"),
])
def test_a_sweep_whose_stack_or_case_changed_is_refused_naming_what_changed(folders, launched, capsys, change, said):
    plan(folders)
    ok = point_record(folders, 1, change=change)
    code, out, err = resume_in_process(capsys, folders)
    assert one_error(code, err) == (f"error: resume of sweep {SWEEP} refused: 1 difference(s) from its record "
                                    f"{ok['run_id']}, one per 'drift:' line above; remove them or resume with "
                                    "--allow-drift (Make: ALLOW_DRIFT=1)")
    assert [line for line in err.splitlines() if line.startswith("drift: ")] == [line for line in err.splitlines()
                                                                                  if line.startswith(said)]
    assert launched == []
    code, out, err = resume_in_process(capsys, folders, "--allow-drift")
    assert code == 0 and f"drift (allowed): {said.removeprefix('drift: ')}" in out, out + err
    [(req, sweep)] = launched
    assert sweep.points == {(1, 2), (1, 3)} and len(sweep.plan["resumes"][0]["drift"]) == 1


def test_without_records_the_plan_is_checked_and_a_stack_never_prepared_is_no_drift(folders, launched, capsys):
    made = plan(folders, stack=False)  # the sweep stopped while its stack was being installed
    code, out, err = resume_in_process(capsys, folders)
    assert code == 0 and "drift" not in out + err, out + err
    assert launched[0][1].points == {(1, 1), (1, 2), (1, 3)} and launched[0][1].kept == []
    saved = read_plan(made.parent, SWEEP)
    saved["provenance"]["git_commit"] = "1" * 40
    write_plan(saved, made.parent)
    code, out, err = resume_in_process(capsys, folders)
    assert one_error(code, err).startswith(f"error: resume of sweep {SWEEP} refused: 1 difference(s) from its plan")
    assert "drift: suite checkout: commit 111111111111 in the record" in err


def test_devices_per_node_that_the_hostfile_no_longer_gives_are_drift(folders, launched, capsys, tmp_path):
    hostfile = tmp_path / "node"
    hostfile.write_text("localhost slots=2\n")
    asked = request(gpus=None, hostfile=str(hostfile))
    plan(folders, points=((1, 2),), req=asked)
    hostfile.write_text("localhost slots=1\n")
    code, out, err = resume_in_process(capsys, folders)
    one_error(code, err)
    assert f"drift: devices per node: 2 for 1 node(s) in the sweep, 1 from {hostfile} now" in err
    code, out, err = resume_in_process(capsys, folders, "--allow-drift")
    assert code == 0, out + err
    assert launched[0][0].gpus_per_node == "2" and launched[0][1].points == {(1, 2)}  # the sweep's count, asked for


def test_a_sweep_without_a_plan_gets_its_points_from_its_records_and_their_request(folders, launched, capsys):
    asked = request(gpus="1,2")
    point_record(folders, 1, req=asked)
    point_record(folders, 2, "failed", req=asked)
    code, out, err = resume_in_process(capsys, folders)
    assert code == 0, out + err
    [(req, sweep)] = launched
    assert sweep.points == {(1, 2)} and req.gpus_per_node == "2"
    assert [(p["nodes"], p["devices"], len(p["records"])) for p in sweep.plan["points"]] == [(1, 1, 1), (1, 2, 1)]


def test_a_dry_run_lists_the_points_and_their_plans_and_writes_nothing(folders, capsys):
    made = plan(folders)
    point_record(folders, 1)
    def written():
        return [sorted(p.name for p in folder.iterdir()) for folder in (*folders, made.parent)], made.read_text()

    before = written()
    code, out, err = resume_in_process(capsys, folders, "--dry-run")
    assert code == 0, out + err
    assert "2 of 3 points to run again, 1 node(s) x 2 device(s) (never started); 1 node(s) x 3 device(s)" in out
    points = [line.split(" on ", 1)[1].split(" from ")[0] for line in out.splitlines() if line.startswith("== ")]
    assert points == ["1 node(s), 2 device(s)", "1 node(s), 3 device(s)"]
    assert "dry run: nothing was started" in out
    assert written() == before


# --- the run engine's side ----------------------------------------------------------------------------

def fake_point(folders, seen):
    """run_point as the engine calls it, writing a record of the world (the 2-device one fails); `seen`: the
    plan file as each point found it."""
    def run_point(req, checked, world, stack_env, failure, sweep_id):
        seen.append(json.loads(plan_path(sweeps_folder(req.results_dir), sweep_id).read_text()))
        record = point_record(folders, world.devices, "failed" if world.devices == 2 else "ok",
                              change=lambda r: r.update(sweep_id=sweep_id))
        return record, folders[0] / f"{record['run_id']}.json"
    return run_point


@pytest.fixture
def engine(folders, monkeypatch):
    seen = []
    monkeypatch.setattr(run_engine, "prepare", lambda req, checked: StackEnv(
        "local", "/stack/bin", provenance={"stack": CASE.stack, "stack_lock_sha256": LOCK, "stack_location": "/s"}))
    monkeypatch.setattr(run_engine, "check_stack", lambda *args: None)
    monkeypatch.setattr(run_engine, "run_point", fake_point(folders, seen))
    return seen


def test_a_sweep_writes_its_plan_before_its_first_point_and_keeps_it_up_to_date(folders, engine, capsys):
    req = RunRequest(case=CASE.name, gpus_per_node="1,2", case_args=list(TINY), results_dir=folders[0],
                     runs_dir=folders[1])
    assert run_engine.run(req) == 1
    first, second = engine
    sweep_id = first["sweep_id"]
    assert [(p["nodes"], p["devices"], p["records"]) for p in first["points"]] == [(1, 1, []), (1, 2, [])]
    assert first["provenance"]["request"]["gpus_per_node"] == "1,2" and first["provenance"]["stack_location"] == "/s"
    assert first["provenance"]["git_commit"] == CHECKOUT["git_commit"]
    assert [len(p["records"]) for p in second["points"]] == [1, 0]
    saved = read_plan(sweeps_folder(folders[0]), sweep_id)
    assert [[e["status"] for e in p["records"]] for p in saved["points"]] == [["ok"], ["failed"]]
    table = json.loads((sweeps_folder(folders[0]) / f"{sweep_id}.json").read_text())
    assert [row["status"] for row in table["rows"]] == ["ok", "failed"] and table["resumes"] == []


def test_a_resumed_sweep_s_table_holds_the_kept_records_and_the_new_ones(folders, engine, capsys):
    plan(folders, points=((1, 1), (1, 2), (1, 3)))
    kept = point_record(folders, 1)
    point_record(folders, 3, "failed")
    (sweeps_folder(folders[0]) / f"{SWEEP}.json").write_text("{}")  # the table the sweep wrote when it ended
    code, out, err = resume_in_process(capsys, folders)
    assert code == 1, out + err  # the 2-device point failed again
    assert [p["devices"] for p in engine[0]["points"]] == [1, 2, 3] and len(engine) == 2
    table = json.loads((sweeps_folder(folders[0]) / f"{SWEEP}.json").read_text())
    assert [(row["devices"], row["status"]) for row in table["rows"]] == [(1, "ok"), (2, "failed"), (3, "ok")]
    assert table["rows"][0]["run_id"] == kept["run_id"] and table["baseline"]["run_id"] == kept["run_id"]
    assert table["resumes"][0]["points"] == [[1, 2], [1, 3]]
    saved = read_plan(sweeps_folder(folders[0]), SWEEP)
    assert [[e["status"] for e in p["records"]] for p in saved["points"]] == [[], ["failed"], ["ok"]]

"""The results index (suite/records/index.py) and `suite query`: the index follows the files, checks content
once, never takes in what is not a record, survives damage, read-only folders and company."""

import copy
import csv
import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import ROOT
from support.fixture_records import make_large_record

from suite.base.errors import UsageError
from suite.records import index, schema
from suite.records.index import Selection, select


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("template")
    return make_large_record(base / "results", base / "runs")


def record(template: dict, n: int, **changes) -> dict:
    """A copy of the template as run n, with `changes` by dotted path (world.cluster=...)."""
    made = copy.deepcopy(template)
    made["run_id"] = f"20261101T{n:06d}Z-{made['case']}-test"
    for path, value in changes.items():
        *parents, key = path.split(".")
        node = made
        for parent in parents:
            node = node[parent]
        node[key] = value
    return made


def write(folder, made: dict, name: str | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"{made['run_id']}.json")
    path.write_text(json.dumps(made))
    return path


@pytest.fixture
def checks(monkeypatch) -> list:
    """The full checks of content made by the index (in this process: no worker processes)."""
    made = []
    original = index.problem
    monkeypatch.setattr(index, "problem",
                        lambda r: made.append(r.get("run_id") if isinstance(r, dict) else r) or original(r))
    monkeypatch.setattr(index, "PARALLEL_FROM", 10_000)
    return made


def run_ids(entries) -> set[str]:
    return {e.run_id for e in entries}


def rows(folder) -> dict[str, str | None]:
    """file name -> its problem, as the folder's index file holds them."""
    with sqlite3.connect(folder / index.INDEX_FILE) as db:
        return dict(db.execute("SELECT name, problem FROM files"))


def test_the_index_follows_files_added_changed_and_removed(tmp_path, template, checks):
    folder = tmp_path / "results"
    paths = [write(folder, record(template, n)) for n in range(3)]
    assert len(select(folder, warn=pytest.fail)) == 3 and len(checks) == 3
    assert (folder / index.INDEX_FILE).exists()
    assert len(select(folder, warn=pytest.fail)) == 3 and len(checks) == 3  # nothing read again

    added = write(folder, record(template, 3))
    assert run_ids(select(folder, warn=pytest.fail)) == {f"20261101T{n:06d}Z-pytorch-ddp-test" for n in range(4)}
    assert len(checks) == 4

    changed = record(template, 1, **{"metrics.throughput.mean": 123.5})
    paths[1].write_text(json.dumps(changed))
    os.utime(paths[1], ns=(paths[1].stat().st_atime_ns, paths[1].stat().st_mtime_ns + 10**9))  # a coarse clock
    [entry] = [e for e in select(folder, warn=pytest.fail) if e.run_id == changed["run_id"]]
    assert entry.throughput == 123.5 and len(checks) == 5

    paths[0].unlink()
    added.unlink()
    assert run_ids(select(folder, warn=pytest.fail)) == {record(template, n)["run_id"] for n in (1, 2)}
    assert set(rows(folder)) == {paths[1].name, paths[2].name}


def test_content_checked_before_is_not_checked_again(tmp_path, template, checks):
    folder = tmp_path / "results"
    path = write(folder, record(template, 0))
    select(folder)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # touched
    (folder / "copy.json").write_bytes(path.read_bytes())  # copied under another name
    entries = select(folder, warn=pytest.fail)
    assert sorted(e.path.name for e in entries) == sorted([path.name, "copy.json"])
    assert checks == [record(template, 0)["run_id"]]


def test_files_that_are_not_records_are_named_and_never_indexed(tmp_path, template, checks):
    folder = tmp_path / "results"
    good = write(folder, record(template, 0))
    bad = {"corrupt.json": '{"schema_version": 3, "run_id": ', "list.json": "[]", "empty.json": "{}",
           "sweep.json": json.dumps({"sweep_id": "s", "points": [{"devices": 1, "throughput": 10.0}]}),
           "newer.json": json.dumps(record(template, 1, schema_version=schema.SCHEMA_VERSION + 1)),
           "invalid.json": json.dumps(record(template, 2, **{"metrics.throughput.mean": -1}))}
    for name, text in bad.items():
        (folder / name).write_text(text)
    for _ in range(2):  # named on every read, checked once
        warnings = []
        assert [e.path for e in select(folder, warn=warnings.append)] == [good]
        assert len(warnings) == len(bad) and all("\n" not in w and w.startswith("warning: skipped ") for w in warnings)
        assert sorted(next(n for n in bad if f"/{n}:" in w) for w in warnings) == sorted(bad)
        assert len(checks) == 1 + len(bad) - 1  # not JSON: never reaches the check
    said = {name: next(w for w in warnings if f"/{name}:" in w) for name in bad}
    assert f"schema version {schema.SCHEMA_VERSION + 1}" in said["newer.json"]
    assert "not a record: a JSON array" in said["list.json"]
    assert "metrics/throughput/mean" in said["invalid.json"] and "not JSON" in said["corrupt.json"]
    assert {name for name, problem in rows(folder).items() if problem is None} == {good.name}


def test_query_and_report_skip_what_is_not_a_record(tmp_path, template):
    folder = tmp_path / "results"
    write(folder, record(template, 0))
    (folder / "corrupt.json").write_text("{")
    (folder / "list.json").write_text("[]")
    for command in (["query", "--results-dir", str(folder)],
                    ["report", "--results-dir", str(folder), "--out", str(tmp_path / "site")]):
        done = subprocess.run([sys.executable, "-m", "suite", *command], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("warning: skipped") == 2 and len(done.stderr.splitlines()) == 2, done.stderr
    # the telemetry series, left out of the index, is read from the record for the plot over time
    assert "utilisation and power over time" in (tmp_path / "site" / "case-pytorch-ddp.html").read_text()


def test_a_damaged_index_or_one_of_another_schema_is_made_again(tmp_path, template, checks, monkeypatch):
    folder = tmp_path / "results"
    for n in range(2):
        write(folder, record(template, n))
    select(folder)
    (folder / index.INDEX_FILE).write_bytes(b"this is not an SQLite file" * 100)
    assert len(select(folder, warn=pytest.fail)) == 2 and len(checks) == 4
    assert set(rows(folder)) == {f"{record(template, n)['run_id']}.json" for n in range(2)}
    monkeypatch.setattr(index, "SCHEMA_SHA256", "0" * 64)  # another schema: its checks do not count
    assert len(select(folder, warn=pytest.fail)) == 2 and len(checks) == 6


def test_a_folder_without_room_for_the_index_is_indexed_in_the_cache_or_in_memory(tmp_path, template, checks,
                                                                                   monkeypatch):
    folder = tmp_path / "results"
    for n in range(2):
        write(folder, record(template, n))
    (folder / index.INDEX_FILE).mkdir()  # in the way even for root, whom a read-only folder does not stop
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder.chmod(0o555)
    try:
        assert len(select(folder, warn=pytest.fail)) == 2
        assert len(select(folder, warn=pytest.fail)) == 2 and len(checks) == 2  # the cache's index remembers
        assert len(list((tmp_path / "cache" / "hpc-dl-bench" / "index").glob("*.sqlite"))) == 1
        (tmp_path / "no-cache").write_text("")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))  # a file: no cache folder either
        assert len(select(folder, warn=pytest.fail)) == 2 and len(checks) == 4  # in memory, for one command
        done = subprocess.run([sys.executable, "-m", "suite", "query", "--results-dir", str(folder)], cwd=ROOT,
                              capture_output=True, text=True)
        assert done.returncode == 0 and "2 record(s)" in done.stdout, done.stderr
    finally:
        folder.chmod(0o755)


def test_several_commands_read_one_folder_at_once(tmp_path, template):
    folder = tmp_path / "results"
    for n in range(40):
        write(folder, record(template, n))
    command = [sys.executable, "-m", "suite", "query", "--results-dir", str(folder), "--format", "csv"]
    running = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(4)]
    outputs = [p.communicate(timeout=300) for p in running]
    assert all(p.returncode == 0 for p in running), outputs
    assert len({out for out, _ in outputs}) == 1 and all(err == "" for _, err in outputs)
    assert len(outputs[0][0].splitlines()) == 41


@pytest.fixture
def varied(tmp_path, template):
    """Four records that differ in every field a query selects on."""
    folder = tmp_path / "results"
    lock_a, lock_b = "aa" * 32, "cd" * 32
    for n, (case, cluster, stack, devices, finished, status, lock) in enumerate([
            ("case-a", "x", "pytorch", 1, "2026-10-30T10:00:00Z", "ok", lock_a),
            ("case-a", "y", "pytorch", 2, "2026-11-01T00:00:00Z", "ok", lock_a),
            ("case-b", "x", "tensorflow", 4, "2026-11-15T12:00:00Z", "failed", lock_a),
            ("case-a", "x", "pytorch", 8, "2026-11-30T23:59:59Z", "ok", lock_b)]):
        write(folder, record(template, n, case=case, **{
            "world.cluster": cluster, "execution.stack": stack, "world.devices": devices, "finished_at": finished,
            "status": status, "reason": "exit 1" if status == "failed" else None,
            "provenance.stack_lock_sha256": lock}))
    return folder


@pytest.mark.parametrize("selection, expected", [
    (Selection(), {0, 1, 2, 3}), (Selection(case="case-a"), {0, 1, 3}), (Selection(cluster="x"), {0, 2, 3}),
    (Selection(stack="tensorflow"), {2}), (Selection(fingerprint="cdcd"), {3}),
    (Selection(fingerprint="aa" * 32), {0, 1, 2}),
    (Selection(devices=(1, 8)), {0, 3}), (Selection(since="2026-11-01"), {1, 2, 3}),
    (Selection(until="2026-11-30"), {0, 1, 2, 3}), (Selection(until="2026-11-29"), {0, 1, 2}),
    (Selection(since="2026-11-01T00:00:01", until="2026-11-15T12:00:00"), {2}),
    (Selection(status="ok"), {0, 1, 3}), (Selection(status="failed"), {2}),
    (Selection(case="case-a", cluster="x", since="2026-11-01"), {3})])
def test_query_selects_by_every_field(varied, template, selection, expected):
    assert run_ids(select(varied, selection, warn=pytest.fail)) == {record(template, n)["run_id"] for n in expected}


def test_the_newest_record_per_configuration_is_chosen_by_the_index(varied, template):
    newest = select(varied, Selection(status="ok"), warn=pytest.fail, newest_per=("case_name", "cluster"))
    assert [e.run_id for e in newest] == [record(template, n)["run_id"] for n in (1, 3)]  # y's only; x's newest ok
    tied = record(template, 9, case="case-a", finished_at="2026-11-30T23:59:59Z", **{"world.cluster": "x"})
    write(varied, tied, "zz-last-by-name.json")
    newest = select(varied, warn=pytest.fail, newest_per=("case_name", "cluster"))
    assert {e.path.name for e in newest if e.case == "case-a" and e.cluster == "x"} == {"zz-last-by-name.json"}


def test_query_writes_a_table_or_csv(varied, template):
    def query(*args):
        return subprocess.run([sys.executable, "-m", "suite", "query", "--results-dir", str(varied), *args],
                              cwd=ROOT, capture_output=True, text=True)

    done = query("--case", "case-a", "--since", "2026-11-01", "--format", "csv")
    assert done.returncode == 0, done.stderr
    table = list(csv.reader(io.StringIO(done.stdout)))
    assert table[0] == ["finished_at", "started_at", "case", "cluster", "stack", "nodes", "devices", "status",
                        "throughput", "unit", "fingerprint", "run_id", "record"]
    got = [dict(zip(table[0], row)) for row in table[1:]]
    assert [r["run_id"] for r in got] == [record(template, n)["run_id"] for n in (1, 3)]  # oldest first
    assert [r["fingerprint"] for r in got] == ["aa" * 32, "cd" * 32] and [r["devices"] for r in got] == ["2", "8"]
    assert float(got[0]["throughput"]) == pytest.approx(template["metrics"]["throughput"]["mean"])
    assert got[0]["record"] == str(varied / f"{got[0]['run_id']}.json")

    done = query("--status", "failed")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0].startswith("finished (UTC)") and lines[-1] == "1 record(s)"
    assert "case-b" in lines[1] and "failed" in lines[1] and "aaaaaaaaaaaa " in lines[1] and "aa" * 7 not in lines[1]

    write(varied, record(template, 9, case="pytorch-gpt"))  # a case counted in tokens
    done = query("--format", "csv")
    assert {r[2]: r[9] for r in csv.reader(io.StringIO(done.stdout))} == {
        "case": "unit", "case-a": "img/s", "case-b": "img/s", "pytorch-gpt": "tokens/s"}
    [gpt] = [line for line in query().stdout.splitlines() if "pytorch-gpt" in line]
    assert " tokens/s " in gpt and "img/s" not in query().stdout.splitlines()[0]

    bad = query("--since", "last week")
    assert bad.returncode == 2 and bad.stderr.startswith("error: since 'last week'")
    assert query("--devices", "two").returncode == 2


def test_make_query_passes_its_variables():
    done = subprocess.run(["make", "-n", "query", "CASE=pytorch-ddp", "CLUSTER=jsc", "SINCE=2026-11-01", "FORMAT=csv"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.replace("\\\n", " ").splitlines() if " query " in line)
    assert '--case "pytorch-ddp"' in line and '--cluster "jsc"' in line and '--since "2026-11-01"' in line
    assert '--format "csv"' in line and "--devices" not in line
    plain = subprocess.run(["make", "-n", "query"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "--case" not in plain  # the `run` default of CASE selects nothing


def test_a_bad_selection_is_refused():
    with pytest.raises(UsageError, match="until"):
        Selection(until="2026/11/01")
    with pytest.raises(UsageError, match="status"):
        Selection(status="broken")


def mutations(node, path=()):
    """(path, replacement) for every dict key and first list item of a record, each replaced by values of
    every JSON type (and deleted)."""
    children = node.items() if isinstance(node, dict) else list(enumerate(node))[:1] if isinstance(node, list) else []
    for key, value in children:
        for replacement in ("DELETE", None, "x", "", -1, 0, 2, 1.5, True, [], {}):
            if not isinstance(key, int) or replacement != "DELETE":
                yield (*path, key), replacement
        yield from mutations(value, (*path, key))


def test_the_compiled_check_agrees_with_jsonschema(template):
    """validate() takes the compiled check's yes as final: on a record of every kind of part and on each
    of its mutations, the compiled check and jsonschema give the same verdict."""
    import jsonschema

    reference = jsonschema.validators.validator_for(schema.SCHEMA)(schema.SCHEMA)
    small = record(template, 0)
    for host in small["metrics"]["telemetry"]["hosts"].values():
        host["series"] = {"t": [0.0]}  # not looked into by the schema: kept short to keep this quick
    tried = 0
    for path, replacement in mutations(small):
        mutated = copy.deepcopy(small)
        node = mutated
        for key in path[:-1]:
            node = node[key]
        if replacement == "DELETE":
            del node[path[-1]]
        else:
            node[path[-1]] = replacement
        assert schema._compiled_accepts(mutated) == reference.is_valid(mutated), (path, replacement)
        tried += 1
    assert tried > 1000 and schema._compiled_accepts(small)

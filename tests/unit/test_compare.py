import os
import subprocess
import sys

import pytest
from conftest import ROOT
from support.fixture_records import make_record

from suite.analysis.compare import compare, select
from suite.records.read import load_points


@pytest.fixture
def sides(tmp_path):
    a, b, runs = tmp_path / "a", tmp_path / "b", tmp_path / "runs"
    # devices=1: faster; 2: slower; 4: different batch; 8: same within tolerance; 16: only in A
    make_record(a, runs, devices=1, per_device=(100, 101, 99), repetitions=3)
    make_record(b, runs, devices=1, per_device=(120, 121, 119), repetitions=3)
    make_record(a, runs, devices=2, per_device=(100, 101, 99), repetitions=3)
    make_record(b, runs, devices=2, per_device=(80, 81, 79), repetitions=3)
    make_record(a, runs, devices=4, per_device=(100,), batch=32)
    make_record(b, runs, devices=4, per_device=(100,), batch=64)
    make_record(a, runs, devices=8, per_device=(100, 101, 99), repetitions=3)
    make_record(b, runs, devices=8, per_device=(102, 103, 101), repetitions=3)
    make_record(a, runs, devices=16, per_device=(100,))
    return a, b


def test_verdicts(sides):
    a, b = sides
    rows = {r.key[3]: r for r in compare(load_points(a), load_points(b), tolerance=0.05)}
    assert rows[1].verdict == "faster" and rows[1].diff_pct == pytest.approx(20, abs=0.5) and rows[1].p_value < 0.05
    assert rows[2].verdict == "slower" and rows[2].diff_pct == pytest.approx(-20, abs=0.5)
    assert rows[4].verdict == "not comparable" and rows[4].note == "batch: 32 vs 64"
    assert rows[8].verdict == "same" and rows[8].diff_pct == pytest.approx(2, abs=0.5)
    assert rows[16].verdict == "only in A"


def test_slower_within_noise_is_not_a_regression(tmp_path):
    a, b, runs = tmp_path / "a", tmp_path / "b", tmp_path / "runs"
    make_record(a, runs, devices=1, per_device=(100, 140, 60), repetitions=3)
    make_record(b, runs, devices=1, per_device=(90, 130, 50), repetitions=3)
    [row] = compare(load_points(a), load_points(b), tolerance=0.05)
    assert row.diff_pct < -5 and row.p_value > 0.05 and row.verdict == "same"


def test_cli_exit_status_and_table(sides, tmp_path):
    a, b = sides
    result = subprocess.run([sys.executable, "-m", "suite", "compare", str(a), str(b)], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 1
    assert "slower" in result.stdout and "not comparable (batch: 32 vs 64)" in result.stdout
    improved = subprocess.run([sys.executable, "-m", "suite", "compare", str(a), str(b), "--tolerance", "0.5"],
                              cwd=ROOT, capture_output=True, text=True)
    assert improved.returncode == 0
    missing = subprocess.run([sys.executable, "-m", "suite", "compare", str(a), str(tmp_path / "nope")],
                             cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.startswith("error: no such record file or folder")


def test_an_empty_side_is_refused_and_writes_no_index_in_the_working_folder(sides, tmp_path):
    """'' is Path('.'): read as the folder the command runs in, whose records index compare would write there."""
    a, _ = sides
    here = tmp_path / "here"
    here.mkdir()
    result = subprocess.run([sys.executable, "-m", "suite", "compare", "", str(a)], cwd=here, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and result.stderr.startswith("error: an empty side: "), result.stderr
    assert not list(here.iterdir())


@pytest.fixture
def one_folder(tmp_path):
    """Records of two periods in one folder: October's at 100 img/s, November's at 80 (and another case)."""
    import json

    folder, runs = tmp_path / "results", tmp_path / "runs"
    for finished, rate, case in [("2026-10-15T08:00:00Z", 100, "pytorch-synthetic"),
                                 ("2026-11-02T08:00:00Z", 80, "pytorch-synthetic"),
                                 ("2026-11-03T08:00:00Z", 50, "other-case")]:
        made = make_record(folder, runs, case=case, devices=2, per_device=(rate, rate + 1, rate - 1), repetitions=3)
        path = folder / f"{made['run_id']}.json"
        path.write_text(json.dumps({**made, "finished_at": finished}))
    return folder


def test_sides_may_be_selections_of_one_folder(one_folder):
    october = select(f"{one_folder}?until=2026-10-31", None, None, None)
    november = select(f"{one_folder}?since=2026-11-01&case=pytorch-synthetic&devices=1,2", None, None, None)
    assert [p.throughput["mean"] for p in october] == [pytest.approx(200, rel=0.02)]
    assert [p.throughput["mean"] for p in november] == [pytest.approx(160, rel=0.02)]
    [row] = compare(october, november, tolerance=0.05)
    assert row.verdict == "slower" and row.diff_pct == pytest.approx(-20, abs=0.5)
    assert len(select(f"{one_folder}?since=2026-11-01", None, None, None)) == 2
    whole = {p.case: p for p in select(str(one_folder), None, None, None)}  # the latest per configuration
    assert len(whole) == 2 and whole["pytorch-synthetic"].finished_at.startswith("2026-11-02")
    assert select(f"{one_folder}?since=2026-11-01", "other-case", None, None)[0].case == "other-case"  # --case too


def test_cli_compares_selections_and_refuses_bad_ones(one_folder):
    def suite_compare(a, b):
        return subprocess.run([sys.executable, "-m", "suite", "compare", a, b], cwd=ROOT, capture_output=True,
                              text=True)

    done = suite_compare(f"{one_folder}?until=2026-10-31", f"{one_folder}?since=2026-11-01&case=pytorch-synthetic")
    assert done.returncode == 1 and "slower" in done.stdout and done.stdout.count("\n") == 2, done.stdout + done.stderr
    unknown = suite_compare(f"{one_folder}?colour=red", str(one_folder))
    assert unknown.returncode == 2 and "unknown field(s) colour" in unknown.stderr
    no_folder = suite_compare(f"{one_folder}/nope?case=x", str(one_folder))
    assert no_folder.returncode == 2 and "needs a folder of records" in no_folder.stderr
    bad_date = suite_compare(f"{one_folder}?since=yesterday", str(one_folder))
    assert bad_date.returncode == 2 and "since 'yesterday'" in bad_date.stderr


def test_a_row_whose_systems_differ_says_how_below_the_table(tmp_path):
    """B ran after a driver update on nodes with another CPU: said under the table, for the slower row."""
    import json

    a, b, runs = tmp_path / "a", tmp_path / "b", tmp_path / "runs"
    make_record(a, runs, devices=2, per_device=(100, 101, 99), repetitions=3)
    made = make_record(b, runs, devices=2, per_device=(80, 81, 79), repetitions=3)
    path = b / f"{made['run_id']}.json"
    record = json.loads(path.read_text())
    for host in record["provenance"]["host_info"].values():
        if host:  # local rank 0's facts; the record describes its system from them (no description kept)
            host["cpu_model"] = "Intel Xeon 8480+"
    path.write_text(json.dumps(record))
    result = subprocess.run([sys.executable, "-m", "suite", "compare", str(a), str(b)], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 1, result.stderr
    table, said = result.stdout.rstrip("\n").rsplit("\n", 1)
    assert "slower" in table
    was = json.loads(next(a.glob("*.json")).read_text())["provenance"]["host_info"]
    cpu = next(h["cpu_model"] for h in was.values() if h)
    assert said == ("pytorch-synthetic on cluster-a, pytorch-horovod, 2 device(s): the systems differ (A -> B): "
                    f"host_processor_model_name: {cpu} -> Intel Xeon 8480+")


def test_a_row_whose_site_settings_differ_says_which_below_the_table(tmp_path):
    """B's profile dropped an [env] setting and its nodes gained an /etc/nccl.conf; a kind a record does not say
    (an older record without NCCL's files) is no difference."""
    import json

    from suite.analysis.compare import Row, settings_line

    a, b, runs = tmp_path / "a", tmp_path / "b", tmp_path / "runs"
    made = [make_record(side, runs, devices=2, per_device=(100, 101, 99), repetitions=3) for side in (a, b)]
    records = [json.loads((side / f"{m['run_id']}.json").read_text()) for side, m in zip((a, b), made)]
    for record, env, files in ((records[0], {"NCCL_IB_HCA": "mlx5_0", "OMP_NUM_THREADS": "8"}, {}),
                               (records[1], {"OMP_NUM_THREADS": "8"}, {"/etc/nccl.conf": {"NCCL_ALGO": "Ring"}})):
        record["execution"]["cluster_env"] = env
        for host in record["provenance"]["host_info"].values():
            host["nccl_conf"] = files
    (b / f"{made[1]['run_id']}.json").write_text(json.dumps(records[1]))
    (a / f"{made[0]['run_id']}.json").write_text(json.dumps(records[0]))
    result = subprocess.run([sys.executable, "-m", "suite", "compare", str(a), str(b)], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.stdout.rstrip("\n").splitlines()[-1] == (
        "pytorch-synthetic on cluster-a, pytorch-horovod, 2 device(s): the site's settings differ (A -> B): "
        "NCCL's files /etc/nccl.conf: NCCL_ALGO: (unset) -> Ring; [env] NCCL_IB_HCA: mlx5_0 -> (unset)")
    for host in records[0]["provenance"]["host_info"].values():
        del host["nccl_conf"]  # as a record written before they were read
    (a / f"{made[0]['run_id']}.json").write_text(json.dumps(records[0]))
    old_a, new_b = load_points(a)[0], load_points(b)[0]
    assert settings_line(Row(("k",), old_a, new_b)) == (
        "the site's settings differ (A -> B): [env] NCCL_IB_HCA: mlx5_0 -> (unset)")
    assert settings_line(Row(("k",), new_b, new_b)) is None and settings_line(Row(("k",), old_a, None)) is None

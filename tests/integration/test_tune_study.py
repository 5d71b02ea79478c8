"""`suite tune` for real (what `make tune CASE=pytorch-gpt TINY=1 BUDGET=1` runs): pytorch-gpt's settings tried
at tiny sizes within a one-minute budget, each trial a record of its own; the best written as a preset that a
later run takes back with --preset tuned:FILE; the study in the report's tuning page."""

import json
from pathlib import Path

from conftest import records_in

from suite.analysis.report import write_report
from suite.records.schema import validate


def test_a_one_minute_study_writes_its_trials_the_best_and_a_preset_a_run_takes_back(suite_cli, tmp_path):
    done = suite_cli("tune", "--case", "pytorch-gpt", "--tiny", "--budget", "1", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    study = json.loads(next((tmp_path / "tune").glob("*.json")).read_text())
    trials = study["trials"]
    assert len(trials) >= 2 and trials[0]["label"] == "(as asked)"
    started = [t for t in trials if t["status"] != "refused"]
    # no trial started that the longest before it would have taken past the budget
    for index in range(1, len(started)):
        elapsed = sum(t["seconds"] for t in started[:index])
        assert elapsed + max(t["seconds"] for t in started[:index]) <= 60 + 5  # the runner's own seconds aside
    records = {r["run_id"]: r for r in records_in(suite_cli.results)}
    for trial in started:
        record = records[trial["run_id"]]
        validate(record)
        assert record["config"]["options"]["batch-size"] == 4  # [tiny]'s batch: the work did not change
        for option, value in trial["settings"].items():
            assert record["config"]["options"][option] == value, (trial["label"], option)
    best = study["best"]
    chosen = next(t for t in started if t["run_id"] == best["run_id"])
    assert chosen["status"] == "ok" and best["throughput"] == chosen["throughput"] >= trials[0]["throughput"]
    assert f"== tune pytorch-gpt: {len(trials)} trial(s)" in done.stdout and "preset: " in done.stdout

    again = suite_cli("run", "--case", "pytorch-gpt", "--tiny", case_args=("--preset", f"tuned:{study['preset']}"))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rerun = max(records_in(suite_cli.results), key=lambda r: r["run_id"])
    assert rerun["run_id"] not in records
    for option, value in best["options"].items():
        assert rerun["config"]["options"][option] == value

    write_report(suite_cli.results, tmp_path / "report", warn=lambda message: None)
    page = (tmp_path / "report" / "tuning.html").read_text()
    assert study["tune_id"] in page and page.count("<tr>") == 1 + len(trials)
    assert Path(study["preset"]).name in page

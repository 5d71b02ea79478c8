"""`suite tune` (suite/execution/tune.py): which settings it tries, in which order, what it keeps, when the
budget stops it, and the preset it writes, over trials a fake answers; `--preset tuned:FILE` read back; the
study's table. The real study at tiny sizes is in tests/integration/test_tune_study.py."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from suite.analysis.tuning import report_body, study_lines
from suite.base.errors import UsageError
from suite.execution import tune as tuning
from suite.execution.request import RunRequest
from suite.inputs import tuned_presets
from suite.inputs.cases import known_cases, load_case


class Trials:
    """Trials answered from a table: throughput by the settings on, each trial `seconds` long."""

    def __init__(self, speed, seconds=10.0, failing=(), ci=lambda args: None, reported=lambda args: {}):
        self.speed, self.seconds, self.failing, self.asked = speed, seconds, failing, []
        self.ci, self.reported = ci, reported

    def __call__(self, req, checked, stack_env, study, label, settings, args):
        self.asked.append(label)
        ok = label not in self.failing
        entry = {"label": label, "settings": settings, "args": args, "status": "ok" if ok else "failed",
                 "reason": None if ok else "rank 0 failed", "throughput": self.speed(args) if ok else None,
                 "ci95": self.ci(args) if ok else None, "reported": self.reported(args), "unit": "tokens/s",
                 "run_id": f"run-{len(self.asked)}",
                 "record": f"/r/run-{len(self.asked)}.json", "seconds": self.seconds}
        study["trials"].append(entry)
        return entry


@pytest.fixture
def fake_runs(monkeypatch, tmp_path):
    """tune() over pytorch-gpt's [tune] table, its runner's checks and stack stubbed, trials from a table."""
    checked = type("Checked", (), {"case": load_case("pytorch-gpt"), "worlds": [object()], "search_asked": None})()
    monkeypatch.setattr(tuning.runner, "check", lambda req: checked)
    monkeypatch.setattr(tuning.runner, "prepare", lambda req, c: "stack")
    monkeypatch.setattr(tuning.runner, "check_stack", lambda req, c, s: None)
    clock = {"now": 0.0}
    monkeypatch.setattr(tuning.time, "monotonic", lambda: clock["now"])

    def run(trials: Trials, budget_s=3600.0, args=("--batch-size", "8")):
        def timed(*a):
            clock["now"] += trials.seconds
            return trials(*a)
        monkeypatch.setattr(tuning, "trial", timed)
        req = RunRequest(case="pytorch-gpt", case_args=list(args), results_dir=tmp_path / "results")
        code = tuning.tune(req, budget_s)
        study = next((tmp_path / "tune").glob("*.json")).read_text()
        return code, __import__("json").loads(study)
    return run


def speed_of(args):
    """bf16 doubles the speed, compile adds a half, reduce-overhead a tenth, fused 1%: below the margin."""
    x = 100.0
    x *= 2 if "bf16" in args else 1
    x *= 1.5 if "--compile" in args else 1
    x *= 1.1 if "reduce-overhead" in args else 1
    x *= 1.01 if "fused" in args else 1
    return x


def test_each_setting_is_tried_on_top_of_the_best_so_far_and_the_best_written_as_a_preset(fake_runs):
    code, study = fake_runs(trials := Trials(speed_of))
    assert code == 0
    assert trials.asked == ["(as asked)", "precision=bf16", "precision=fp32", "compile=on",
                            "compile-mode=reduce-overhead", "compile-mode=max-autotune",
                            "optimizer-impl=fused", "optimizer-impl=foreach"]
    assert study["best"]["options"] == {"precision": "bf16", "compile": True, "compile-mode": "reduce-overhead"}
    assert study["best"]["vs_asked"] == pytest.approx(3.3)  # fused's 1% is within the margin: not kept
    assert study["stopped"] == "every setting tried"
    preset = Path(study["preset"])
    options = tuned_presets.read("pytorch-gpt", preset)
    assert options == study["best"]["options"]
    expanded = tuned_presets.expand("pytorch-gpt", ["--preset", f"tuned:{preset}", "--batch-size", "4"])
    assert expanded == ["--precision", "bf16", "--compile", "--compile-mode", "reduce-overhead", "--batch-size", "4"]


@pytest.mark.parametrize("ci, kept", [(15.0, {}), (5.0, {"precision": "bf16"})], ids=["within", "beyond"])
def test_a_gain_within_the_two_runs_intervals_is_not_kept(fake_runs, ci, kept):
    """bf16 is 20% faster: where its run and the run as asked spread ±15% each (root sum of squares 21), that is
    noise; ±5% each, a gain."""
    _, study = fake_runs(Trials(lambda args: 120.0 if "bf16" in args else 100.0, ci=lambda args: ci))
    assert study["best"]["options"] == kept
    lines = study_lines(study)  # the table says why a faster trial was not kept
    assert any(line.strip().startswith("precision=bf16 (within noise)") for line in lines) == (not kept)
    assert any(line.startswith("   within noise: ") for line in lines) == (not kept)


def test_a_value_the_best_so_far_ran_with_is_not_tried_again(fake_runs):
    """The run as asked left its optimizer at `auto`, which its record says ran as foreach: only fused is tried."""
    reported = lambda args: {"optimizer_impl": "fused" if "fused" in args else "foreach"}  # noqa: E731
    _, study = fake_runs(trials := Trials(speed_of, reported=reported))
    assert "optimizer-impl=fused" in trials.asked and "optimizer-impl=foreach" not in trials.asked
    assert study["trials"][0]["reported"] == {"optimizer_impl": "foreach"}


def test_a_setting_that_needs_a_flag_is_not_tried_where_the_flag_lost(fake_runs):
    _, study = fake_runs(trials := Trials(lambda args: 50.0 if "--compile" in args else 100.0))
    assert "compile=on" in trials.asked and not any(a.startswith("compile-mode") for a in trials.asked)
    assert study["best"]["options"] == {}  # nothing beat the run as asked: the preset says so by being empty


def test_the_budget_stops_the_trials_before_one_would_pass_it(fake_runs):
    code, study = fake_runs(trials := Trials(speed_of, seconds=20.0), budget_s=60.0)
    assert trials.asked == ["(as asked)", "precision=bf16", "precision=fp32"]  # a fourth would end at 80 s
    assert study["stopped"] == "the budget of 1 min was spent after 3 trial(s)"
    assert code == 0 and study["best"]["options"] == {"precision": "bf16"}


def test_a_failed_trial_is_kept_in_the_table_and_never_chosen(fake_runs):
    _, study = fake_runs(Trials(speed_of, failing=("compile=on",)))
    assert "compile" not in study["best"]["options"]
    failed = next(t for t in study["trials"] if t["label"] == "compile=on")
    assert failed["status"] == "failed" and failed["vs_asked"] is None
    assert any("compile=on" in line and "rank 0 failed" in line for line in study_lines(study))


def test_where_the_run_as_asked_fails_no_preset_is_written(fake_runs):
    code, study = fake_runs(Trials(speed_of, failing=("(as asked)",)))
    assert code == 1 and study["best"] is None and study["preset"] is None
    assert "no trial succeeded" in study_lines(study)[-1]


def test_the_table_and_the_report_page_name_every_trial_and_the_best(fake_runs, tmp_path):
    _, study = fake_runs(Trials(speed_of))
    lines = study_lines(study)
    assert lines[0].startswith("== tune pytorch-gpt: 8 trial(s)")
    assert any(line.strip().startswith("compile-mode=reduce-overhead (best)") for line in lines)
    best = next(line for line in lines if line.startswith("   best: "))
    assert all(words in best for words in ("precision=bf16", "compile,", "compile-mode=reduce-overhead", "(3.3 x"))
    page = report_body(tmp_path / "results")
    assert page.count("<tr>") == 1 + 8 and "compile-mode=reduce-overhead (best)" in page and "3.3 x" in page


def test_settings_are_set_and_read_in_the_case_arguments():
    gpt, ddp = load_case("pytorch-gpt"), load_case("pytorch-ddp")
    args = ["--batch-size", "4", "--compile", "--precision=fp32", "--lr", "1"]
    assert tuning.setting_of(gpt, args, "compile") is True and tuning.setting_of(gpt, args, "precision") == "fp32"
    assert tuning.setting_of(gpt, args, "gc-every") is None
    assert tuning.with_setting(gpt, args, "compile", False) == ["--batch-size", "4", "--precision=fp32", "--lr", "1"]
    assert tuning.with_setting(gpt, args, "precision", "bf16")[-2:] == ["--precision", "bf16"]
    assert "--precision=fp32" not in tuning.with_setting(gpt, args, "precision", "bf16")
    assert tuning.with_setting(ddp, ["--amp"], "amp", True) == ["--amp"]
    # the case says which options are flags: a flag takes no value, whatever follows it
    assert tuning.with_setting(ddp, ["--amp", "--workers", "2"], "amp", False) == ["--workers", "2"]


@pytest.mark.parametrize("name", known_cases())
def test_every_cases_tune_settings_are_its_own_options_with_values_it_takes(name):
    case = load_case(name)
    table = case.spec.get("tune")
    assert table and table["settings"], f"{name} has no [tune] settings"
    for option, values in table["settings"].items():
        for value in values:
            args = tuning.with_setting(case, case.tiny_args(), option, value)
            needs = (table.get("needs") or {}).get(option)
            case.parse_options(tuning.with_setting(case, args, needs, True) if needs else args)


@pytest.mark.parametrize("text,said", [
    (None, "cannot read it"),
    ("case = [", "not a TOML file"),
    ('case = "jax-gpt"\n[options]\n', "was tuned for case 'jax-gpt', not pytorch-gpt"),
    ('case = "pytorch-gpt"\n', "has no [options] table"),
])
def test_a_tuned_preset_that_cannot_be_used_is_refused_in_one_line(tmp_path, text, said):
    path = tmp_path / "p.toml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(UsageError, match=said.replace("[", r"\[").replace("(", r"\(")):
        tuned_presets.expand("pytorch-gpt", ["--preset", f"tuned:{path}"])


def test_a_preset_where_nothing_beat_the_run_as_asked_adds_nothing_and_is_taken_out(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(tuned_presets.text("pytorch-gpt", {}, ["nothing beat the run as asked"]))
    assert tuned_presets.expand("pytorch-gpt", ["--preset", f"tuned:{path}", "--lr", "1"]) == ["--lr", "1"]
    assert tuned_presets.expand("pytorch-gpt", [f"--preset=tuned:{path}"]) == []


def test_named_presets_and_other_arguments_pass_through():
    args = ["--preset", "h100", "--batch-size", "4"]
    assert tuned_presets.expand("pytorch-gpt", args) == args


def test_a_study_that_could_not_be_written_is_refused_before_the_first_trial(fake_runs, tmp_path):
    (tmp_path / "tune").write_text("a file where the studies go")
    trials = Trials(speed_of)
    said = f"the study, beside --results-dir (Make: RESULTS), {tmp_path / 'tune'}: nothing can be written there: "
    with pytest.raises(UsageError, match=f"^{re.escape(said)}.* is not a folder$"):
        fake_runs(trials)
    assert trials.asked == []


def test_a_budget_out_of_range_is_refused(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT
    done = subprocess.run([sys.executable, "-m", "suite", "tune", "--case", "pytorch-gpt", "--budget", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--budget (Make: BUDGET) is minutes from 0 to 1440" in done.stderr


def test_replace_keeps_a_request_a_trial_can_run():
    req = RunRequest(case="pytorch-gpt", case_args=["--batch-size", "max"], run_id="x")
    assert replace(req, case_args=["--batch-size", "4"], run_id=None).run_id is None


def test_a_dry_run_shows_the_run_as_asked_and_the_trials_and_starts_nothing(tmp_path):
    """`make tune DRY_RUN=1`: the run as asked planned as `make run DRY_RUN=1` plans it, then each setting's
    values in the order a study tries them; no trial, record or study."""
    import subprocess
    import sys

    from conftest import ROOT
    done = subprocess.run([sys.executable, "-m", "suite", "tune", "--case", "pytorch-gpt", "--tiny", "--dry-run",
                           "--budget", "5", "--results-dir", str(tmp_path / "results"), "--runs-dir",
                           str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "dry run: nothing was started and no record was written" in lines
    assert "cases/pytorch-gpt/train.py" in done.stdout
    trials = lines[lines.index(next(line for line in lines if line.startswith("tune: then, within 5 min"))) + 1:]
    table = load_case("pytorch-gpt").spec["tune"]
    assert [line.split(":")[0].strip() for line in trials[:-1]] == list(table["settings"])
    assert trials[-1] == "tune: dry run: no trial was started and no study was written"
    assert "  compile-mode: reduce-overhead, max-autotune (where compile is set)" in trials
    assert list(tmp_path.iterdir()) == []

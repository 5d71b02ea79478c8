"""`suite tune`: the case's settings that change its speed and not its work (its case.toml's [tune] table:
precision, compilation and its mode, channels-last, the optimizer's implementation, loader workers ...), tried
one at a time from the run as asked, each trial a normal run with its own record, within a budget of minutes.
A setting's best value is kept where it beats the best so far by more than MARGIN and by more than the two
runs' 95% intervals together (a gain their own spread could give is not kept), and the next setting is tried on
top of it; a value the best so far already ran with (its record's reported settings: `auto` resolved) is not
tried. `--batch-size max` in the arguments searches the batch in the first trial and keeps it for the others.
The study (every trial, the best) goes to reports/tune/<tune_id>.json, the best settings to <tune_id>.toml,
which `--preset tuned:<file>` passes back to any run of the case."""

import math
import time
from dataclasses import replace

from suite.analysis.tuning import study_lines, tune_folder
from suite.base import paths
from suite.base.errors import INTERRUPTED, UsageError
from suite.base.jsonfile import write_json_atomic
from suite.base.log import log
from suite.execution import run as runner
from suite.execution.console import print_dry_run
from suite.execution.request import RunRequest
from suite.inputs import tuned_presets
from suite.instack.case_options import is_flag, value_given, with_option
from suite.records.write import utc_now

MARGIN = 0.02  # a value is kept where it beats the best so far by more than this fraction (and its noise: gain_over)


def tune(req: RunRequest, budget_s: float) -> int:
    checked = runner.check(req)
    table = checked.case.spec.get("tune")
    if not table or not table.get("settings"):
        raise UsageError(f"case {checked.case.name} has nothing to tune: its case.toml has no [tune] settings")
    if len(checked.worlds) != 1:
        raise UsageError("tune measures one point: give NODES and GPUS_PER_NODE one value each")
    if req.dry_run:
        print_dry_run(runner.dry_run_plan(req, checked))
        print("\n".join(planned_trials(table, budget_s)))
        return 0
    # the study is written once the trials ran, up to the budget later: where it goes is checked first
    paths.refuse_unwritable(tune_folder(req.results_dir), "the study, beside --results-dir (Make: RESULTS),")
    stack_env = runner.prepare(req, checked)
    runner.check_stack(req, checked, stack_env)
    study = {"tune_id": f"{utc_now().replace(':', '').replace('-', '')}-{checked.case.name}-tune",
             "case": checked.case.name, "argv": req.provenance_argv(), "budget_s": budget_s,
             "started_at": utc_now(), "trials": []}
    started, args = time.monotonic(), list(req.case_args)
    batch_option = checked.search_asked.option if checked.search_asked else None
    best = trial(req, checked, stack_env, study, "(as asked)", {}, args)
    if best is None or best["status"] != "ok":
        return finish(req, study, None, INTERRUPTED if best is None else "the run as asked failed", started,
                      batch_option)
    if found := best.get("batch_found"):  # --batch-size max: searched once, then kept
        args = checked.search_asked.args_at(args, found)
    chosen: dict = {}
    stopped = "every setting tried"
    for name, values in table["settings"].items():
        if (needs := (table.get("needs") or {}).get(name)) and not setting_of(checked.case, args, needs):
            continue
        winner = None
        for value in values:
            if value == setting_of(checked.case, args, name) or value == ran_with(best, name):
                continue
            longest = max(t["seconds"] for t in study["trials"])
            if time.monotonic() - started + longest > budget_s:
                stopped = f"the budget of {budget_s / 60:g} min was spent after {len(study['trials'])} trial(s)"
                break
            tried = trial(req, checked, stack_env, study, f"{name}={value_label(value)}", {**chosen, name: value},
                          with_setting(checked.case, args, name, value))
            if tried is None:  # interrupted
                return finish(req, study, best, INTERRUPTED, started, batch_option)
            gain = gain_over(tried, winner or best) if tried["status"] == "ok" else None
            if gain == "kept":
                winner = tried
            elif gain == "within noise":
                tried["within_noise"] = True
        if winner:
            best, chosen = winner, dict(winner["settings"])
            args = with_setting(checked.case, args, name, chosen[name])
        if stopped != "every setting tried":
            break
    return finish(req, study, best, stopped, started, batch_option)


def planned_trials(table: dict, budget_s: float) -> list[str]:
    """What a dry run says of the trials after the run as asked: each setting's values, in the order tried."""
    needs = table.get("needs") or {}
    return [f"tune: then, within {budget_s / 60:g} min, the run above again for each value below that the best so far "
            "does not use, one setting changed at a time:",
            *(f"  {name}: {', '.join(value_label(v) for v in values)}"
              + (f" (where {needs[name]} is set)" if name in needs else "")
              for name, values in table["settings"].items()),
            "tune: dry run: no trial was started and no study was written"]


def gain_over(tried: dict, best: dict) -> str | None:
    """Says "kept" where `tried` is faster than `best` by more than MARGIN and by more than their 95% intervals' root
    sum of squares; "within noise" where only by more than MARGIN; None where not by more than MARGIN."""
    gain = tried["throughput"] - best["throughput"]
    if gain <= best["throughput"] * MARGIN:
        return None
    return "kept" if gain > math.hypot(tried.get("ci95") or 0.0, best.get("ci95") or 0.0) else "within noise"


def ran_with(entry: dict, name: str):
    """What a trial's record says the case ran with for a setting (its value where the trial asked `auto`, or
    nothing), None where the case does not report it."""
    return (entry.get("reported") or {}).get(name.replace("-", "_"))


def trial(req: RunRequest, checked, stack_env, study: dict, label: str, settings: dict, args: list[str]) -> dict | None:
    """One run of the case with `args`, its record written as any run's; what the study keeps of it."""
    began = time.monotonic()
    entry = {"label": label, "settings": settings, "args": args}
    try:
        options, asked = runner.case_options(checked.case, args)
    except UsageError as exc:
        entry.update(status="refused", reason=str(exc), throughput=None, seconds=0.0)
        study["trials"].append(entry)
        return entry
    log(f"tune: trial {len(study['trials']) + 1}: {label}")
    trial_req = replace(req, case_args=args, run_id=None)
    record, path = runner.run_point(trial_req, replace(checked, options=options, search_asked=asked),
                                    checked.worlds[0], stack_env, None, None)
    tp = record["metrics"]["throughput"]
    names = {name.replace("-", "_") for name in checked.case.spec["tune"]["settings"]}
    reported = {k: v for k, v in (record["config"].get("reported_by_case") or {}).items() if k in names}
    entry.update(status=record["status"], reason=record["reason"], throughput=tp["mean"], ci95=tp["ci95"],
                 reported=reported,
                 unit=tp.get("unit", "img/s"), run_id=record["run_id"], record=str(path),
                 seconds=round(time.monotonic() - began, 1))
    if searched := record["metrics"].get("batch_search"):
        entry["batch_found"] = searched["found"]
    study["trials"].append(entry)
    return None if record["reason"] == INTERRUPTED else entry


def finish(req: RunRequest, study: dict, best: dict | None, stopped: str, started: float,
           batch_option: str | None) -> int:
    """The study's file and, where a trial succeeded, the best settings as a preset (with the batch the first
    trial found as `batch_option`, where it searched); the table printed."""
    folder = tune_folder(req.results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    baseline = study["trials"][0] if study["trials"] else None
    study.update(seconds=round(time.monotonic() - started, 1), stopped=stopped, best=None, preset=None)
    if best and best["status"] == "ok":
        options = dict(best["settings"])
        if found := baseline.get("batch_found"):
            options[batch_option] = found
        preset = folder / f"{study['tune_id']}.toml"
        preset.write_text(tuned_presets.text(study["case"], options, [
            f"suite tune: the best of {len(study['trials'])} trial(s) of {study['case']} ({stopped})",
            f"measured {best['throughput']:.4g} {best['unit']} ({ratio(best, baseline)} x the run as asked), "
            f"record {best['record']}", f"pass it back: ARGS=\"--preset {tuned_presets.PREFIX}{preset}\""]))
        study.update(best={"label": best["label"], "options": options, "throughput": best["throughput"],
                           "vs_asked": ratio(best, baseline), "run_id": best["run_id"]}, preset=str(preset))
    for trial_entry in study["trials"]:
        trial_entry["vs_asked"] = ratio(trial_entry, baseline)
    path = folder / f"{study['tune_id']}.json"
    write_json_atomic(path, study)
    print("\n" + "\n".join(study_lines(study)) + f"\n   study: {path}")
    return 0 if study["best"] else 1


def ratio(entry: dict, baseline: dict | None) -> float | None:
    if not baseline or entry.get("throughput") is None or not baseline.get("throughput"):
        return None
    value = entry["throughput"] / baseline["throughput"]
    return round(value, 3) if math.isfinite(value) else None


def value_label(value) -> str:
    return "on" if value is True else "off" if value is False else str(value)


def setting_of(case, args: list[str], name: str):
    """A setting's value in the case arguments: True for a flag given, the last value given, None if absent."""
    return value_given(args, name, is_flag(case.spec, name))


def with_setting(case, args: list[str], name: str, value) -> list[str]:
    """The case arguments with a setting replaced: a flag added (True) or taken out (False), or --NAME VALUE."""
    return with_option(args, name, value, is_flag(case.spec, name))

"""The hint of a diagnosis names only options the run's case has: each case's [hints] table (case.toml)
speaks of its own options and verdicts; the framework-neutral hints name no case's option."""

import re

import pytest

from suite.analysis import diagnosis
from suite.inputs.cases import known_cases, load_case

OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
RUN_OPTIONS = {"precheck"}  # the runner's own (suite run --precheck), valid for every case


def case_options(case) -> set[str]:
    added = {"same-work"} if "same_work" in case.spec else set()
    return set(case.spec.get("options", {})) | added | ({"preset"} if case.spec.get("presets") else set())


@pytest.mark.parametrize("name", known_cases())
def test_a_cases_hints_name_its_verdicts_and_its_options(name):
    case = load_case(name)
    hints = case.spec.get("hints", {})
    assert set(hints) <= set(diagnosis.HINTS), f"{name}: [hints] keys {sorted(set(hints) - set(diagnosis.HINTS))}"
    for verdict, text in hints.items():
        unknown = set(OPTION.findall(text)) - RUN_OPTIONS - case_options(case)
        assert not unknown, f"{name} [hints] {verdict}: no option(s) {sorted(unknown)}"


def test_the_neutral_hints_name_no_cases_option():
    for verdict, text in diagnosis.HINTS.items():
        assert set(OPTION.findall(text)) <= RUN_OPTIONS, (verdict, text)


def test_the_cases_hint_replaces_the_neutral_one_for_its_verdict():
    record = {"world": {"device_type": "cpu", "devices": 2}, "config": {}, "metrics": {}, "repetitions": [
        {"status": "ok", "profile": {"data_wait_share": 0.5}}]}
    own = {"input": "more loader processes (--workers)"}
    assert diagnosis.diagnose(record, own)["hint"] == own["input"]
    assert diagnosis.diagnose(record)["hint"] == diagnosis.HINTS["input"]
    assert diagnosis.diagnose(record, {"communication": "x"})["hint"] == diagnosis.HINTS["input"]


def cpu_run(cores_busy: float) -> dict:
    """Two ranks on two cores of one host, each using `cores_busy` of its core, nothing known of the exchange."""
    return {"world": {"device_type": "cpu", "devices": 2, "slots": {"n1": 2},
                      "binding": {"policy": "none", "ranks": [{"rank": r, "host": "n1", "cpus": "0-1"}
                                                              for r in range(2)]}},
            "config": {}, "metrics": {},
            "repetitions": [{"status": "ok", "profile": {"cores_per_rank": cores_busy, "thread_busy": 0.53}}]}


def test_an_unknown_bound_on_cpus_speaks_of_cores_and_the_exchange_not_of_gpus():
    found = diagnosis.diagnose(cpu_run(0.74))
    assert found["verdict"] == "unknown", found
    assert found["why"] == "no figure points one way (cores busy 74%, thread busy 53%)"
    assert found["hint"] == diagnosis.HINTS["unknown-cpu"] and "GPU" not in found["hint"]
    assert diagnosis.diagnose(cpu_run(0.80))["hint"] == diagnosis.HINTS["compute-cpu"]


def test_an_unknown_bound_on_gpus_points_at_their_utilisation():
    record = {**cpu_run(0.5), "world": {"device_type": "cuda", "devices": 2, "slots": {"n1": 2}}}
    found = diagnosis.diagnose(record)
    assert found["verdict"] == "unknown" and found["hint"] == diagnosis.HINTS["unknown-cuda"], found

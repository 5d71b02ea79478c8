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


def ranks_on(cpus_by_rank: list[str], host=lambda r: "n1") -> dict:
    """cpu_run's record with these ranks' affinities."""
    record = cpu_run(0.9)
    record["world"] = {**record["world"], "devices": len(cpus_by_rank), "binding": {"policy": "none", "ranks": [
        {"rank": r, "host": host(r), "cpus": cpus} for r, cpus in enumerate(cpus_by_rank)]}}
    return record


def test_processes_that_outnumber_their_cores_are_named_and_the_hint_is_a_core_each():
    """Three workers on two cores (GPUS_PER_NODE=3 on a 2-core machine): the verdict stands, `why` says they
    took turns, and the first thing to try is a core for each."""
    found = diagnosis.diagnose(ranks_on(["0-1", "0-1", "0-1"]))
    assert found["verdict"] == "compute" and found["figures"]["processes_per_core"] == 1.5
    assert found["why"].endswith("; 3 processes on 2 cores of n1: they took turns on the cores, and the figures "
                                 "include that")
    assert found["hint"] == diagnosis.SHARED_CORES_HINT
    bound = diagnosis.diagnose(ranks_on(["0", "0", "1"]))  # each bound: one core shared by two
    assert bound["figures"]["processes_per_core"] == 1.5 and "3 processes on 2 cores of n1" in bound["why"]
    two_hosts = diagnosis.diagnose(ranks_on(["0", "0", "0", "0-3"], host=lambda r: "n1" if r < 3 else "n2"))
    assert "3 processes on 1 core of n1:" in two_hosts["why"] and "n2" not in two_hosts["why"]


@pytest.mark.parametrize("cpus_by_rank", [["0", "1"], ["0-1", "0-1"], ["0-3", "0-3"]])
def test_a_core_or_more_per_process_says_nothing_of_sharing(cpus_by_rank):
    found = diagnosis.diagnose(ranks_on(cpus_by_rank))
    assert "took turns" not in found["why"] and found["hint"] != diagnosis.SHARED_CORES_HINT
    assert found["figures"]["processes_per_core"] <= 1
    assert diagnosis.diagnose(ranks_on(["0-1", None]))["figures"]["processes_per_core"] is None  # one unknown

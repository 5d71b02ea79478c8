"""A step's seconds, which the host-bound verdict and the CPU per step rest on, in the unit the throughput
counts: a token case's timed samples are tokens, its global batch sequences."""

import pytest

from suite.analysis.diagnosis import exchange_share, step_seconds, steps


def record(unit: str, timed: int, global_batch: int, tokens_per_step: int | None = None) -> dict:
    reported = {"global_tokens_per_step": tokens_per_step} if tokens_per_step else {}
    return {"metrics": {"throughput": {"unit": unit}, "timed_images": timed, "timed_seconds": 5.0},
            "config": {"global_batch": global_batch, "reported_by_case": reported}}


def test_a_token_case_counts_steps_in_tokens_not_sequences():
    gpt = record("tokens/s", timed=10 * 4 * 1024, global_batch=4, tokens_per_step=4 * 1024)
    assert steps(gpt) == 10 and step_seconds(gpt) == pytest.approx(0.5)


def test_an_image_case_counts_steps_in_images():
    resnet = record("img/s", timed=10 * 64, global_batch=64)
    assert steps(resnet) == 10 and step_seconds(resnet) == pytest.approx(0.5)
    assert steps(record("tokens/s", timed=4096, global_batch=4)) is None  # no tokens per step: no guess


def with_results(*results: dict) -> dict:
    resnet = record("img/s", timed=10 * 64, global_batch=64)  # ten steps of 0.5 s
    return {**resnet, "repetitions": [{"status": "ok", "results": r} for r in results]}


def test_the_exchange_share_is_the_cases_own_figure_where_it_made_one():
    """pytorch-ddp pairs each pass without the exchange with the iteration before it; that median, not a pass set
    against the window's mean step."""
    paired = with_results({"step_without_exchange_s": 0.4, "exchange_share": 0.55},
                          {"step_without_exchange_s": 0.4, "exchange_share": 0.45})
    assert exchange_share(paired) == pytest.approx(0.5)


def test_an_older_record_sets_its_one_pass_against_the_mean_step():
    assert exchange_share(with_results({"step_without_exchange_s": 0.2})) == pytest.approx(0.6)
    assert exchange_share(with_results({})) is None

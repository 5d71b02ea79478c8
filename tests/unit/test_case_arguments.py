"""Reading and setting one option in a case's arguments (suite/instack/case_options.py), the one scanner the
batch search, `suite tune`, tuned presets and named presets share: `--NAME V`, `--NAME=V` and bare flags, the
last one given winning, and nothing else touched."""

import pytest

from suite.instack.case_options import given, value_given, with_option, with_same_work, without_option

ARGS = ["--batch-size", "4", "--compile", "--precision=fp32", "--lr", "1", "--batch-size=max"]


def test_each_place_an_option_is_given_with_its_value():
    assert given(ARGS, "batch-size") == [(0, 2, "4"), (6, 7, "max")]
    assert given(ARGS, "compile", flag=True) == [(2, 3, True)]
    assert given(ARGS, "amp", flag=True) == [] and given(["--lr"], "lr") == []  # no value: the parser's to refuse
    assert value_given(ARGS, "batch-size") == "max" and value_given(ARGS, "precision") == "fp32"
    assert value_given(ARGS, "compile", flag=True) is True and value_given(ARGS, "amp", flag=True) is None


def test_an_option_taken_out_set_and_the_rest_kept_in_order():
    assert without_option(ARGS, "batch-size") == ["--compile", "--precision=fp32", "--lr", "1"]
    assert without_option(ARGS, "batch-size", which=lambda v: v == "max") == ARGS[:-1]
    assert with_option(ARGS, "precision", "bf16")[-2:] == ["--precision", "bf16"]
    assert with_option(ARGS, "compile", False, flag=True) == ["--batch-size", "4", "--precision=fp32", "--lr", "1",
                                                            "--batch-size=max"]
    assert with_option(["--amp", "--workers", "2"], "amp", True, flag=True) == ["--workers", "2", "--amp"]
    assert with_option([], "batch-size", 8) == ["--batch-size", "8"]


@pytest.mark.parametrize("argv", [["--preset", "h100", "--lr", "1"], ["--preset=h100", "--lr", "1"]])
def test_a_named_preset_stands_for_its_options_placed_first(argv):
    case = {"presets": {"h100": {"source": "x", "compile": True, "batch-size": 32}}}
    assert with_same_work(case, argv) == ["--compile", "--batch-size", "32", *argv]

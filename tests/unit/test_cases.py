"""What every case folder must hold, checked for each one found (a new case is checked by adding it)."""

import pytest

from suite.inputs.cases import known_cases, load_case


@pytest.mark.parametrize("name", known_cases())
def test_tiny_sizes_are_options_of_the_case(name):
    case = load_case(name)
    tiny = case.spec.get("tiny")
    assert tiny, f"cases/{name}/case.toml has no [tiny] table"
    assert set(tiny) <= set(case.spec.get("options", {})), "every [tiny] key is one of the case's options"
    options = case.parse_options(case.tiny_args())
    assert all(options[key] == value for key, value in tiny.items())


def test_tiny_args_overrides():
    case = load_case("pytorch-synthetic")
    args = case.tiny_args(num_iters=500, image_size=None, amp=True)
    assert args[args.index("--num-iters") + 1] == "500" and "--image-size" not in args and "--amp" in args
    assert case.parse_options(args)["amp"] is True and case.parse_options(case.tiny_args())["amp"] is False

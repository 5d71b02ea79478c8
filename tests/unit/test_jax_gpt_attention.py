"""jax-gpt's attention and what follows from it (cases/jax-gpt/train.py): cuDNN's fused attention where it runs
(a GPU of compute capability 8 or later, bf16, a head width it takes), jax.nn.dot_product_attention in XLA or the
written-out attention elsewhere; the work stays the formula while XLA's count, short of cuDNN's custom call,
says so; --preset h100 holds bf16, cuDNN's attention and the batch, aiming at 35% of an H100's 989 TFLOP/s."""

import importlib.util

import pytest
from conftest import ROOT

from suite.inputs.cases import load_case

_spec = importlib.util.spec_from_file_location("jax_gpt_train", ROOT / "cases" / "jax-gpt" / "train.py")
train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train)


@pytest.mark.parametrize("asked, platform, wanted, capability, head, chosen", [
    ("auto", "gpu", "bf16", 9.0, 64, "cudnn"),  # an H100 under bf16, GPT-2 small's head width
    ("auto", "gpu", "bf16", 8.0, 128, "cudnn"),  # an A100, the widest head cuDNN takes
    ("auto", "cpu", "fp32", 0.0, 64, "einsum"),  # CPUs: written out, as before
    ("auto", "gpu", "fp32", 9.0, 64, "einsum"),  # cuDNN's fused attention wants 16-bit inputs
    ("auto", "gpu", "bf16", 7.0, 64, "einsum"),  # a V100: none
    ("auto", "gpu", "bf16", 9.0, 12, "einsum"),  # a head width not a multiple of 8
    ("auto", "gpu", "bf16", 9.0, 256, "einsum"),  # too wide
    ("cudnn", "gpu", "bf16", 9.0, 64, "cudnn"),
    ("cudnn", "cpu", "fp32", 0.0, 64, "xla"),  # the same jax.nn.dot_product_attention, XLA's implementation
    ("cudnn", "cpu", "bf16", 0.0, 64, "xla"),
    ("cudnn", "gpu", "fp32", 9.0, 64, "xla"),
    ("xla", "gpu", "bf16", 9.0, 64, "xla"),
    ("einsum", "gpu", "bf16", 9.0, 64, "einsum"),
])
def test_the_attention_is_chosen_per_platform(asked, platform, wanted, capability, head, chosen):
    assert train.choose_attention(asked, platform, wanted, capability, head) == chosen


def test_xlas_count_says_it_lacks_cudnns_attention_and_the_work_stays_the_formula():
    assert train.counted_source("einsum") == train.counted_source("xla") == train.XLA_COUNTED
    assert train.counted_source("cudnn").startswith(train.XLA_COUNTED)
    assert "counts as no FLOPs" in train.counted_source("cudnn") and "12 L H Q T" in train.counted_source("cudnn")
    source = (ROOT / "cases" / "jax-gpt" / "train.py").read_text()
    assert "probe.work(flops_per_sample=formula," in source  # whatever the attention


def test_the_h100_preset_sets_bf16_cudnn_attention_and_the_batch_and_later_options_win():
    case = load_case("jax-gpt")
    preset = case.spec["presets"]["h100"]
    assert "35%" in preset["source"] and "989 TFLOP/s" in preset["source"] and "40.1% on an H200" in preset["source"]
    options = case.parse_options(["--preset", "h100"])
    assert (options["precision"], options["attention"], options["batch-size"]) == ("bf16", "cudnn", 32)
    assert (options["parallel"], options["context"], options["preset"]) == ("dp", 1024, "h100")
    assert case.parse_options(["--preset", "h100", "--attention", "xla"])["attention"] == "xla"


def test_the_default_attention_is_the_bare_loops_written_out_one():
    options = load_case("jax-gpt").parse_options([])
    assert options["attention"] == "einsum" and options["preset"] is None

"""What the PyTorch DDP cases share in putting their step together (cases/_shared/ddp_assembly.py), with
fakes for torch.compile and DistributedDataParallel: pytorch-ddp wraps before it compiles (DDP's optimizer
cuts the graph at the buckets) and trains the bare model at a world of one, saying so; the optimizer is
fused on GPUs and foreach elsewhere unless asked; pytorch-ddp's --preset h100 holds what its GPU run needs."""

import pytest
from support.assembly_fakes import Recorder

from cases._shared import ddp_assembly
from suite.inputs.cases import load_case


def test_more_than_one_rank_wraps_the_model_then_compiles_the_wrapper():
    faked = Recorder()
    model, wrapped = ddp_assembly.wrapped_then_compiled("resnet", 2, faked.wrap, faked.compile)
    assert faked.calls == [("ddp", "resnet"), ("compile", ("ddp", "resnet"))]
    assert (model, wrapped) == (("compiled", ("ddp", "resnet")), ("ddp", "resnet"))
    faked = Recorder()
    assert ddp_assembly.wrapped_then_compiled("resnet", 8, faked.wrap) == (("ddp", "resnet"), ("ddp", "resnet"))
    assert ddp_assembly.world_1_notes(2) == []


def test_a_world_of_one_trains_the_bare_model_compiled_where_asked_and_says_why():
    faked = Recorder()
    assert ddp_assembly.wrapped_then_compiled("resnet", 1, faked.wrap) == ("resnet", None) and faked.calls == []
    model, wrapped = ddp_assembly.wrapped_then_compiled("resnet", 1, faked.wrap, faked.compile)
    assert (model, wrapped, faked.calls) == (("compiled", "resnet"), None, [("compile", "resnet")])
    [note] = ddp_assembly.world_1_notes(1)
    assert note.startswith("world size 1: nothing to exchange") and "no DistributedDataParallel" in note


@pytest.mark.parametrize("requested, device, used", [
    ("auto", "cuda", "fused"), ("auto", "cpu", "foreach"), ("foreach", "cuda", "foreach"), ("fused", "cpu", "fused"),
])
def test_the_optimizer_is_fused_on_gpus_and_foreach_elsewhere_unless_asked(requested, device, used):
    assert ddp_assembly.optimizer_implementation(requested, device) == used
    flags = ddp_assembly.optimizer_flags(used)
    assert flags[used] is True and sum(flags.values()) == 1  # torch refuses both at once


def test_pytorch_ddps_h100_preset_adds_cuda_graphs_and_fused_sgd_to_dles_settings():
    case = load_case("pytorch-ddp")
    dle, h100 = case.parse_options(["--preset", "dle"]), case.parse_options(["--preset", "h100"])
    assert "7,160" in case.spec["presets"]["h100"]["source"] and "CUDA graphs" in case.spec["presets"]["h100"]["source"]
    for option in ("amp", "channels-last", "batch-size"):
        assert h100[option] == dle[option]
    assert (h100["compile"], h100["compile-mode"], h100["optimizer-impl"]) == (True, "reduce-overhead", "fused")
    assert case.parse_options(["--preset", "h100", "--compile-mode", "default"])["compile-mode"] == "default"
    plain = case.parse_options([])
    assert (plain["compile"], plain["compile-mode"], plain["optimizer-impl"]) == (False, "default", "auto")

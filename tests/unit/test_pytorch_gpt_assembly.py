"""pytorch-gpt's training step put together (cases/pytorch-gpt/assembly.py), with fakes for torch.compile,
DistributedDataParallel and fully_shard: at a world of one the model trains bare and the record says why;
--compile compiles the model with its loss before DDP wraps it (nanoGPT's order), each block before
fully_shard shards it (torchtitan's); FSDP2 at a world of one
says that it saves nothing and keeps its gathered parameters; --gc-every turns automatic collection off
over the steps and undoes it; --preset h100 holds what a GPU run needs."""

import gc
import importlib.util

import pytest
from conftest import ROOT
from support.assembly_fakes import Recorder

from suite.inputs.cases import load_case

_spec = importlib.util.spec_from_file_location("pytorch_gpt_assembly", ROOT / "cases" / "pytorch-gpt" / "assembly.py")
assembly = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(assembly)


def test_ddp_at_a_world_of_one_trains_the_bare_model_and_the_record_says_why():
    faked = Recorder()
    model, wrapped = assembly.ddp_model("model+loss", 1, None, faked.wrap)
    assert (model, wrapped) == ("model+loss", None) and faked.calls == []  # gradient_sync gets None: nothing
    settings = assembly.ddp_settings(25.0, 1)
    assert settings["wrapped"] is False and settings["bucket_cap_mb"] == 25.0
    assert settings["why"].startswith("world size 1: nothing to exchange")
    model, wrapped = assembly.ddp_model("model+loss", 2, None, faked.wrap)
    assert model == wrapped == ("ddp", "model+loss") and faked.calls == [("ddp", "model+loss")]
    assert assembly.ddp_settings(25.0, 2) == {"bucket_cap_mb": 25.0, "wrapped": True}


def test_compile_takes_the_model_with_its_loss_and_ddp_wraps_the_compiled_module():
    faked = Recorder()
    model, wrapped = assembly.ddp_model("model+loss", 4, faked.compile, faked.wrap)
    assert faked.calls == [("compile", "model+loss"), ("ddp", ("compiled", "model+loss"))]
    assert model is wrapped and wrapped == ("ddp", ("compiled", "model+loss"))
    faked = Recorder()
    assert assembly.ddp_model("model+loss", 1, faked.compile, faked.wrap) == (("compiled", "model+loss"), None)
    assert faked.calls == [("compile", "model+loss")]  # a world of one: compiled, never wrapped
    assert assembly.compiled_parts("ddp", 4) == "the model with its loss as one graph, then DistributedDataParallel"
    assert assembly.compiled_parts("ddp", 1) == "the model with its loss as one graph"


def test_under_fsdp_each_block_is_compiled_before_it_is_sharded_and_put_in_its_place():
    faked, blocks = Recorder(), ["block0", "block1"]
    assert assembly.shard_blocks("gpt", blocks, faked.shard, faked.compile) == 3
    assert faked.calls == [("compile", "block0"), ("shard", ("compiled", "block0")),
                           ("compile", "block1"), ("shard", ("compiled", "block1")), ("shard", "gpt")]
    assert blocks == [("compiled", "block0"), ("compiled", "block1")]  # the model calls the compiled blocks
    assert assembly.compiled_parts("fsdp", 2).startswith("each block, then fully_shard")
    faked, blocks = Recorder(), ["block0", "block1"]
    assembly.shard_blocks("gpt", blocks, faked.shard)
    assert faked.calls == [("shard", "block0"), ("shard", "block1"), ("shard", "gpt")]
    assert blocks == ["block0", "block1"]


def test_fsdp_at_a_world_of_one_says_that_sharding_only_costs_and_keeps_the_gathered_parameters():
    assert assembly.reshard_after_forward(False, 1) is False and assembly.reshard_after_forward(True, 1) is False
    assert assembly.reshard_after_forward(False, 2) is True and assembly.reshard_after_forward(True, 2) is False
    alone = assembly.fsdp_settings("bfloat16", False, 13, 1)
    assert "sharding saves no memory" in alone["world_1_note"] and "copy that shard" in alone["world_1_note"]
    assert alone["reshard_after_forward"] is False
    assert "gather the same shard again" in alone["reshard_after_forward_why"]
    assert assembly.fsdp_settings("bfloat16", True, 13, 2) == {
        "param_dtype": "bfloat16", "reduce_dtype": "float32", "reshard_after_forward": True, "sharded_modules": 13}


def test_the_summary_notes_what_a_world_of_one_did_to_each_parallel_mode_and_nothing_above_it():
    ddp_note, = assembly.world_notes("ddp", assembly.ddp_settings(25.0, 1))
    assert ddp_note.startswith("world size 1: nothing to exchange")
    fsdp_note, = assembly.world_notes("fsdp", assembly.fsdp_settings("bfloat16", False, 13, 1))
    assert fsdp_note.startswith("--parallel fsdp at world size 1: the one shard") and "measure that cost" in fsdp_note
    assert assembly.world_notes("ddp", assembly.ddp_settings(25.0, 2)) == []
    assert assembly.world_notes("fsdp", assembly.fsdp_settings("bfloat16", True, 13, 2)) == []


def test_the_gpu_pass_spins_once_where_it_starts_collectives():
    default = (0.05, 0.2)
    assert assembly.pass_spins("fsdp", 2, default) == (2.0,)  # all-gathers: as many tries on every rank
    assert assembly.pass_spins("fsdp", 1, default) == assembly.pass_spins("ddp", 8, default) == default


class FakeCollector:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def test_gc_every_turns_automatic_collection_off_over_the_steps_and_collects_every_n():
    collector = FakeCollector()
    with assembly.collected_every(3, collector) as after_step:
        assert collector.calls == [("collect",), ("freeze",), ("disable",)]
        for _ in range(7):
            after_step()
    assert collector.calls[3:] == [("collect", 1), ("collect", 1), ("enable",), ("unfreeze",)]
    assert assembly.gc_settings(3) == {"automatic": False, "collect_every_steps": 3, "generation": 1,
                                       "frozen_before_steps": True}


def test_gc_every_zero_leaves_the_collector_alone_and_a_real_collector_is_restored():
    collector = FakeCollector()
    with assembly.collected_every(0, collector) as after_step:
        after_step()
    assert collector.calls == [] and assembly.gc_settings(0) == {"automatic": True}
    with pytest.raises(RuntimeError), assembly.collected_every(1, gc) as after_step:
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        after_step()
        raise RuntimeError("a failed step")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_h100_preset_sets_what_a_gpu_run_needs_and_later_options_win():
    case = load_case("pytorch-gpt")
    preset = case.spec["presets"]["h100"]
    assert "41% MFU" in preset["source"] and "989 TFLOP/s" in preset["source"]
    options = case.parse_options(["--preset", "h100"])
    assert (options["precision"], options["compile"], options["compile-mode"]) == ("bf16", True, "default")
    assert (options["optimizer-impl"], options["batch-size"], options["gc-every"]) == ("fused", 32, 50)
    assert (options["parallel"], options["activation-checkpointing"], options["preset"]) == ("ddp", False, "h100")
    assert case.parse_options(["--preset", "h100", "--batch-size", "16"])["batch-size"] == 16


def test_the_defaults_change_nothing_a_plain_run_did():
    options = load_case("pytorch-gpt").parse_options([])
    assert (options["compile"], options["compile-mode"], options["optimizer-impl"]) == (False, "default", "auto")
    assert options["gc-every"] == 0 and options["preset"] is None

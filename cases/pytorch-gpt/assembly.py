"""How pytorch-gpt puts its training step together, written without torch so that unit tests can hold
it with fakes (tests/unit/test_pytorch_gpt_assembly.py): train.py hands these functions torch.compile,
DistributedDataParallel and fully_shard.

- DDP: the model with its loss compiled as one graph, then DistributedDataParallel around the compiled
  module (nanoGPT's order); at a world of one the model trains bare, nothing to exchange.
- FSDP2: each block compiled, then sharded, block by block, then the whole model sharded
  (torchtitan's order), the loss compiled on its own; at a world of one the record says that
  sharding saves nothing there, and the gathered parameters are kept from forward to backward.
- AdamW's implementation: fused on GPUs, foreach elsewhere, unless asked (cases/_shared/ddp_assembly.py).
- Python's garbage collector, where asked (torchtitan's): automatic collection off over the steps,
  what lived before them frozen, a young collection every N steps."""

import contextlib
import gc

from cases._shared.ddp_assembly import DDP_WORLD_1

FSDP_WORLD_1 = ("world size 1: the one shard is the whole model, so sharding saves no memory; the all-gathers and "
                "reduce-scatters only copy that shard, a cost a single device does not need")
KEEP_GATHERED_WORLD_1 = ("world size 1: resharding after the forward pass would free a copy of the parameters only "
                         "to gather the same shard again for the backward pass")


def ddp_model(with_loss, world: int, compile_fn=None, wrap_fn=None):
    """(the module a step calls, the DDP wrapper or None): `with_loss` (the model and its loss in one
    forward) compiled by compile_fn where given, then wrapped by wrap_fn (DistributedDataParallel)
    where more than one rank trains."""
    model = compile_fn(with_loss) if compile_fn else with_loss
    if world == 1:
        return model, None
    wrapped = wrap_fn(model)
    return wrapped, wrapped


def ddp_settings(bucket_cap_mb: float, world: int) -> dict:
    if world == 1:
        return {"bucket_cap_mb": bucket_cap_mb, "wrapped": False, "why": DDP_WORLD_1}
    return {"bucket_cap_mb": bucket_cap_mb, "wrapped": True}


def shard_blocks(model, blocks, shard_fn, compile_fn=None) -> int:
    """Each block compiled by compile_fn where given (and put in its place in `blocks`), then sharded by
    shard_fn; then the whole model sharded. The modules sharded."""
    for index, block in enumerate(blocks):
        if compile_fn:
            block = blocks[index] = compile_fn(block)
        shard_fn(block)
    shard_fn(model)
    return len(blocks) + 1


def reshard_after_forward(keep_gathered: bool, world: int) -> bool:
    return not keep_gathered and world > 1


def fsdp_settings(param_dtype: str, reshard: bool, sharded_modules: int, world: int) -> dict:
    settings = {"param_dtype": param_dtype, "reduce_dtype": "float32", "reshard_after_forward": reshard,
                "sharded_modules": sharded_modules}
    if world == 1:
        settings.update(world_1_note=FSDP_WORLD_1, reshard_after_forward_why=KEEP_GATHERED_WORLD_1)
    return settings


def world_notes(parallel: str, settings: dict) -> list[str]:
    """What the parallel mode did at this world size, for the run's summary (config.reported_by_case.notes):
    at world size 1 DDP is skipped and FSDP shards nothing, which its figures then reflect."""
    if parallel == "ddp" and not settings.get("wrapped", True):
        return [settings["why"]]
    if parallel == "fsdp" and settings.get("world_1_note"):
        return [f"--parallel fsdp at {settings['world_1_note']}: its figures measure that cost, and --parallel ddp "
                "(no wrapper at world size 1) the model alone"]
    return []


def compiled_parts(parallel: str, world: int) -> str:
    """What --compile compiles, in words for the record."""
    if parallel == "fsdp":
        return "each block, then fully_shard (torchtitan's order); the loss on its own"
    return "the model with its loss as one graph" + (", then DistributedDataParallel" if world > 1 else "")


def pass_spins(parallel: str, world: int, default: tuple[float, ...]) -> tuple[float, ...]:
    """Spins for cases/_shared/gpu_busy.py's pass: one long one where the pass starts collectives
    (FSDP2's all-gathers over more than one rank: as many tries on every rank), else `default`."""
    return (2.0,) if parallel == "fsdp" and world > 1 else default


def gc_settings(every: int) -> dict:
    if every <= 0:
        return {"automatic": True}
    return {"automatic": False, "collect_every_steps": every, "generation": 1, "frozen_before_steps": True}


@contextlib.contextmanager
def collected_every(every: int, collector=gc):
    """A function to call after each step. every > 0: what lives now collected once and frozen (never
    scanned again), automatic collection off, and a young collection every `every` steps, so that no
    rank pauses at a step of its own and holds up the others at the next exchange (torchtitan's gc_freq);
    all undone at the end. every <= 0: Python's automatic collection, untouched."""
    if every <= 0:
        yield lambda: None
        return
    collector.collect()
    collector.freeze()
    collector.disable()
    steps = 0

    def after_step():
        nonlocal steps
        steps += 1
        if steps % every == 0:
            collector.collect(1)

    try:
        yield after_step
    finally:
        collector.enable()
        collector.unfreeze()

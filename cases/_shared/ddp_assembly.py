"""What the PyTorch cases with DistributedDataParallel share in putting their step together, written without
torch so that unit tests hold it with fakes (tests/unit/test_ddp_assembly.py): the cases hand in
torch.compile and DistributedDataParallel.

- At a world of one the model trains bare: the wrapper would only copy gradients into buckets and
  register hooks, with nothing to exchange; the record says so.
- The optimizer's implementation: fused on GPUs (one kernel for every parameter's update), foreach
  elsewhere, unless asked."""

DDP_WORLD_1 = "world size 1: nothing to exchange, so the bare model trains (no DistributedDataParallel)"


def wrapped_then_compiled(model, world: int, wrap_fn, compile_fn=None):
    """(the module a step calls, the DDP wrapper or None): `model` wrapped by wrap_fn where more than one
    rank trains, then compiled by compile_fn where given (DDP's optimizer in the compiler cuts the graph at
    the gradient buckets, so the exchange overlaps the backward pass); at a world of one the bare model,
    compiled where asked."""
    wrapped = wrap_fn(model) if world > 1 else None
    top = wrapped if wrapped is not None else model
    return (compile_fn(top) if compile_fn else top), wrapped


def world_1_notes(world: int) -> list[str]:
    """The run summary's notes (config.reported_by_case.notes) on what DDP did at this world size."""
    return [DDP_WORLD_1] if world == 1 else []


def optimizer_implementation(requested: str, device_type: str) -> str:
    """auto: fused on GPUs (one kernel for every parameter's update), foreach elsewhere."""
    if requested != "auto":
        return requested
    return "fused" if device_type == "cuda" else "foreach"


def optimizer_flags(implementation: str) -> dict:
    """The optimizer's keyword arguments for the implementation (the two flags are exclusive)."""
    return {"fused": implementation == "fused", "foreach": implementation == "foreach"}

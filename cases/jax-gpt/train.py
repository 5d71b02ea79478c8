"""jax-gpt: the GPT-2-style decoder of pytorch-gpt in Flax (gpt.py), trained by one jax.jit-ted step over a
jax.sharding.Mesh of every device of every process, measured in tokens/s.

One process per device, started by the suite's jaxdist launcher or by a bare srun, joined by
jax.distributed.initialize (cases/_shared/jax_dist.py; on CPUs the processes exchange through Gloo).
The batch is sharded over the mesh's one axis, "data"; --parallel dp replicates the parameters and the
optimizer state on every device (gradients all-reduced), --parallel fsdp shards each of them over the
same axis along its largest dimension that divides (XLA gathers the parameters for the products and
reduce-scatters the gradients, as MaxText's FSDP does). --data synthetic trains on a fixed batch of
random tokens; --data tokens on windows of $SUITE_DATA_DIR/tokens/train.bin (pytorch-gpt's token file
and windows), each process its own. A step is --grad-accum micro-batches (unrolled inside the step).
The step is compiled before the warmup (its time recorded, not timed); XLA's own FLOP count of the
compiled step is the work, the formula beside it. Options come from case.toml."""

import json
import os
import time
from pathlib import Path

from cases._shared.jax_dist import agree, place, start
from suite.instack.case_options import parse_case_args
from suite.instack.matmul_peak import measure
from suite.instack.probe import Probe, announce

CASE = "jax-gpt"
FIRST_LOSSES = 20  # steps whose loss the record lists one by one
XLA_COUNTED = "XLA's cost analysis of the compiled train step (compiled.cost_analysis()['flops']), per token"


def data_folder() -> Path:
    return Path(os.environ.get("SUITE_DATA_DIR", "data")) / "tokens"


def main() -> None:
    announce()
    args = parse_case_args(__file__)
    where = place()
    platform = start(where, args.no_cuda)

    import flax
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from gpt import GPT, N_CONVENTION, GPTConfig, next_token_loss, parameters_counted, training_flops_per_token
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    try:
        config = GPTConfig(args.layers, args.heads, args.width, args.context, args.vocab_size)
    except ValueError as exc:
        raise SystemExit(f"{CASE}: {exc}") from None
    devices = jax.devices()
    local = jax.local_devices()
    mesh = Mesh(np.array(devices), ("data",))
    wanted = args.precision if args.precision != "auto" else ("bf16" if platform == "gpu" else "fp32")
    dtype = jnp.bfloat16 if wanted == "bf16" else jnp.float32
    model = GPT(config, dtype)
    optimizer = optax.adamw(args.lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)

    def spec(shape) -> P:
        """fsdp: the largest dimension that divides over the devices, sharded; dp (or none divides): replicated."""
        if args.parallel == "dp":
            return P()
        fits = [i for i, n in enumerate(shape) if n % len(devices) == 0]
        if not fits:
            return P()
        axis = max(fits, key=lambda i: shape[i])
        return P(*[("data" if i == axis else None) for i in range(len(shape))])

    def shardings(tree):
        return jax.tree_util.tree_map(lambda leaf: NamedSharding(mesh, spec(leaf.shape)), tree)

    sample = jnp.zeros((1, config.context), dtype=jnp.int32)
    init = lambda key: model.init(key, sample)["params"]  # noqa: E731
    param_shapes = jax.eval_shape(init, jax.random.PRNGKey(args.seed))
    param_sh = shardings(param_shapes)
    opt_sh = shardings(jax.eval_shape(optimizer.init, param_shapes))
    # the same weights on every process and under dp and fsdp alike: one key, each device makes its share
    params = jax.jit(init, out_shardings=param_sh)(jax.random.PRNGKey(args.seed))
    opt_state = jax.jit(optimizer.init, out_shardings=opt_sh)(params)
    sharded = sum(1 for s in jax.tree_util.tree_leaves(param_sh, is_leaf=lambda x: isinstance(x, NamedSharding))
                  if any(s.spec))

    accum = args.grad_accum
    batch = args.global_batch // len(devices) if args.global_batch else args.batch_size
    batch_sh = NamedSharding(mesh, P(None, "data", None))  # (micro-batch, sequence, token)

    def loss_of(p, inputs, targets):
        return next_token_loss(model.apply({"params": p}, inputs), targets)

    def train_step(p, state, inputs, targets):
        # The micro-batches unrolled, not a scan: XLA's cost analysis counts a loop's body once.
        loss, grads = jax.value_and_grad(loss_of)(p, inputs[0], targets[0])
        for micro in range(1, accum):
            more_loss, more = jax.value_and_grad(loss_of)(p, inputs[micro], targets[micro])
            loss, grads = loss + more_loss, jax.tree_util.tree_map(jnp.add, grads, more)
        if accum > 1:
            loss, grads = loss / accum, jax.tree_util.tree_map(lambda g: g / accum, grads)
        updates, state = optimizer.update(grads, state, p)
        return optax.apply_updates(p, updates), state, loss

    replicated = NamedSharding(mesh, P())
    step = jax.jit(train_step, in_shardings=(param_sh, opt_sh, batch_sh, batch_sh),
                   out_shardings=(param_sh, opt_sh, replicated), donate_argnums=(0, 1))

    per_process = batch * len(local)

    def to_global(rows: np.ndarray):
        """(accum, per_process, context + 1) tokens of this process -> global (inputs, targets)."""
        rows = rows.astype(np.int32)
        make = lambda a: jax.make_array_from_process_local_data(batch_sh, a)  # noqa: E731
        return make(np.ascontiguousarray(rows[..., :-1])), make(np.ascontiguousarray(rows[..., 1:]))

    probe = Probe(where["rank"], where["world"], where["local_rank"], where["local_world"], samples="tokens")
    if args.data == "synthetic":
        rng = np.random.default_rng(args.seed + 1 + where["rank"])
        fixed = to_global(rng.integers(0, config.vocab, (accum, per_process, config.context + 1)))
        next_batch, data = (lambda: fixed), {"data": "synthetic"}
    else:
        next_batch, data = token_batches(args, where, config, per_process, accum, to_global, probe)
    # the start line before compiling: a process on another device than the runner asked for stops here
    tokens_per_device = batch * accum * config.context
    parameters = sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(param_shapes))
    device_kind = devices[0].device_kind if platform == "gpu" else "cpu"
    probe.start(
        config={
            "model": "gpt", "model_name": model_name(config), "parameters": parameters,
            "layers": config.layers, "heads": config.heads, "width": config.width, "context": config.context,
            "vocab_size": config.vocab, "device_type": "cuda" if platform == "gpu" else "cpu",
            "device_name": device_kind, "dtype": "amp-bfloat16" if dtype == jnp.bfloat16 else "float32", **data,
            "batch_per_device": batch * accum, "global_batch": batch * accum * len(devices),
            "micro_batch": batch, "grad_accum": accum, "tokens_per_device_per_step": tokens_per_device,
            "global_tokens_per_step": tokens_per_device * len(devices), "lr": args.lr,
            "threads_per_worker": where.get("threads"), "backend": "gloo" if platform == "cpu" else "nccl",
            "launcher": "jaxdist", "parallel": args.parallel, "processes": jax.process_count(),
            "devices": len(devices), "local_devices": len(local), "mesh": {"data": len(devices)},
            args.parallel: {"param_sharding": "replicated" if args.parallel == "dp" else "data axis, largest dim",
                            "sharded_parameters": sharded,
                            "parameter_arrays": len(jax.tree_util.tree_leaves(param_shapes))},
            "seed": args.seed,
        },
        versions={"jax": jax.__version__, "jaxlib": _version("jaxlib"), "flax": flax.__version__,
                  "optax": optax.__version__, "numpy": np.__version__},
    )

    started = time.perf_counter()
    inputs, targets = next_batch()
    compiled = step.lower(params, opt_state, inputs, targets).compile()
    compile_seconds = time.perf_counter() - started
    counted = xla_flops(compiled) / tokens_per_device  # the per-device program, over the device's tokens
    counted_parameters = parameters_counted(params, config)
    formula = training_flops_per_token(config, counted_parameters, config.context)
    precision = precision_of(wanted, platform, devices[0], jax)
    probe.work(flops_per_sample=formula, precision=precision,
               source=f"6 N + 12 L H Q T per token (PaLM appendix B, nanoGPT), N = {counted_parameters:,} "
                      f"({N_CONVENTION}); {XLA_COUNTED}: {counted:,.0f}")
    probe.result(counted_flops_per_token=counted, counted_flops_source=XLA_COUNTED, formula_flops_per_token=formula,
                 formula_parameters=counted_parameters, formula_parameters_convention=N_CONVENTION,
                 compile_seconds=compile_seconds)
    probe.measured_peak(**matmul_peak(jax, jnp, local[0], wanted, platform))
    was_reset = platform == "cpu" and reset_peak_rss()

    losses = []

    def run_step():
        nonlocal params, opt_state
        params, opt_state, loss = compiled(params, opt_state, *next_batch())
        losses.append(loss)

    sync = lambda: jax.block_until_ready((params, opt_state))  # noqa: E731
    with probe.warmup(images=tokens_per_device * args.num_warmup_batches, sync=sync):
        for _ in range(args.num_warmup_batches):
            run_step()

    def one_iteration():
        for _ in range(args.num_batches_per_iter):
            run_step()

    from cases._shared.timed import min_seconds, timed_iterations

    timed_iterations(probe, args.num_iters, min_seconds(args.min_seconds, platform == "gpu"),
                     tokens_per_device * args.num_batches_per_iter, one_iteration, sync, agree)
    means = [round(float(v), 6) for v in jax.device_get(losses)]  # the step's loss: the mean over all devices
    memory, basis = peak_memory(local[0], was_reset)
    from jax.experimental import multihost_utils

    everyone = multihost_utils.process_allgather(np.asarray([memory], dtype=np.int64)).reshape(-1)
    probe.result(first_step_loss=means[0], last_step_loss=means[-1], first_losses=means[:FIRST_LOSSES],
                 steps=len(means), peak_memory_bytes=[int(m) for m in everyone], peak_memory_basis=basis)
    probe.end()
    if where["world"] > 1:
        jax.distributed.shutdown()


def token_batches(args, where, config, per_process, accum, to_global, probe):
    """Windows of the token file, each process its own (pytorch-gpt's windows.py), and the data's facts."""
    import numpy as np
    from token_windows import TokenError, TokenWindows

    path = data_folder() / "train.bin"
    try:
        manifest = json.loads((data_folder() / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    if manifest.get("vocab_size", 0) > config.vocab:
        raise SystemExit(f"{CASE}: {path} holds token ids up to {manifest['vocab_size'] - 1}, "
                         f"beyond --vocab-size {config.vocab}")
    windows = TokenWindows(path, config.context, where["rank"], where["world"], seed=args.seed, vocab=config.vocab)
    if windows.per_rank() < per_process * accum:
        raise SystemExit(f"{CASE}: {len(windows.tokens)} tokens in {path} give {windows.per_rank()} windows of "
                         f"{config.context} per process: less than one step of {per_process * accum}")
    rows = windows.rows(per_process * accum)

    def next_batch():
        with probe.data_wait():
            try:
                step = next(rows)
            except TokenError as exc:
                raise SystemExit(f"{CASE}: {exc}") from None
            return to_global(np.asarray(step).reshape(accum, per_process, config.context + 1))

    facts = {"data": "tokens-synthetic" if manifest.get("synthetic") else "tokens", "data_path": str(path.resolve()),
             "data_source": manifest.get("source"), "tokenizer": manifest.get("tokenizer"),
             "data_tokens": len(windows.tokens), "windows_per_rank": windows.per_rank()}
    return next_batch, facts


def model_name(config) -> str:
    from gpt import GPTConfig

    return "gpt2-small" if config == GPTConfig() else f"gpt-{config.layers}l-{config.heads}h-{config.width}w"


def xla_flops(compiled) -> float:
    """FLOPs of one run of the compiled (per-device) program, as XLA's cost analysis counts them."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax: one dict per program
        cost = cost[0]
    return float(cost["flops"])


def precision_of(wanted: str, platform: str, device, jax) -> str:
    """The arithmetic of the step's products as the run set it: bf16; float32 is tf32 on an NVIDIA GPU of
    compute capability 8 or later where jax_default_matmul_precision lets XLA use TF32 (its default), else fp32."""
    if wanted == "bf16":
        return "bf16"
    if platform != "gpu":
        return "fp32"
    setting = str(jax.config.jax_default_matmul_precision or "default").lower()
    capability = float(getattr(device, "compute_capability", "0") or 0)
    return "tf32" if capability >= 8 and setting in ("default", "tensorfloat32", "bfloat16_3x", "fastest") else "fp32"


def matmul_peak(jax, jnp, device, wanted: str, platform: str) -> dict:
    """The measured matmul peak of this process's device (suite/instack/matmul_peak.py) in jnp.matmul at the
    step's arithmetic."""
    dtype = jnp.bfloat16 if wanted == "bf16" else jnp.float32
    mm = jax.jit(lambda a: a @ a)

    def square(n: int):
        return jax.device_put(jax.random.normal(jax.random.PRNGKey(n), (n, n), dtype=jnp.float32).astype(dtype), device)

    def multiply(a, times: int) -> None:
        out = None
        for _ in range(times):
            out = mm(a)
        out.block_until_ready()

    return measure(square, multiply, wanted, 8192 if platform == "gpu" else 4096)


def reset_peak_rss() -> bool:
    """Forgets the process's peak resident set so far (Linux: 5 into /proc/self/clear_refs), so that the
    record's CPU memory is the training's, not the matmul peak's matrices; False where that is not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_memory(device, reset: bool) -> tuple[int, str]:
    """The device's peak bytes in use (GPU: XLA's allocator, over the whole process: it has no reset), or the
    process's peak resident set on a CPU (VmHWM, since `reset_peak_rss` where it worked)."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        return int(stats["peak_bytes_in_use"]), "XLA's allocator: peak_bytes_in_use of the device since the start"
    try:
        status = Path("/proc/self/status").read_text().splitlines()
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        kib = None
    if kib is not None and reset:
        return kib * 1024, "peak resident set of the process (VmHWM), reset after the matmul peak was measured"
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, \
        "peak resident set of the process since it began (getrusage)"


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()

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
--attention picks how attention is computed (choose_attention: cuDNN's fused kernel on GPUs that have it
under bf16, written out elsewhere). The step is compiled before the warmup (its time recorded, not timed);
the work is the formula, XLA's own FLOP count of the compiled step beside it (short of the attention's
products under cuDNN, a custom call XLA does not count). On GPUs, after the timed window, a few steps run
back to back and are timed as the device's time per step (gpu_pass_s, for the diagnosis). Options come from
case.toml."""

import time

from cases._shared.jax_dist import place, start
from cases._shared.jax_loop import train_and_report
from cases._shared.jax_work import precision_of, record_matmul_peak, versions, xla_flops
from cases._shared.token_windows import TokenError, data_facts, open_windows
from suite.instack.case_options import parse_case_args
from suite.instack.probe import Probe, announce

CASE = "jax-gpt"
XLA_COUNTED = "XLA's cost analysis of the compiled train step (compiled.cost_analysis()['flops']), per token"
CUDNN_UNCOUNTED = ("; the attention runs as cuDNN's custom call, which XLA counts as no FLOPs: the count lacks "
                   "the attention's products (about 12 L H Q T per token), the formula has them")
CUDNN_MIN_CAPABILITY = 8.0  # cuDNN's fused attention in JAX: Ampere (sm80) and later
CUDNN_MAX_HEAD = 128  # head widths it takes: a multiple of 8, at most 128


def main() -> None:
    announce()
    args = parse_case_args(__file__)
    where = place()
    platform = start(where, args.no_cuda, args.cpu_dispatch)

    import jax
    import numpy as np
    from jax.sharding import Mesh

    config = model_config(args)
    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("data",))
    wanted = args.precision if args.precision != "auto" else ("bf16" if platform == "gpu" else "fp32")
    capability = float(getattr(devices[0], "compute_capability", 0) or 0) if platform == "gpu" else 0.0
    attention = choose_attention(args.attention, platform, wanted, capability, config.width // config.heads)
    state = TrainState(args, config, mesh, wanted, attention)
    probe = Probe(where["rank"], where["world"], where["local_rank"], where["local_world"], samples="tokens")
    next_batch, data = batches(args, where, config, state, probe)
    # the start line before compiling: a process on another device than the runner asked for stops here
    probe.start(config=start_config(args, config, state, platform, where, data), versions=versions())
    compiled = compile_step(probe, state, next_batch, config, wanted, platform)
    train_and_report(probe, compiled, state, next_batch, args, platform, per_step=state.tokens_per_device())
    if where["world"] > 1:
        jax.distributed.shutdown()


def choose_attention(asked: str, platform: str, wanted: str, capability: float, head: int) -> str:
    """The attention implementation the run uses (gpt.py's ATTENTIONS): einsum and xla as asked; cudnn (and
    auto) cuDNN's fused kernel on a GPU of compute capability 8 or later under bf16 with a head width it takes,
    and elsewhere the same jax.nn.dot_product_attention in XLA (cudnn) or attention written out (auto)."""
    if asked in ("einsum", "xla"):
        return asked
    fits = (platform == "gpu" and wanted == "bf16" and capability >= CUDNN_MIN_CAPABILITY
            and head % 8 == 0 and head <= CUDNN_MAX_HEAD)
    if fits:
        return "cudnn"
    return "xla" if asked == "cudnn" else "einsum"


def counted_source(attention: str) -> str:
    """Where counted_flops_per_token comes from, and what it lacks under cuDNN's attention."""
    return XLA_COUNTED + (CUDNN_UNCOUNTED if attention == "cudnn" else "")


def model_config(args):
    from gpt import GPTConfig

    try:
        return GPTConfig(args.layers, args.heads, args.width, args.context, args.vocab_size)
    except ValueError as exc:
        raise SystemExit(f"{CASE}: {exc}") from None


class TrainState:
    """The model, its optimizer, their shardings over the mesh's data axis, their state on the devices, and
    the jitted train step over them."""

    def __init__(self, args, config, mesh, wanted: str, attention: str):
        import jax
        import jax.numpy as jnp
        import optax
        from gpt import GPT
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        self.config, self.mesh, self.parallel, self.devices = config, mesh, args.parallel, mesh.devices.size
        self.dtype = jnp.bfloat16 if wanted == "bf16" else jnp.float32
        self.attention = attention
        self.model = GPT(config, self.dtype, attention)
        self.optimizer = optax.adamw(args.lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
        sample = jnp.zeros((1, config.context), dtype=jnp.int32)
        init = lambda key: self.model.init(key, sample)["params"]  # noqa: E731
        self.param_shapes = jax.eval_shape(init, jax.random.PRNGKey(args.seed))
        self.param_sh = self.shardings(self.param_shapes)
        self.opt_sh = self.shardings(jax.eval_shape(self.optimizer.init, self.param_shapes))
        # the same weights on every process and under dp and fsdp alike: one key, each device makes its share
        self.params = jax.jit(init, out_shardings=self.param_sh)(jax.random.PRNGKey(args.seed))
        self.opt_state = jax.jit(self.optimizer.init, out_shardings=self.opt_sh)(self.params)
        self.accum = args.grad_accum
        self.batch = args.global_batch // self.devices if args.global_batch else args.batch_size
        self.batch_sh = NamedSharding(mesh, P(None, "data", None))  # (micro-batch, sequence, token)
        self.step = jax.jit(self.train_step, donate_argnums=(0, 1),
                            in_shardings=(self.param_sh, self.opt_sh, self.batch_sh, self.batch_sh),
                            out_shardings=(self.param_sh, self.opt_sh, NamedSharding(mesh, P())))

    def spec(self, shape):
        """fsdp: the largest dimension that divides over the devices, sharded; dp (or none divides): replicated."""
        from jax.sharding import PartitionSpec as P

        fits = [i for i, n in enumerate(shape) if n % self.devices == 0] if self.parallel == "fsdp" else []
        if not fits:
            return P()
        axis = max(fits, key=lambda i: shape[i])
        return P(*[("data" if i == axis else None) for i in range(len(shape))])

    def shardings(self, tree):
        import jax
        from jax.sharding import NamedSharding

        return jax.tree_util.tree_map(lambda leaf: NamedSharding(self.mesh, self.spec(leaf.shape)), tree)

    def sharded_arrays(self) -> int:
        import jax
        from jax.sharding import NamedSharding

        leaves = jax.tree_util.tree_leaves(self.param_sh, is_leaf=lambda x: isinstance(x, NamedSharding))
        return sum(1 for s in leaves if any(s.spec))

    def loss_of(self, params, inputs, targets):
        from gpt import next_token_loss

        return next_token_loss(self.model.apply({"params": params}, inputs), targets)

    def train_step(self, params, state, inputs, targets):
        import jax
        import jax.numpy as jnp
        import optax

        # The micro-batches unrolled, not a scan: XLA's cost analysis counts a loop's body once.
        loss, grads = jax.value_and_grad(self.loss_of)(params, inputs[0], targets[0])
        for micro in range(1, self.accum):
            more_loss, more = jax.value_and_grad(self.loss_of)(params, inputs[micro], targets[micro])
            loss, grads = loss + more_loss, jax.tree_util.tree_map(jnp.add, grads, more)
        if self.accum > 1:
            loss, grads = loss / self.accum, jax.tree_util.tree_map(lambda g: g / self.accum, grads)
        updates, state = self.optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    def advance(self, compiled, batch):
        """One step of the compiled train step on (inputs, targets); its loss (on the devices)."""
        self.params, self.opt_state, loss = compiled(self.params, self.opt_state, *batch)
        return loss

    def arrays(self) -> tuple:
        return self.params, self.opt_state

    def to_global(self, rows):
        """(accum, per_process, context + 1) tokens of this process -> global (inputs, targets)."""
        import jax
        import numpy as np

        rows = rows.astype(np.int32)
        make = lambda a: jax.make_array_from_process_local_data(self.batch_sh, a)  # noqa: E731
        return make(np.ascontiguousarray(rows[..., :-1])), make(np.ascontiguousarray(rows[..., 1:]))

    def tokens_per_device(self) -> int:
        """The tokens one device trains on in one step."""
        return self.batch * self.accum * self.config.context

    def parameters(self) -> int:
        import jax

        return sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(self.param_shapes))


def batches(args, where, config, state: TrainState, probe):
    """next_batch() of this process's global batch, and the data's facts."""
    import jax
    import numpy as np

    per_process = state.batch * len(jax.local_devices())
    if args.data == "synthetic":
        rng = np.random.default_rng(args.seed + 1 + where["rank"])
        fixed = state.to_global(rng.integers(0, config.vocab, (state.accum, per_process, config.context + 1)))
        return (lambda: fixed), {"data": "synthetic"}
    return token_batches(args, where, config, per_process, state.accum, state.to_global, probe)


def start_config(args, config, state: TrainState, platform: str, where: dict, data: dict) -> dict:
    """The probe's start line: the model, its batch and sharding, and where it runs."""
    import jax
    import jax.numpy as jnp

    devices, tokens = state.devices, state.tokens_per_device()
    return {
        "model": "gpt", "model_name": model_name(config), "parameters": state.parameters(),
        "layers": config.layers, "heads": config.heads, "width": config.width, "context": config.context,
        "vocab_size": config.vocab, "device_type": "cuda" if platform == "gpu" else "cpu",
        "device_name": jax.devices()[0].device_kind if platform == "gpu" else "cpu",
        "dtype": "amp-bfloat16" if state.dtype == jnp.bfloat16 else "float32", **data,
        "attention": state.attention, "attention_asked": args.attention,
        "batch_per_device": state.batch * state.accum, "global_batch": state.batch * state.accum * devices,
        "micro_batch": state.batch, "grad_accum": state.accum, "tokens_per_device_per_step": tokens,
        "global_tokens_per_step": tokens * devices, "lr": args.lr,
        "threads_per_worker": where.get("threads"), "backend": "gloo" if platform == "cpu" else "nccl",
        "launcher": "jaxdist", "parallel": args.parallel, "processes": jax.process_count(),
        "devices": devices, "local_devices": len(jax.local_devices()), "mesh": {"data": devices},
        args.parallel: {"param_sharding": "replicated" if args.parallel == "dp" else "data axis, largest dim",
                        "sharded_parameters": state.sharded_arrays(),
                        "parameter_arrays": len(jax.tree_util.tree_leaves(state.param_shapes))},
        "seed": args.seed,
    }


def compile_step(probe, state: TrainState, next_batch, config, wanted: str, platform: str):
    """The train step compiled (its time recorded, not timed), its work as XLA counts it beside the formula,
    and the device's measured matmul peak, after which the peak memory is reset."""
    import jax
    from gpt import N_CONVENTION, parameters_counted, training_flops_per_token

    started = time.perf_counter()
    inputs, targets = next_batch()
    compiled = state.step.lower(state.params, state.opt_state, inputs, targets).compile()
    compile_seconds = time.perf_counter() - started
    counted = xla_flops(compiled) / state.tokens_per_device()  # the per-device program, over its tokens
    counted_parameters = parameters_counted(state.params, config)
    formula = training_flops_per_token(config, counted_parameters, config.context)
    device = jax.local_devices()[0]
    # the formula is the work whatever the attention: XLA's count lacks cuDNN's attention (counted_source)
    probe.work(flops_per_sample=formula, precision=precision_of(wanted, platform, device),
               source=f"6 N + 12 L H Q T per token (PaLM appendix B, nanoGPT), N = {counted_parameters:,} "
                      f"({N_CONVENTION}); {counted_source(state.attention)}: {counted:,.0f}")
    probe.result(counted_flops_per_token=counted, counted_flops_source=counted_source(state.attention),
                 formula_flops_per_token=formula,
                 formula_parameters=counted_parameters, formula_parameters_convention=N_CONVENTION,
                 compile_seconds=compile_seconds)
    record_matmul_peak(probe, device, wanted, platform)
    return compiled


def token_batches(args, where, config, per_process, accum, to_global, probe):
    """Windows of the token file, each process its own (cases/_shared/token_windows.py, pytorch-gpt's), and the
    data's facts."""
    import numpy as np

    windows, manifest = open_windows(CASE, config.context, config.vocab, where["rank"], where["world"], args.seed,
                                     needed=per_process * accum, per="process")
    rows = windows.rows(per_process * accum)

    def next_batch():
        with probe.data_wait():
            try:
                step = next(rows)
            except TokenError as exc:
                raise SystemExit(f"{CASE}: {exc}") from None
            return to_global(np.asarray(step).reshape(accum, per_process, config.context + 1))

    return next_batch, data_facts(windows, manifest)


def model_name(config) -> str:
    from gpt import GPTConfig

    return "gpt2-small" if config == GPTConfig() else f"gpt-{config.layers}l-{config.heads}h-{config.width}w"


if __name__ == "__main__":
    main()

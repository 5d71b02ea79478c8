"""The jax-gpt training loop without the suite: the same Flax model (cases/jax-gpt/gpt.py), sizes, batch of
random tokens and AdamW, one jax.jit-ted step on this process's one device (the suite's run of one process
has a mesh of that one device), compiled before the warmup; no probe, no launcher, no telemetry. Prints one
JSON line with its timings in tokens/s.

By default the device is the CPU (make bench). On a GPU (--device auto or cuda, benchmarks/bare/gpu_options.py;
what `make gpu-check` passes), the platform is chosen as the case chooses it (suite/instack/jax_platforms.py:
JAX's CUDA or ROCm plugin and a GPU on the host), the products in bfloat16 (--precision auto there, the
parameters and AdamW's state float32, as the case), the attention as --attention names it (the case's
resolved one: cudnn under its --preset h100), and every timed iteration ends with block_until_ready.

    <jax stack python> benchmarks/bare/jax_gpt.py --layers 4 --heads 4 --width 256 --context 256 ...
    <jax stack python> benchmarks/bare/jax_gpt.py --device auto --precision bf16 --attention cudnn --batch-size 32
"""

import os
import sys
import time

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "cases", "jax-gpt")]

from gpt_options import parse_args  # noqa: E402 (beside this script)
from gpu_options import choose_jax_platform, take, wants_bf16  # noqa: E402 (beside this script)
from phases import Phases  # noqa: E402 (beside this script)
from result_line import print_result  # noqa: E402 (beside this script)

from cases._shared.timed import iterations_needed  # noqa: E402 (after sys.path is set)
from suite.instack.cpu_binding import bind_cpus  # noqa: E402 (after sys.path is set)


def train(args, phases: Phases) -> tuple[list[float], dict]:
    """Each timed iteration's tokens/s, and the model's facts as the case reports them."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from gpt import GPT, GPTConfig, next_token_loss

    on_gpu = jax.devices()[0].platform in ("gpu", "cuda", "rocm")  # what JAX found, not what was asked
    bf16 = wants_bf16(args.precision, on_gpu)
    config = GPTConfig(args.layers, args.heads, args.width, args.context, args.vocab_size)
    model = GPT(config, jnp.bfloat16 if bf16 else jnp.float32, args.attention)
    optimizer = optax.adamw(args.lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
    params = model.init(jax.random.PRNGKey(args.seed), jnp.zeros((1, config.context), dtype=jnp.int32))["params"]
    state = optimizer.init(params)
    rows = np.random.default_rng(args.seed + 1).integers(0, config.vocab, (args.batch_size, config.context + 1))
    inputs, targets = jnp.asarray(rows[:, :-1], jnp.int32), jnp.asarray(rows[:, 1:], jnp.int32)

    def loss_of(p, x, y):
        return next_token_loss(model.apply({"params": p}, x), y)

    def step(p, s, x, y):
        loss, grads = jax.value_and_grad(loss_of)(p, x, y)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    phases.mark("set_up")
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, inputs, targets).compile()
    phases.mark("compile")
    for _ in range(args.num_warmup_batches):
        params, state, _ = compiled(params, state, inputs, targets)
    jax.block_until_ready(params)
    phases.mark("warmup")
    tokens = args.batch_size * config.context * args.num_batches_per_iter
    samples, total = [], args.num_iters
    while len(samples) < total:
        began = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            params, state, _ = compiled(params, state, inputs, targets)
        jax.block_until_ready(params)
        samples.append(tokens / (time.perf_counter() - began))
        if len(samples) == 1:  # the cases' rule for --min-seconds (0: exactly --num-iters)
            total = iterations_needed(args.num_iters, tokens / samples[0], args.min_seconds)
    phases.mark("window")
    parameters = sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(params))
    device = jax.devices()[0]
    return samples, {"model": "gpt", "dtype": "amp-bfloat16" if bf16 else "float32", "parameters": parameters,
                     "batch_per_device": args.batch_size, "attention": args.attention,
                     "device_type": "cuda" if on_gpu else "cpu", "device_name": device.device_kind if on_gpu else "cpu"}


def main() -> None:
    gpu = take("jax")  # the GPU options, before the shared ones are read
    args = parse_args()
    vars(args).update(vars(gpu))
    choose_jax_platform(args.device, "benchmarks/bare/jax_gpt.py")  # before JAX makes its backend
    threads = bind_cpus(0, 1)
    phases = Phases()
    samples, reported = train(args, phases)
    print_result(samples, {**reported, "threads_per_worker": threads}, phases.seconds(), args)


if __name__ == "__main__":
    main()

"""The jax-gpt training loop without the suite: the same Flax model (cases/jax-gpt/gpt.py), sizes, batch of
random tokens and AdamW, one jax.jit-ted step on this process's one CPU device (the suite's run of one
process has a mesh of that one device), compiled before the warmup; no probe, no launcher, no telemetry.
Prints one JSON line with its timings in tokens/s.

    <jax stack python> benchmarks/bare/jax_gpt.py --layers 4 --heads 4 --width 256 --context 256 ...
"""

import json
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "cases", "jax-gpt")]
os.environ["JAX_PLATFORMS"] = "cpu"  # as the case does on a CPU, before JAX makes its backend

from gpt_options import parse_args  # noqa: E402 (beside this script)

from suite.instack.cpu_binding import bind_cpus  # noqa: E402 (after sys.path is set)
from suite.instack.probe import cpus_allowed  # noqa: E402 (after sys.path is set)


def train(args) -> tuple[list[float], dict]:
    """Each timed iteration's tokens/s, and the model's facts as the case reports them."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from gpt import GPT, GPTConfig, next_token_loss

    config = GPTConfig(args.layers, args.heads, args.width, args.context, args.vocab_size)
    model = GPT(config, jnp.float32)
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

    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, inputs, targets).compile()
    for _ in range(args.num_warmup_batches):
        params, state, _ = compiled(params, state, inputs, targets)
    jax.block_until_ready(params)
    samples = []
    for _ in range(args.num_iters):
        began = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            params, state, _ = compiled(params, state, inputs, targets)
        jax.block_until_ready(params)
        samples.append(args.batch_size * config.context * args.num_batches_per_iter / (time.perf_counter() - began))
    parameters = sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(params))
    return samples, {"model": "gpt", "dtype": "float32", "parameters": parameters}


def main() -> None:
    args = parse_args()
    threads = bind_cpus(0, 1)
    samples, reported = train(args)
    # config and binding as the case reports them, for the bench to compare the two sides
    binding = {"policy": os.environ.get("SUITE_CPU_BIND", "none"), "cpus": cpus_allowed()}
    print(json.dumps({"samples": samples, "throughput": sum(samples) / len(samples),
                      "config": {**reported, "threads_per_worker": threads},
                      "binding": binding}))


if __name__ == "__main__":
    main()

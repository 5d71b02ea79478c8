"""The jax-resnet training loop without the suite: the same Flax ResNet (cases/jax-resnet/resnet.py), batch
statistics and SGD with momentum (lr 0.01, the case's rule at one process), a fixed random batch (NHWC, the
case's seed), one jax.jit-ted step on this process's one device (the suite's run of one process has a mesh of
that one device), compiled before the warmup; no probe, no launcher, no telemetry. Prints one JSON line with
its timings in img/s.

The device is the CPU unless --device asks for a GPU (benchmarks/bare/gpu_options.py: chosen as the case
chooses it); --precision auto is bfloat16 there (parameters, batch statistics and momentum float32, as the
case); every timed iteration ends with block_until_ready. What `make gpu-check` sets jax-resnet against.

    <jax stack python> benchmarks/bare/jax_resnet.py --device auto --batch-size 256 --min-seconds 30
"""

import argparse
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "cases", "jax-resnet")]

import gpu_options  # noqa: E402 (beside this script)
from phases import Phases  # noqa: E402 (beside this script)
from result_line import print_result  # noqa: E402 (beside this script)

from cases._shared.timed import iterations_needed  # noqa: E402 (after sys.path is set)
from suite.instack.cpu_binding import bind_cpus  # noqa: E402 (after sys.path is set)

# named and defaulted as the case's options (cases/jax-resnet/case.toml)
SIZES = [("batch-size", 32), ("image-size", 224), ("num-classes", 1000), ("num-warmup-batches", 10),
         ("num-batches-per-iter", 10), ("num-iters", 10), ("seed", 1234)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("resnet50", "resnet18"), default="resnet50")
    for name, default in SIZES:
        parser.add_argument(f"--{name}", type=int, default=default)
    gpu_options.add(parser, "common")
    return parser.parse_args(argv)


def train(args, phases: Phases) -> tuple[list[float], dict]:
    """Each timed iteration's img/s, and the model's facts as the case reports them."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from resnet import ResNet

    on_gpu = jax.devices()[0].platform in ("gpu", "cuda", "rocm")  # what JAX found, not what was asked
    bf16 = gpu_options.wants_bf16(args.precision, on_gpu)
    model = ResNet(args.model, args.num_classes, jnp.bfloat16 if bf16 else jnp.float32)
    optimizer = optax.sgd(0.01, momentum=0.9)
    sample = jnp.zeros((1, args.image_size, args.image_size, 3), jnp.float32)
    variables = jax.jit(lambda key: model.init(key, sample, train=False))(jax.random.PRNGKey(args.seed))
    params, stats = variables["params"], variables["batch_stats"]
    opt_state = optimizer.init(params)
    rng = np.random.default_rng(args.seed + 1)  # the case's synthetic batch of process 0
    images = jnp.asarray(rng.standard_normal((args.batch_size, args.image_size, args.image_size, 3), dtype=np.float32))
    labels = jnp.asarray(rng.integers(0, args.num_classes, args.batch_size).astype(np.int32))

    def step(params, stats, opt_state, images, labels):
        def loss_of(p):
            logits, updated = model.apply({"params": p, "batch_stats": stats}, images, train=True,
                                          mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), updated["batch_stats"]

        (loss, stats), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    phases.mark("set_up")
    compiled = jax.jit(step, donate_argnums=(0, 1, 2)).lower(params, stats, opt_state, images, labels).compile()
    phases.mark("compile")
    for _ in range(args.num_warmup_batches):
        params, stats, opt_state, _ = compiled(params, stats, opt_state, images, labels)
    jax.block_until_ready((params, opt_state))
    phases.mark("warmup")
    per_iteration = args.batch_size * args.num_batches_per_iter
    samples, total = [], args.num_iters
    while len(samples) < total:
        began = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            params, stats, opt_state, _ = compiled(params, stats, opt_state, images, labels)
        jax.block_until_ready((params, opt_state))
        samples.append(per_iteration / (time.perf_counter() - began))
        if len(samples) == 1:  # the cases' rule for --min-seconds (0: exactly --num-iters)
            total = iterations_needed(args.num_iters, per_iteration / samples[0], args.min_seconds)
    phases.mark("window")
    parameters = sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(params))
    device = jax.devices()[0]
    return samples, {"model": args.model, "dtype": "amp-bfloat16" if bf16 else "float32", "parameters": parameters,
                     "batch_per_device": args.batch_size, "image_size": args.image_size,
                     "device_type": "cuda" if on_gpu else "cpu", "device_name": device.device_kind if on_gpu else "cpu"}


def main() -> None:
    args = parse_args()
    gpu_options.choose_jax_platform(args.device, "benchmarks/bare/jax_resnet.py")  # before JAX makes its backend
    threads = bind_cpus(0, 1)
    phases = Phases()
    samples, reported = train(args, phases)
    print_result(samples, {**reported, "threads_per_worker": threads}, phases.seconds(), args)


if __name__ == "__main__":
    main()

"""The pytorch-gpt training loop without the suite: the same model (cases/pytorch-gpt/gpt.py), sizes,
batch of random tokens, AdamW (foreach, as the case's --optimizer-impl auto on a CPU) and threads, the
model trained bare as the case trains it at a world of one (no DistributedDataParallel: nothing to
exchange), no probe, no launcher, no telemetry. Prints one JSON line with its timings in tokens/s.

    <stack python> benchmarks/bare/pytorch_gpt.py --layers 4 --heads 4 --width 256 --context 256 ...
"""

import json
import os
import sys
import time

import torch

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "cases", "pytorch-gpt")]
from gpt import GPT, GPTConfig, next_token_loss  # noqa: E402 (after sys.path is set)
from gpt_options import parse_args  # noqa: E402 (beside this script)

from suite.instack.cpu_binding import bind_cpus  # noqa: E402 (after sys.path is set)
from suite.instack.probe import cpus_allowed  # noqa: E402 (after sys.path is set)


def train(args) -> tuple[list[float], dict]:
    """Each timed iteration's tokens/s, and the model's facts as the case reports them."""
    config = GPTConfig(args.layers, args.heads, args.width, args.context, args.vocab_size)
    torch.manual_seed(args.seed)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    generator = torch.Generator().manual_seed(args.seed + 1)
    rows = torch.randint(0, config.vocab, (args.batch_size, config.context + 1), generator=generator)
    inputs, targets = rows[:, :-1], rows[:, 1:]

    def step():
        next_token_loss(model(inputs), targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.num_warmup_batches):
        step()
    samples = []
    for _ in range(args.num_iters):
        began = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            step()
        samples.append(args.batch_size * config.context * args.num_batches_per_iter / (time.perf_counter() - began))
    reported = {"model": "gpt", "dtype": "float32", "parameters": sum(p.numel() for p in model.parameters()),
                "threads_per_worker": torch.get_num_threads()}
    return samples, reported


def main() -> None:
    args = parse_args()
    torch.set_num_threads(bind_cpus(0, 1))
    samples, reported = train(args)
    # config and binding as the case reports them, for the bench to compare the two sides
    binding = {"policy": os.environ.get("SUITE_CPU_BIND", "none"), "cpus": cpus_allowed()}
    print(json.dumps({"samples": samples, "throughput": sum(samples) / len(samples), "config": reported,
                      "binding": binding}))


if __name__ == "__main__":
    main()

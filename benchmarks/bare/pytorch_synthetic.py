"""The pytorch-synthetic training loop without the suite: same model, batch, image size, threads and binding,
Horovod optimizer (one process), no probe, no launcher. Prints one JSON line with its timings.

    <stack python> benchmarks/bare/pytorch_synthetic.py --batch-size 32 --image-size 224 ...
"""

import argparse
import json
import os
import sys
import time

STARTED = time.time()

import horovod.torch as hvd  # noqa: E402 (after STARTED: the import time is measured)
import torch  # noqa: E402 (after STARTED: the import time is measured)
import torch.nn.functional as F  # noqa: E402 (after STARTED: the import time is measured)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from cases._shared.torch_resnet import resnet50  # noqa: E402 (after sys.path is set)
from suite.instack.cpu_binding import bind_cpus  # noqa: E402 (after sys.path is set)
from suite.instack.probe import cpus_allowed  # noqa: E402 (after sys.path is set)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in [("batch-size", 32), ("image-size", 224), ("num-warmup-batches", 10),
                          ("num-batches-per-iter", 10), ("num-iters", 10)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(bind_cpus(hvd.local_rank(), hvd.local_size()))
    model = resnet50()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    generator = torch.Generator().manual_seed(42)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator)
    labels = torch.randint(0, 1000, (args.batch_size,), generator=generator)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    for _ in range(args.num_warmup_batches):
        step()
    first_step_at, samples = time.time(), []
    for _ in range(args.num_iters):
        begin = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            step()
        samples.append(args.batch_size * args.num_batches_per_iter / (time.perf_counter() - begin))
    # config and binding as the case's probe reports them, for the bench to compare the two sides
    config = {"model": "resnet50", "dtype": "float32", "parameters": sum(p.numel() for p in model.parameters()),
              "threads_per_worker": torch.get_num_threads()}
    binding = {"policy": os.environ.get("SUITE_CPU_BIND", "none"), "cpus": cpus_allowed()}
    print(json.dumps({"samples": samples, "throughput": sum(samples) / len(samples), "config": config,
                      "binding": binding, "started": STARTED, "first_timed_step_at": first_step_at}))


if __name__ == "__main__":
    main()

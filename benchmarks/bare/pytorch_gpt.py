"""The pytorch-gpt training loop without the suite: the same model (cases/pytorch-gpt/gpt.py), sizes,
batch of random tokens, AdamW (foreach, as the case's --optimizer-impl auto on a CPU) and threads, the
model trained bare as the case trains it at a world of one (no DistributedDataParallel: nothing to
exchange), no probe, no launcher, no telemetry. Prints one JSON line with its timings in tokens/s.

On a GPU (--device auto or cuda, benchmarks/bare/gpu_options.py; what `make gpu-check` passes): the model
on GPU 0, bf16 autocast over the model and its loss (--precision auto, as the case), AdamW fused (the
case's --optimizer-impl auto there), --compile torch.compile of the model with its loss (the case's order
at a world of one, compiled at a first step before the warmup, untimed), --gc-every the case's collector
(cases/pytorch-gpt/assembly.py), and the GPU synchronised before each timed iteration's clock stops.

    <stack python> benchmarks/bare/pytorch_gpt.py --layers 4 --heads 4 --width 256 --context 256 ...
    <stack python> benchmarks/bare/pytorch_gpt.py --device auto --precision bf16 --compile --batch-size 32 ...
"""

import contextlib
import functools
import os
import sys
import time

import torch

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "cases", "pytorch-gpt")]
from gpt import GPT, GPTConfig, WithLoss, next_token_loss  # noqa: E402 (after sys.path is set)
from gpt_options import parse_args  # noqa: E402 (beside this script)
from gpu_options import take, wants_bf16  # noqa: E402 (beside this script)
from phases import Phases  # noqa: E402 (beside this script)
from result_line import print_result  # noqa: E402 (beside this script)

from cases._shared.ddp_assembly import optimizer_flags, optimizer_implementation  # noqa: E402 (after sys.path is set)
from cases._shared.timed import iterations_needed  # noqa: E402 (after sys.path is set)
from suite.instack.cpu_binding import bind_cpus  # noqa: E402 (after sys.path is set)


def pick_device(asked: str) -> torch.device:
    """--device: cpu; auto: GPU 0 where torch sees one, else the CPU; cuda: GPU 0, or stop."""
    if asked == "cpu" or (asked == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/bare/pytorch_gpt.py: --device cuda, but torch sees no GPU")
    torch.cuda.set_device(0)
    return torch.device("cuda", 0)


def train(args, phases: Phases) -> tuple[list[float], dict]:
    """Each timed iteration's tokens/s, and the model's facts as the case reports them."""
    from assembly import collected_every  # cases/pytorch-gpt: the case's garbage collector settings

    config = GPTConfig(args.layers, args.heads, args.width, args.context, args.vocab_size)
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    on_gpu = device.type == "cuda"
    amp = wants_bf16(args.precision, on_gpu)
    implementation = optimizer_implementation(args.optimizer_impl, device.type)
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                                  **optimizer_flags(implementation))
    generator = torch.Generator().manual_seed(args.seed + 1)
    rows = torch.randint(0, config.vocab, (args.batch_size, config.context + 1), generator=generator).to(device)
    inputs, targets = rows[:, :-1], rows[:, 1:]
    with_loss = WithLoss(model, next_token_loss)
    forward = torch.compile(with_loss) if args.compile else with_loss
    autocast = functools.partial(torch.autocast, device.type, dtype=torch.bfloat16) if amp else contextlib.nullcontext
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)

    def step():
        with autocast():
            loss = forward(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    phases.mark("set_up")
    if args.compile:  # compiled at a first step, before the warmup, as the case does
        step()
        sync()
        phases.mark("compile")
    tokens = args.batch_size * config.context * args.num_batches_per_iter
    samples = []
    with collected_every(args.gc_every) as after_step:
        for _ in range(args.num_warmup_batches):
            step()
            after_step()
        sync()
        phases.mark("warmup")
        total = args.num_iters
        while len(samples) < total:
            began = time.perf_counter()
            for _ in range(args.num_batches_per_iter):
                step()
                after_step()
            sync()  # the GPU's queue drained before the clock stops
            samples.append(tokens / (time.perf_counter() - began))
            if len(samples) == 1:  # the cases' rule for --min-seconds (0: exactly --num-iters)
                total = iterations_needed(args.num_iters, tokens / samples[0], args.min_seconds)
    phases.mark("window")
    reported = {"model": "gpt", "dtype": "amp-bfloat16" if amp else "float32",
                "parameters": sum(p.numel() for p in model.parameters()),
                "threads_per_worker": torch.get_num_threads(), "batch_per_device": args.batch_size,
                "compile": args.compile, "optimizer_impl": implementation,
                "device_type": device.type, "device_name": torch.cuda.get_device_name(device) if on_gpu else "cpu"}
    return samples, reported


def main() -> None:
    gpu = take("torch")  # the GPU options, before the shared ones are read
    args = parse_args()
    vars(args).update(vars(gpu))
    torch.set_num_threads(bind_cpus(0, 1))
    phases = Phases()
    samples, reported = train(args, phases)
    print_result(samples, reported, phases.seconds(), args)


if __name__ == "__main__":
    main()

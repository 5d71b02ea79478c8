"""The pytorch-ddp synthetic training loop without the suite: the same model, batch, image size,
precision, memory format, compilation and SGD implementation, in a world of one (NCCL on a GPU, Gloo on a
CPU) where the case trains the bare model too (no DistributedDataParallel: nothing to exchange), no probe,
no launcher, no telemetry. Times its iterations for about --seconds and prints one JSON line: what
`make gpu-check` sets the suite's figure against.

    <stack python> benchmarks/bare/pytorch_ddp.py --batch-size 256 --image-size 224 --amp --channels-last \
        [--compile [--compile-mode reduce-overhead]] [--optimizer-impl fused]
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from phases import Phases

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from cases._shared.ddp_assembly import optimizer_flags, optimizer_implementation
from cases._shared.torch_resnet import resnet50


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup", type=int, default=20, help="steps before timing")
    parser.add_argument("--steps-per-iter", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0, help="time iterations until this long")
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--compile-mode", choices=("default", "reduce-overhead", "max-autotune"), default="default")
    parser.add_argument("--optimizer-impl", choices=("auto", "foreach", "fused"), default="auto",
                        help="SGD's implementation; auto: fused on a GPU, foreach on the CPU")
    args = parser.parse_args()
    phases = Phases()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29581"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    bare = resnet50().to(device, memory_format=fmt)
    model = torch.compile(bare, mode=args.compile_mode) if args.compile else bare
    implementation = optimizer_implementation(args.optimizer_impl, device.type)
    optimizer = torch.optim.SGD(bare.parameters(), lr=0.01, momentum=0.9, **optimizer_flags(implementation))
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp and cuda)
    generator = torch.Generator().manual_seed(42)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator)
    images = images.to(device).contiguous(memory_format=fmt)
    labels = torch.randint(0, 1000, (args.batch_size,), generator=generator).to(device)
    dtype = torch.float16 if cuda else torch.bfloat16
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step():
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype, enabled=args.amp):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    phases.mark("set_up")
    for _ in range(args.warmup):  # the compilation, where asked, in the first step
        step()
    sync()
    phases.mark("warmup")
    samples, began = [], time.perf_counter()
    while time.perf_counter() - began < args.seconds or len(samples) < 3:
        start = time.perf_counter()
        for _ in range(args.steps_per_iter):
            step()
        sync()
        samples.append(args.batch_size * args.steps_per_iter / (time.perf_counter() - start))
    phases.mark("window")
    dist.destroy_process_group()
    config = {"model": "resnet50", "parameters": sum(p.numel() for p in bare.parameters()),
              "batch_per_device": args.batch_size, "image_size": args.image_size, "compile": args.compile,
              "compile_mode": args.compile_mode if args.compile else None, "optimizer_impl": implementation,
              "channels_last": args.channels_last}
    print(json.dumps({"samples": samples, "throughput": sum(samples) / len(samples), "device": str(device),
                      "config": config, "phases": phases.seconds(),
                      "device_type": device.type, "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
                      "host": socket.gethostname(), "settings": vars(args)}))


if __name__ == "__main__":
    main()

"""pytorch-ddp: ResNet-50 v1.5 (the model of pytorch-synthetic) with DistributedDataParallel.

One process per device, started by torchrun (--launcher torchrun) or directly by the suite
(--launcher ranks); either way RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set,
and under a bare `srun python train.py` they are taken from SLURM's variables. Options come from
case.toml. --data synthetic trains on a fixed batch on the device (Horovod's benchmark method, timed
in iterations); --data imagefolder on class folders of JPEGs (timed in epochs, the first not counted).
"""

import contextlib
import functools
import math
import statistics
import time

import numpy
import PIL
import torch
import torch.distributed as dist
import torch.nn.functional as F
from pipeline import Normalise, make_loader
from torch.nn.parallel import DistributedDataParallel

from cases._shared import ddp_assembly
from cases._shared.flops import report_work
from cases._shared.gpu_busy import pass_gpu_seconds
from cases._shared.image_folder import folder_facts, train_root
from cases._shared.timed import min_seconds, timed_iterations
from cases._shared.torch_dist import agree, leave_process_group, pick_backend, pick_device, place
from cases._shared.torch_resnet import MODELS
from suite.instack.case_options import parse_case_args
from suite.instack.probe import Probe, announce
from suite.instack.process_end import end_process

CASE = "pytorch-ddp"
DEFAULTS = {"synthetic": (32, 224), "imagefolder": (64, 160)}  # batch per device, image size
MODEL_NAMES = {"resnet50": "resnet50-v1.5", "resnet18": "resnet18", "tiny-cnn": "tiny-cnn"}  # as the record names them


def main() -> None:
    announce()
    args = parse_case_args(__file__)
    where = place()
    device, backend = join_process_group(args, where)
    batch = args.batch_size or DEFAULTS[args.data][0]
    size = args.image_size or DEFAULTS[args.data][1]
    loader, sampler = image_loader(args, where, size, batch, device) if args.data == "imagefolder" else (None, None)
    classes = len(loader.dataset.classes) if loader else args.num_classes
    net = Training(args, device, batch, size, classes, where["world"])
    fixed = random_batch(batch, size, classes, device, net.memory_format, seed=42 + where["rank"])
    probe = Probe(where["rank"], where["world"], where["local_rank"], where["local_world"])
    probe.start(config=start_config(args, net, backend, where, loader), versions=versions(device, backend))
    report_work(probe, {"case": CASE, "model": args.model, "image_size": size, "classes": classes}, net.bare,
                *fixed, F.cross_entropy, device, amp_dtype(device) if args.amp else None)
    if args.compile:  # compilation happens at the first step: before the warmup, measured apart
        probe.result(compile_seconds=first_step_seconds(net, fixed))
    if loader:
        train_epochs(args, probe, net.step, loader, sampler, Normalise(device, net.memory_format), net.sync)
    else:
        train_synthetic(args, probe, net, batch, fixed, device)
    if device.type == "cuda":  # the GPU's own time for a step's pass, beside the timed step (diagnosis)
        probe.result(gpu_pass_s=pass_gpu_seconds(forward_backward(args, net, device, fixed)))
    probe.end()
    leave_process_group()


def join_process_group(args, where: dict) -> tuple[torch.device, str]:
    """This process's device, and the process group it joins with its backend (gloo, nccl)."""
    device = pick_device(where, args.no_cuda)
    torch.backends.cudnn.benchmark = device.type == "cuda"
    backend = pick_backend(CASE, args.backend, device)
    dist.init_process_group(backend)
    return device, backend


def image_loader(args, where: dict, size: int, batch: int, device):
    """This rank's loader of the class folders under $SUITE_DATA_DIR/imagefolder/train, and its sampler."""
    root = train_root()
    loader, sampler = make_loader(root, size, batch, where["rank"], where["world"], args.workers,
                                  pin=device.type == "cuda")
    if len(loader) == 0:
        raise SystemExit(f"{CASE}: {len(sampler)} images per rank in {root}: less than one batch of {batch}")
    return loader, sampler


class Training:
    """The model in DistributedDataParallel where more than one rank trains (bare at a world of one), then
    compiled at --compile-mode with --compile (cases/_shared/ddp_assembly.py), SGD with momentum at a rate that
    grows with the world in --optimizer-impl's implementation, the train step, and the device's sync."""

    def __init__(self, args, device, batch: int, size: int, classes: int, world: int):
        self.device, self.batch, self.size, self.classes = device, batch, size, classes
        self.memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        self.bare = MODELS[args.model](num_classes=classes).to(device, memory_format=self.memory_format)
        self.ddp_settings = {"bucket_cap_mb": args.bucket_cap_mb, "static_graph": args.static_graph,
                             "gradient_as_bucket_view": args.gradient_as_bucket_view}

        def wrap(module):
            return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None,
                                           **self.ddp_settings)

        compile_fn = functools.partial(torch.compile, mode=args.compile_mode) if args.compile else None
        self.model, self.wrapped = ddp_assembly.wrapped_then_compiled(self.bare, world, wrap, compile_fn)
        self.parameters = sum(p.numel() for p in self.bare.parameters())
        self.lr = 0.01 * world
        self.optimizer_impl = ddp_assembly.optimizer_implementation(args.optimizer_impl, device.type)
        optimizer = torch.optim.SGD(self.bare.parameters(), lr=self.lr, momentum=0.9,
                                    **ddp_assembly.optimizer_flags(self.optimizer_impl))
        self.step = make_step(args, self.model, optimizer, device)
        self.sync = torch.cuda.synchronize if device.type == "cuda" else None


def start_config(args, net: Training, backend: str, where: dict, loader) -> dict:
    """The probe's start line: the model, its batch, where it runs and how it exchanges."""
    device = net.device
    return {
        "model": args.model, "model_name": MODEL_NAMES[args.model], "parameters": net.parameters,
        "device_type": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": f"amp-{str(amp_dtype(device)).removeprefix('torch.')}" if args.amp else "float32",
        **data_facts(args), "batch_per_device": net.batch, "global_batch": net.batch * where["world"],
        "image_size": net.size, "classes": net.classes, "lr": net.lr, "threads_per_worker": torch.get_num_threads(),
        "backend": backend, "launcher": args.launcher, "ddp": net.ddp_settings, "ddp_wrapped": net.wrapped is not None,
        "notes": ddp_assembly.world_1_notes(where["world"]), "compile": args.compile,
        "compile_mode": args.compile_mode if args.compile else None, "optimizer": "SGD",
        "optimizer_impl": net.optimizer_impl,
        "channels_last": args.channels_last, "loader_workers": args.workers if loader else None,
        "images_per_rank_per_epoch": len(loader) * net.batch if loader else None,
    }


def versions(device, backend: str) -> dict:
    return {"torch": torch.__version__, "numpy": numpy.__version__, "pillow": PIL.__version__,
            "cuda": torch.version.cuda, "hip": torch.version.hip,
            "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None}


def first_step_seconds(net: Training, fixed) -> float:
    """--compile: the first step, where compilation happens, timed on its own."""
    started = time.perf_counter()
    net.step(*fixed)
    if net.sync:
        net.sync()
    return time.perf_counter() - started


def amp_dtype(device: torch.device) -> torch.dtype:
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def make_step(args, model, optimizer, device):
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp and device.type == "cuda")

    def step(images, labels):
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype(device), enabled=args.amp):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step


def random_batch(batch: int, size: int, classes: int, device, memory_format, seed: int):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, size, size, generator=generator).to(device).contiguous(memory_format=memory_format)
    return images, torch.randint(0, classes, (batch,), generator=generator).to(device)


def data_facts(args) -> dict:
    """What data runs, for the record: synthetic, or the image folder and its manifest."""
    if args.data == "synthetic":
        return {"data": "synthetic"}
    return folder_facts()


def forward_backward(args, net: Training, device, fixed):
    """A forward and backward pass with DDP's gradient exchange switched off (no_sync where the model is
    wrapped; gradients dropped, weights untouched): the step's own work without the exchange and the update."""
    model = net.model

    def one_pass():
        with net.wrapped.no_sync() if net.wrapped is not None else contextlib.nullcontext():
            with torch.autocast(device.type, dtype=amp_dtype(device), enabled=args.amp):
                loss = F.cross_entropy(model(fixed[0]), fixed[1])
            loss.backward()
            net.bare.zero_grad(set_to_none=True)

    return one_pass


EXCHANGE_SAMPLES = 10  # at most this many passes without the exchange, spread over the timed iterations


def exchange_sampler(args, net: Training, device, fixed, sync):
    """What the exchange (and the optimizer's update) adds to a step, for the run's diagnosis: after some of the
    timed iterations (outside their time), a forward and backward pass without the exchange, timed alone and set
    against a step of the iteration just before it. Each pass stands beside the steps it followed, so a load on
    the host that comes and goes over the run moves both alike (one measurement before the window, set against
    the window's mean, read anywhere from 0.18 to 0.67 on a loaded two-core machine). Returns after(index, total,
    seconds) for timed_iterations and report(probe), which writes the figures."""
    one_pass, batches = forward_backward(args, net, device, fixed), max(1, args.num_batches_per_iter)
    passes, ratios = [], []

    def after(index: int, total: int, seconds: float) -> None:
        if index % math.ceil(total / EXCHANGE_SAMPLES):
            return
        if sync:
            sync()
        began = time.perf_counter()
        one_pass()
        if sync:
            sync()
        passes.append(time.perf_counter() - began)
        ratios.append(passes[-1] / (seconds / batches))

    def report(probe) -> None:
        if passes:
            probe.result(step_without_exchange_s=statistics.median(passes),
                         exchange_share=round(min(1.0, max(0.0, 1 - statistics.median(ratios))), 4),
                         exchange_samples=len(passes))

    return after, report


def train_synthetic(args, probe, net: Training, batch, fixed, device) -> None:
    step, sync = net.step, net.sync
    with probe.warmup(images=batch * args.num_warmup_batches, sync=sync):
        for _ in range(args.num_warmup_batches):
            step(*fixed)
    after, report = exchange_sampler(args, net, device, fixed, sync) if dist.get_world_size() > 1 else (None, None)

    def one_iteration():
        for _ in range(args.num_batches_per_iter):
            step(*fixed)

    timed_iterations(probe, args.num_iters, min_seconds(args.min_seconds, device.type == "cuda"),
                     batch * args.num_batches_per_iter, one_iteration, sync, lambda n: agree(n, device), after)
    if report:
        report(probe)


def batches(loader, probe):
    """The loader's batches, the wait for each timed by the probe (the diagnosis's data wait)."""
    iterator = iter(loader)
    while True:
        with probe.data_wait():
            batch = next(iterator, None)
        if batch is None:
            return
        yield batch


def train_epochs(args, probe, step, loader, sampler, normalise, sync) -> None:
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        probe.epoch_begin(sync)
        images, losses = 0, []
        for batch in batches(loader, probe):
            losses.append(step(*normalise(*batch)))
            images += len(batch[1])
        probe.epoch_end(images=images, sync=sync, total=args.epochs, loss=float(torch.stack(losses).mean()))


if __name__ == "__main__":
    main()
    end_process()  # the work is written: skip unloading torch (suite/instack/process_end.py)

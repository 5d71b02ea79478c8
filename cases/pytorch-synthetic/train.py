"""pytorch-synthetic: ResNet-50 v1.5 on a fixed random batch, data-parallel with Horovod.

Started once per device by horovodrun (or srun/mpirun); options come from case.toml.
"""

import horovod
import horovod.torch as hvd
import numpy
import torch
import torch.nn.functional as F

from cases._shared.flops import report_work
from cases._shared.gpu_busy import pass_gpu_seconds
from cases._shared.timed import min_seconds, timed_iterations
from cases._shared.torch_resnet import MODELS
from suite.instack.case_options import parse_case_args
from suite.instack.cpu_binding import bind_cpus
from suite.instack.probe import Probe, announce
from suite.instack.process_end import end_process


def pick_device(args) -> torch.device:
    # This worker's share of the node's cores (bound to it with --cpu-bind): its threads.
    threads = bind_cpus(hvd.local_rank(), hvd.local_size(), hvd.rank())
    if torch.cuda.is_available() and not args.no_cuda:
        torch.cuda.set_device(hvd.local_rank())
        torch.backends.cudnn.benchmark = True
        return torch.device("cuda", hvd.local_rank())
    torch.set_num_threads(threads)
    return torch.device("cpu")


def amp_dtype(device: torch.device) -> torch.dtype:
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def fixed_batch(args, device) -> tuple[torch.Tensor, torch.Tensor]:
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    generator = torch.Generator().manual_seed(42 + hvd.rank())
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator)
    images = images.to(device).contiguous(memory_format=memory_format)
    return images, torch.randint(0, args.num_classes, (args.batch_size,), generator=generator).to(device)


def gpu_pass_seconds(args, model, optimizer, device, images, labels) -> float | None:
    """The GPU's own time for a forward and backward pass of the step (no update), for the diagnosis;
    the all-reduces its gradients start are waited for after it and the gradients dropped."""

    def one_pass():
        with torch.autocast(device.type, dtype=amp_dtype(device), enabled=args.amp):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()

    def settle():
        optimizer.synchronize()
        optimizer.zero_grad()

    return pass_gpu_seconds(one_pass, settle, spins=(2.0,))  # its all-reduces: as many tries on every rank


def make_step(args, model, optimizer, device, images, labels):
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp and device.type == "cuda")

    def step():
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype(device), enabled=args.amp):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        if scaler.is_enabled():
            # Horovod's recipe for loss scaling: finish the all-reduce before unscaling.
            optimizer.synchronize()
            scaler.unscale_(optimizer)
            with optimizer.skip_synchronize():
                scaler.step(optimizer)
        else:
            optimizer.step()
        scaler.update()

    return step


def main() -> None:
    announce()
    args = parse_case_args(__file__)
    hvd.init()
    device = pick_device(args)
    model = MODELS[args.model](num_classes=args.num_classes).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    lr = 0.01 * hvd.size()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    images, labels = fixed_batch(args, device)
    step = make_step(args, model, optimizer, device, images, labels)
    sync = torch.cuda.synchronize if device.type == "cuda" else None

    probe = Probe(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())
    probe.start(
        config={
            "model": args.model,
            "parameters": sum(p.numel() for p in model.parameters()),
            "device_type": device.type,
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": f"amp-{str(amp_dtype(device)).removeprefix('torch.')}" if args.amp else "float32",
            "global_batch": args.batch_size * hvd.size(),
            "lr": lr,
            "threads_per_worker": torch.get_num_threads(),
            "horovod_controller": "mpi" if hvd.mpi_enabled() else "gloo",
        },
        versions={"torch": torch.__version__, "horovod": horovod.__version__, "numpy": numpy.__version__,
                  "cuda": torch.version.cuda, "hip": torch.version.hip,
                  "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None},
    )
    shape = (args.batch_size, 3, args.image_size, args.image_size)  # of the step's batch: the count needs no data
    report_work(probe, {"case": "pytorch-synthetic", "model": args.model, "image_size": args.image_size,
                        "classes": args.num_classes}, model, torch.empty(shape, device="meta"),
                torch.zeros(args.batch_size, dtype=torch.long, device="meta"), F.cross_entropy, device,
                amp_dtype(device) if args.amp else None)
    with probe.warmup(images=args.batch_size * args.num_warmup_batches, sync=sync):
        for _ in range(args.num_warmup_batches):
            step()

    def one_iteration():
        for _ in range(args.num_batches_per_iter):
            step()

    def agree(count: int) -> int:  # rank 0's count, on every rank
        return int(hvd.broadcast(torch.tensor([count]), root_rank=0, name="timed_iterations").item())

    timed_iterations(probe, args.num_iters, min_seconds(args.min_seconds, device.type == "cuda"),
                     args.batch_size * args.num_batches_per_iter, one_iteration, sync, agree)
    if device.type == "cuda":  # the GPU's own time for a step's pass, beside the timed step (diagnosis)
        probe.result(gpu_pass_s=gpu_pass_seconds(args, model, optimizer, device, images, labels))
    probe.end()
    hvd.shutdown()


if __name__ == "__main__":
    main()
    end_process()  # the work is written: skip unloading torch (suite/instack/process_end.py)

"""mxnet-imagenet: ResNet-50 v1 (gluon model zoo), or v1.5 (gluon_resnet.py), on ImageNet RecordIO,
data-parallel over a kvstore.

The pslite launcher starts this script in every process of a job. In a ps-lite server or scheduler
(DMLC_ROLE=server/scheduler) `import mxnet` runs that role until the workers are done and exits;
a worker trains on all devices of its node and pushes gradients to the servers, which run SGD.
Options come from case.toml.
"""

import hashlib
import json
import os
import time
from pathlib import Path

from cases._shared.mxnet_settings import precision
from suite.instack.case_options import parse_case_args
from suite.instack.cpu_binding import bind_cpus
from suite.instack.matmul_peak import largest_side, measure
from suite.instack.model_flops import training_flops_per_image
from suite.instack.probe import Probe, announce
from suite.instack.pslite_hosts import resolve_pslite_hosts

resolve_pslite_hosts()  # on this node, before the import below starts a server or scheduler
announce()  # before the import below, inside which a server or the scheduler serves until it ends

# Before the import below starts MXNet's OpenMP pool: this process's share of the cores (bound to it
# with --cpu-bind), so that workers and servers of one machine do not each use all of them.
os.environ.setdefault("OMP_NUM_THREADS", str(bind_cpus()))

import mxnet as mx  # noqa: E402 (a ps-lite server or scheduler serves inside this import and exits)
import numpy  # noqa: E402 (after OMP_NUM_THREADS is set: its BLAS sizes its pool at import)
from gluon_resnet import ResNet50V15  # noqa: E402 (imports mxnet: after the environment is set)
from mxnet import autograd, gluon  # noqa: E402 (after the import of mxnet above)
from mxnet.gluon.model_zoo import vision  # noqa: E402 (after the import of mxnet above)

REC = Path("imagenet-rec")
MEAN_RGB, STD_RGB = (123.68, 116.779, 103.939), (58.393, 57.12, 57.375)


def fail(message: str):
    raise SystemExit(f"mxnet-imagenet: {message}")


def pick_devices(args) -> list:
    """GPUs named by --gpus, else one device per slot of the node: GPUs where there are, else CPUs
    (MXNet runs several CPU contexts of one process on the same cores; they split the batch)."""
    slots = int(os.environ.get("SUITE_DEVICES_PER_NODE", "1"))
    gpus = mx.context.num_gpus()
    if args.gpus:
        try:
            ids = [int(i) for i in args.gpus.split(",")]
        except ValueError:
            fail(f"--gpus expects GPU ids like 0,1,2,3, got '{args.gpus}'")
        if max(ids) >= gpus:
            fail(f"--gpus {args.gpus} but this node has {gpus} GPU(s)")
        if len(ids) != slots:
            fail(f"--gpus lists {len(ids)} GPU(s) but the node has {slots} slot(s): set GPUS_PER_NODE={len(ids)}")
        return [mx.gpu(i) for i in ids]
    if gpus:
        if slots > gpus:
            fail(f"{slots} devices per node requested but this node has {gpus} GPU(s)")
        return [mx.gpu(i) for i in range(slots)]
    return [mx.cpu(i) for i in range(slots)]


def kvstore_type(requested: str, on_gpu: bool) -> str:
    if requested != "auto":
        return requested
    if os.environ.get("DMLC_ROLE") == "worker":  # started with ps-lite servers by the pslite launcher
        return "dist_device_sync" if on_gpu else "dist_sync"
    return "device" if on_gpu else "local"


def read_manifest(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / REC / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}  # packed elsewhere (e.g. by im2rec): no manifest


def record_count(idx: Path) -> int:
    with open(idx) as f:
        return sum(1 for line in f if line.strip())


class Data:
    """The batches of one worker, endlessly, each as (data, label) per device: its part of the record
    file, or one random batch kept in device memory (--benchmark). `images` is one epoch of the whole job."""

    def __init__(self, args, batch: int, kv, on_gpu: bool, data_dir: Path):
        self.manifest = read_manifest(data_dir)
        self.fixed = self.iter = self.idx_sha256 = None
        shape = (batch, 3, args.image_size, args.image_size)
        if args.benchmark:
            self.images, self.classes = args.num_examples, args.num_classes or 1000
            self.describe = "synthetic"
            label = mx.nd.array(numpy.random.randint(0, self.classes, batch))
            self.fixed = mx.io.DataBatch([mx.nd.random.uniform(-1, 1, shape=shape)], [label])
            return
        rec, idx = data_dir / REC / "train.rec", data_dir / REC / "train.idx"
        self.images, self.idx_sha256 = record_count(idx), hashlib.sha256(idx.read_bytes()).hexdigest()
        self.classes = args.num_classes or self.manifest.get("classes") or 1000
        self.describe = f"{self.manifest['source']}-rec" if self.manifest.get("synthetic") else str(rec)
        self.iter = mx.io.ImageRecordIter(
            path_imgrec=str(rec), path_imgidx=str(idx), data_shape=shape[1:], batch_size=batch,
            rand_crop=True, rand_mirror=True, shuffle=True, preprocess_threads=args.data_nthreads,
            num_parts=kv.num_workers, part_index=kv.rank, ctx="gpu" if on_gpu else "cpu", verbose=False,
            mean_r=MEAN_RGB[0], mean_g=MEAN_RGB[1], mean_b=MEAN_RGB[2],
            std_r=STD_RGB[0], std_g=STD_RGB[1], std_b=STD_RGB[2])

    def batches(self, devices: list):
        def split(batch):
            return list(zip(gluon.utils.split_and_load(batch.data[0], devices),
                            gluon.utils.split_and_load(batch.label[0], devices)))

        if self.fixed is not None:
            parts = split(self.fixed)
            while True:
                yield parts
        while True:
            self.iter.reset()
            yield from map(split, self.iter)


def build_net(args, classes: int, devices: list):
    net = ResNet50V15(classes) if args.model == "resnet50-v1.5" else vision.resnet50_v1(classes=classes)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=devices)
    net(mx.nd.zeros((1, 3, args.image_size, args.image_size), ctx=devices[0]))  # finish deferred init
    if args.dtype == "float16":
        net.cast("float16")
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def lr_steps(args, epoch_batches: int) -> list[int]:
    try:
        epochs = [int(e) for e in args.lr_step_epochs.split(",") if e.strip()]
    except ValueError:
        fail(f"--lr-step-epochs expects epochs like 30,60, got '{args.lr_step_epochs}'")
    return [e * epoch_batches for e in sorted(set(epochs)) if e > 0]


def make_trainer(args, net, kv, lr: float, steps: list[int]):
    params = {"learning_rate": lr, "momentum": 0.9, "wd": 1e-4, "multi_precision": args.dtype == "float16"}
    if steps:
        params["lr_scheduler"] = mx.lr_scheduler.MultiFactorScheduler(step=steps, factor=0.1, base_lr=lr)
    return gluon.Trainer(net.collect_params(), "sgd", params, kvstore=kv)


def make_step(args, net, trainer, gradient_batch: int):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    dtype = args.dtype

    def step(parts) -> None:
        with autograd.record():
            losses = [loss_fn(net(x.astype(dtype, copy=False)), y.astype(dtype, copy=False)) for x, y in parts]
        autograd.backward(losses)
        # Gradients are summed over the workers' pushes: normalise by the global batch.
        trainer.step(gradient_batch)

    return step


def run_batches(step, batches, count: int) -> None:
    for _ in range(count):
        step(next(batches))


def schedule(args, images: int, batch: int, workers: int) -> tuple[int, int, int]:
    """Batches per epoch (every worker runs as many), batches in the run, and timed intervals."""
    epoch_batches = max(1, images // (batch * workers))
    total = args.num_epochs * epoch_batches
    total = min(total, args.num_batches) if args.num_batches else total
    intervals = (total - args.num_warmup_batches) // args.disp_batches
    if intervals < 1:
        fail(f"{total} batches leave no timed interval after {args.num_warmup_batches} warmup batches "
             f"(one interval is --disp-batches {args.disp_batches}); raise --num-batches or --num-epochs")
    return epoch_batches, total, intervals


def train(args, probe, step, batches, batch: int, epoch_batches: int, total: int, intervals: int) -> list[float]:
    """Warmup, then timed intervals of --disp-batches batches (Speedometer's samples/s of this
    worker for each), then the untimed rest of the run."""
    with probe.warmup(images=batch * args.num_warmup_batches, sync=mx.nd.waitall):
        run_batches(step, batches, args.num_warmup_batches)
    done, rates = args.num_warmup_batches, []
    for _ in range(intervals):
        began = time.perf_counter()
        with probe.iteration(images=batch * args.disp_batches, sync=mx.nd.waitall, total=intervals):
            run_batches(step, batches, args.disp_batches)
        rates.append(batch * args.disp_batches / (time.perf_counter() - began))
        done += args.disp_batches
        print(f"Epoch[{done // epoch_batches}] Batch [{done % epoch_batches}]\tSpeed: {rates[-1]:.2f} samples/sec "
              f"(worker {probe.rank})", flush=True)
    run_batches(step, batches, total - done)
    mx.nd.waitall()
    return rates


def report_work(args, probe, devices: list) -> None:
    """The step's FLOPs per image (MXNet counts none: the same architecture's count, from
    suite/instack/model_flops.py) and the matmul peak of this worker's devices, before the warmup."""
    on_gpu = devices[0].device_type == "gpu"
    name = precision(args.dtype, on_gpu)
    found = training_flops_per_image(args.model, args.image_size)
    if found:
        probe.work(flops_per_sample=found[0], source=found[1], precision=name)
    probe.measured_peak(**matmul_peak(devices[0], args.dtype, name, shared_by=1 if on_gpu else len(devices)))


def matmul_peak(device, dtype: str, precision_name: str, shared_by: int, seconds: float | None = None) -> dict:
    """The measured matmul peak (suite/instack/matmul_peak.py) of one device, per device (`shared_by`:
    CPU contexts of one process share its cores), under the same MXNet settings as the step. The product
    is a fully connected layer's: on a CPU it runs in oneDNN as the convolutions do (mx.nd.dot goes to
    the bundled BLAS, about a quarter as fast here)."""

    def square(n: int):
        return mx.nd.random.uniform(shape=(n, n), ctx=device, dtype=dtype)

    def multiply(a, times: int) -> None:
        for _ in range(times):
            mx.nd.FullyConnected(a, a, num_hidden=a.shape[0], no_bias=True)
        mx.nd.waitall()

    largest = largest_side(device.device_type == "gpu")
    return measure(square, multiply, precision_name, largest, shared_by=shared_by, seconds=seconds)


def main() -> None:
    args = parse_case_args(__file__)
    devices = pick_devices(args)
    on_gpu = devices[0].device_type == "gpu"
    if args.dtype == "float16" and not on_gpu:
        fail("--dtype float16 needs GPUs (MXNet has no float16 matrix products on CPUs)")
    batch = args.batch_size or args.batch_per_device * len(devices)
    if batch % len(devices):
        fail(f"--batch-size {batch} does not split evenly over {len(devices)} devices")
    kv = mx.kv.create(kvstore_type(args.kv_store, on_gpu))
    data = Data(args, batch, kv, on_gpu, Path(os.environ.get("SUITE_DATA_DIR", "data")))
    epoch_batches, total, intervals = schedule(args, data.images, batch, kv.num_workers)

    net = build_net(args, data.classes, devices)
    lr = args.lr * kv.num_workers
    trainer = make_trainer(args, net, kv, lr, lr_steps(args, epoch_batches))
    step = make_step(args, net, trainer, batch * kv.num_workers if "dist" in kv.type else batch)

    probe = Probe(kv.rank, kv.num_workers)
    probe.start(config=run_config(args, kv, devices, batch, data, net, lr, epoch_batches, total),
                versions=versions(on_gpu))
    report_work(args, probe, devices)
    rates = train(args, probe, step, data.batches(devices), batch, epoch_batches, total, intervals)
    probe.result(batches=total, epochs=round(total / epoch_batches, 3),
                 **{f"worker_{kv.rank}_samples_per_sec": sum(rates) / len(rates)})
    probe.end()
    # Returning frees the kvstore: its destructor waits for all workers, then rank 0 stops the
    # servers, which is what lets ps-lite's servers and scheduler exit.


def run_config(args, kv, devices, batch, data, net, lr, epoch_batches, total) -> dict:
    trainable = [p for p in net.collect_params().values() if p.grad_req != "null"]
    return {
        "model_name": args.model,
        "data": data.describe,
        "data_manifest": data.manifest or None,
        "train_images": data.images,
        "train_idx_sha256": data.idx_sha256,
        "num_classes": data.classes,
        "batch_per_device": batch // len(devices),
        "batch_per_worker": batch,
        "global_batch": batch * kv.num_workers,
        "image_size": args.image_size,
        "dtype": args.dtype,
        "device_type": "cuda" if devices[0].device_type == "gpu" else "cpu",
        "devices_per_worker": len(devices),
        "devices": [str(d) for d in devices],
        "device_indices": [d.device_id for d in devices] if devices[0].device_type == "gpu" else None,
        "kvstore": kv.type,
        "servers": int(os.environ.get("DMLC_NUM_SERVER", "0")),
        "workers": kv.num_workers,
        "parameters": sum(p.data(devices[0]).size for p in trainable),  # as PyTorch counts: no running stats
        "lr": lr,
        "epoch_batches": epoch_batches,
        "run_batches": total,
        "data_nthreads": args.data_nthreads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "host": os.environ.get("DMLC_NODE_HOST"),
    }


def versions(on_gpu: bool) -> dict:
    features = mx.runtime.Features()
    found = {"mxnet": mx.__version__, "numpy": numpy.__version__,
             "mxnet_features": sorted(name for name in features if features.is_enabled(name))}
    if on_gpu:
        found["gpu_compute_capability"] = mx.util.get_cuda_compute_capability(mx.gpu(0))
    return found


if __name__ == "__main__":
    main()

"""jax-resnet: ResNet-50 v1.5 in Flax (resnet.py), trained by one jax.jit-ted step over a jax.sharding.Mesh of
every device of every process, measured in images/s.

One process per device, started by the suite's jaxdist launcher or by a bare srun, joined by
jax.distributed.initialize (cases/_shared/jax_dist.py; on CPUs the processes exchange through Gloo). The
batch is sharded over the mesh's one axis, "data"; the parameters, batch statistics and SGD's momentum are
replicated, so XLA all-reduces the gradients. Batch normalisation takes its statistics over the global
batch (XLA reduces them over the axis too), as Flax's ImageNet example does with its axis_name. --data
synthetic trains on a fixed random batch on the devices, each process its own. The step is compiled before
the warmup (its time recorded, not timed); the work is the products as the other ResNet cases count them,
XLA's own count of the compiled step beside it. --data imagefolder reads pytorch-ddp's class folders of
JPEGs (pipeline.py), each process its share, the model's classes those of the tree; the steps are timed
as with synthetic data, the wait for each batch apart. On GPUs, after the timed window, a few steps run back
to back and are timed as the device's time per step (gpu_pass_s, for the diagnosis). Options come from
case.toml."""

import time

from cases._shared.jax_dist import place, start
from cases._shared.jax_loop import train_and_report
from cases._shared.jax_work import precision_of, record_matmul_peak, versions, xla_flops
from suite.instack.case_options import parse_case_args
from suite.instack.probe import Probe, announce

CASE = "jax-resnet"
MODEL_NAMES = {"resnet50": "resnet50-v1.5", "resnet18": "resnet18"}  # as the record names them
FORMULA = "the products of a forward and backward pass as torch.utils.flop_counter counts them (resnet.py)"
XLA_COUNTED = "XLA's cost analysis of the compiled train step (compiled.cost_analysis()['flops']), per image"


def main() -> None:
    announce()
    args = parse_case_args(__file__)
    where = place()
    platform = start(where, args.no_cuda, args.cpu_dispatch)

    import jax
    import numpy as np
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()), ("data",))
    wanted = args.precision if args.precision != "auto" else ("bf16" if platform == "gpu" else "fp32")
    folder = image_folder(args, where, mesh.devices.size) if args.data == "imagefolder" else None
    if folder:
        args.num_classes = len(folder.classes)
    state = TrainState(args, mesh, wanted, where["world"], platform)
    probe = Probe(where["rank"], where["world"], where["local_rank"], where["local_world"])
    next_batch = folder_batch(folder, state, probe) if folder else synthetic_batch(args, where, state)
    # the start line before compiling: a process on another device than the runner asked for stops here
    probe.start(config=start_config(args, state, platform, where), versions=versions())
    compiled = compile_step(probe, state, next_batch, args, wanted, platform)
    train_and_report(probe, compiled, state, next_batch, args, platform, per_step=state.batch)
    if folder:
        folder.close()
    if where["world"] > 1:
        jax.distributed.shutdown()


class TrainState:
    """The model, SGD with momentum, their state replicated over the mesh, and the jitted train step."""

    def __init__(self, args, mesh, wanted: str, world: int, platform: str):
        import jax
        import jax.numpy as jnp
        import optax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P
        from resnet import ResNet

        self.mesh, self.devices = mesh, mesh.devices.size
        self.dtype = jnp.bfloat16 if wanted == "bf16" else jnp.float32
        self.model = ResNet(args.model, args.num_classes, self.dtype)
        self.lr = 0.01 * world  # pytorch-ddp's rule
        self.optimizer = optax.sgd(self.lr, momentum=0.9)
        self.batch = batch_per_device(args, self.devices)
        sample = jnp.zeros((1, args.image_size, args.image_size, 3), jnp.float32)
        init = lambda key: self.model.init(key, sample, train=False)  # noqa: E731
        self.shapes = jax.eval_shape(init, jax.random.PRNGKey(args.seed))
        replicated = NamedSharding(mesh, P())
        # the same weights on every process: one key, jitted onto the replicated sharding. Run once, untimed: on
        # a CPU unoptimised, which compiles its random-number kernels five times faster (ResNet-50: 20 s to 4 s)
        key = jax.random.PRNGKey(args.seed)
        quick = {"xla_backend_optimization_level": 0} if platform == "cpu" else None
        variables = jax.jit(init, out_shardings=replicated).lower(key).compile(compiler_options=quick)(key)
        self.params, self.stats = variables["params"], variables["batch_stats"]
        self.opt_state = jax.jit(self.optimizer.init, out_shardings=replicated)(self.params)
        self.batch_sh = NamedSharding(mesh, P("data"))
        self.step = jax.jit(self.train_step, donate_argnums=(0, 1, 2),
                            in_shardings=(replicated, replicated, replicated, self.batch_sh, self.batch_sh),
                            out_shardings=(replicated, replicated, replicated, replicated))

    def train_step(self, params, stats, opt_state, images, labels):
        import jax
        import optax

        def loss_of(p):
            logits, updated = self.model.apply({"params": p, "batch_stats": stats}, images, train=True,
                                               mutable=["batch_stats"])
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, updated["batch_stats"]

        (loss, stats), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    def advance(self, compiled, batch):
        """One step of the compiled train step on (images, labels); its loss (on the devices)."""
        self.params, self.stats, self.opt_state, loss = compiled(self.params, self.stats, self.opt_state, *batch)
        return loss

    def arrays(self) -> tuple:
        return self.params, self.stats, self.opt_state

    def to_global(self, local):
        """This process's rows of the batch -> the global array sharded over the data axis."""
        import jax

        return jax.make_array_from_process_local_data(self.batch_sh, local)

    def parameters(self) -> int:
        import jax

        return sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(self.shapes["params"]))


def batch_per_device(args, devices: int) -> int:
    return args.global_batch // devices if args.global_batch else args.batch_size


def image_folder(args, where: dict, devices: int):
    """This process's batches of the class folders under $SUITE_DATA_DIR/imagefolder/train."""
    import jax
    from pipeline import ImageFolderBatches

    from cases._shared.image_folder import train_root

    rows = batch_per_device(args, devices) * len(jax.local_devices())
    return ImageFolderBatches(train_root(), args.image_size, rows, where["rank"], where["world"], args.workers,
                              args.seed)


def folder_batch(folder, state: TrainState, probe):
    """next_batch(): the folder's next batch of this process (the wait for it timed apart), on the devices."""
    def next_batch():
        with probe.data_wait():
            images, labels = next(folder)
        return state.to_global(images), state.to_global(labels)

    return next_batch


def synthetic_batch(args, where: dict, state: TrainState):
    """next_batch(): a fixed random batch of this process's devices, (images NHWC, labels), on the devices."""
    import jax
    import numpy as np

    rows = state.batch * len(jax.local_devices())
    rng = np.random.default_rng(args.seed + 1 + where["rank"])
    images = rng.standard_normal((rows, args.image_size, args.image_size, 3), dtype=np.float32)
    labels = rng.integers(0, args.num_classes, rows).astype(np.int32)
    fixed = state.to_global(images), state.to_global(labels)
    return lambda: fixed


def start_config(args, state: TrainState, platform: str, where: dict) -> dict:
    """The probe's start line: the model, its batch and where it runs."""
    import jax
    import jax.numpy as jnp

    devices = state.devices
    return {
        "model": args.model, "model_name": MODEL_NAMES[args.model], "parameters": state.parameters(),
        "device_type": "cuda" if platform == "gpu" else "cpu",
        "device_name": jax.devices()[0].device_kind if platform == "gpu" else "cpu",
        "dtype": "amp-bfloat16" if state.dtype == jnp.bfloat16 else "float32", **data_facts(args),
        "batch_per_device": state.batch, "global_batch": state.batch * devices, "image_size": args.image_size,
        "classes": args.num_classes, "lr": state.lr, "threads_per_worker": where.get("threads"),
        "backend": "gloo" if platform == "cpu" else "nccl", "launcher": "jaxdist", "parallel": "dp",
        "processes": jax.process_count(), "devices": devices, "local_devices": len(jax.local_devices()),
        "mesh": {"data": devices}, "batch_norm": "statistics over the global batch", "seed": args.seed,
    }


def data_facts(args) -> dict:
    if args.data == "synthetic":
        return {"data": "synthetic"}
    from cases._shared.image_folder import folder_facts

    return {**folder_facts(), "decoding_threads": args.workers}


def compile_step(probe, state: TrainState, next_batch, args, wanted: str, platform: str):
    """The train step compiled (its time recorded, not timed), its work beside XLA's count, and the device's
    measured matmul peak, after which the peak memory is reset."""
    import jax
    from resnet import training_flops_per_image

    started = time.perf_counter()
    compiled = state.step.lower(state.params, state.stats, state.opt_state, *next_batch()).compile()
    compile_seconds = time.perf_counter() - started
    counted = xla_flops(compiled) / state.batch  # the per-device program, over its images
    formula = training_flops_per_image(args.model, args.image_size, args.num_classes)
    device = jax.local_devices()[0]
    probe.work(flops_per_sample=formula, precision=precision_of(wanted, platform, device),
               source=f"{FORMULA}; {XLA_COUNTED}: {counted:,.0f}")
    probe.result(counted_flops_per_image=counted, counted_flops_source=XLA_COUNTED, formula_flops_per_image=formula,
                 compile_seconds=compile_seconds)
    record_matmul_peak(probe, device, wanted, platform)
    return compiled


if __name__ == "__main__":
    main()

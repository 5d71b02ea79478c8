"""All-reduce sweep: the interconnect check before a multi-node run. Started inside the case's stack
by the case's own launcher, with the stack's own collective: torch.distributed (NCCL on GPUs, Gloo on
CPUs; started by torchrun, by the suite as ranks, or by srun), Horovod's allreduce (horovodrun), JAX's
(jaxdist or srun: a jitted sum over a mesh of one device per process, which XLA makes an all-reduce),
TensorFlow's (tfdist: a replica context's all_reduce under MultiWorkerMirroredStrategy, one process per
node, or MirroredStrategy in one) or MXNet's kvstore (pslite: a push and a pull of one key through the
ps-lite servers, the exchange of a parameter server; the servers and the scheduler serve inside
`import mxnet` and write nothing). Each rank times every message size and writes
$SUITE_RUN_DIR/allreduce/rank-<rank>.json with the participants of its exchange (devices of a ring,
workers of a parameter server); the runner takes the slowest rank per size
(suite/execution/interconnect_check.py).

    python allreduce_sweep.py --api torch|horovod|jax|tensorflow|mxnet --sizes 1048576,4194304,... [--iters 5]
                              [--warmup 1]
"""

import argparse
import itertools
import json
import os
import time
from collections.abc import Callable
from typing import NamedTuple

from suite.instack.cpu_binding import bind_cpus
from suite.instack.jax_platforms import jax_gpu_platform
from suite.instack.pslite_hosts import resolve_pslite_hosts
from suite.instack.tf_cluster import make_strategy, worker_rank

RING, PARAMETER_SERVER = "ring", "parameter-server"  # the exchanges of suite/analysis/scaling.py
EXCHANGED = {RING: "all-reduce", PARAMETER_SERVER: "push and pull"}


class Collective(NamedTuple):
    """One process's side of the exchange the sweep times: its rank among the processes that time it,
    the participants of the exchange, what carries it, and the calls to make a buffer of n float32
    elements, exchange it (returning what to wait for), wait for the last exchange's result and end."""

    rank: int
    participants: int
    implementation: str
    device: str
    exchange: str
    buffer: Callable
    allreduce: Callable
    sync: Callable
    shutdown: Callable


def torch_api() -> Collective:
    import torch
    import torch.distributed as dist

    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env:  # a bare srun, as cases/pytorch-ddp reads it
        env.update(RANK=env["SLURM_PROCID"], LOCAL_RANK=env["SLURM_LOCALID"], WORLD_SIZE=env["SLURM_NTASKS"])
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(env.get("LOCAL_RANK", "0")))
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    device = torch.device("cuda") if cuda else torch.device("cpu")
    return Collective(dist.get_rank(), dist.get_world_size(), f"torch.distributed {backend}", device.type, RING,
                      torch_buffer(device), dist.all_reduce, torch_sync(cuda), dist.destroy_process_group)


def torch_buffer(device):
    import torch

    return lambda elements: torch.ones(elements, dtype=torch.float32, device=device)


def torch_sync(cuda: bool):
    """The wait for a torch collective: in place, so the GPU's stream (nothing on a CPU, where it returned done)."""
    import torch

    return (lambda _: torch.cuda.synchronize()) if cuda else (lambda _: None)


def horovod_api() -> Collective:
    import horovod.torch as hvd
    import torch

    hvd.init()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
    device = torch.device("cuda") if cuda else torch.device("cpu")
    controller = "mpi" if hvd.mpi_enabled() else "gloo"
    return Collective(hvd.rank(), hvd.size(), f"horovod allreduce ({controller})", device.type, RING,
                      torch_buffer(device), lambda t: hvd.allreduce_(t, op=hvd.Sum), torch_sync(cuda), hvd.shutdown)


def jax_api() -> Collective:
    env = os.environ
    platform = jax_gpu_platform()  # "cuda", "rocm" or None, as the JAX cases decide
    gpu = platform is not None
    if not gpu:
        env["JAX_PLATFORMS"] = "cpu"
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if not gpu:
        try:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        except (AttributeError, KeyError, ValueError):  # a jax whose CPU collectives are Gloo without asking
            pass
    local = [int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", "0")))] if gpu else None
    if "JAX_COORDINATOR_ADDRESS" in env:  # the jaxdist launcher
        jax.distributed.initialize(env["JAX_COORDINATOR_ADDRESS"], int(env["JAX_NUM_PROCESSES"]),
                                   int(env["JAX_PROCESS_ID"]), local_device_ids=local)
    else:  # a bare srun: JAX reads SLURM's variables itself
        jax.distributed.initialize(local_device_ids=local)
    mesh = Mesh(np.array(jax.devices()), ("ranks",))
    rows = NamedSharding(mesh, PartitionSpec("ranks"))  # one row per process: its own buffer
    summed = jax.jit(lambda x: x.sum(axis=0), out_shardings=NamedSharding(mesh, PartitionSpec()))

    def buffer(elements: int):
        return jax.make_array_from_process_local_data(rows, np.ones((1, elements), dtype=np.float32))

    implementation = f"jax {jax.__version__} jitted sum over {len(jax.devices())} devices (XLA all-reduce" \
                     f"{', RCCL' if platform == 'rocm' else ', NCCL' if gpu else ', Gloo'})"
    return Collective(jax.process_index(), jax.process_count(), implementation, platform or "cpu", RING, buffer,
                      summed, lambda result: result.block_until_ready(), jax.distributed.shutdown)


def tensorflow_api() -> Collective:
    """The replicas tf-cifar trains: under TF_CONFIG (several nodes) MultiWorkerMirroredStrategy over the
    node's GPUs (one replica per worker on a CPU), else MirroredStrategy over SUITE_DEVICES_PER_NODE GPUs or
    logical CPU devices; the all-reduce is a replica context's, as Keras's gradient exchange is."""
    env = os.environ
    import tensorflow as tf

    tf_config = json.loads(env["TF_CONFIG"]) if env.get("TF_CONFIG") else None
    try:
        strategy, _, device, _ = make_strategy(tf_config is not None, int(env.get("SUITE_DEVICES_PER_NODE", "1")))
    except ValueError as exc:  # where tf-cifar could not train either
        raise SystemExit(str(exc)) from None

    local = strategy.extended.worker_devices

    def buffer(elements: int):
        return strategy.experimental_distribute_values_from_function(lambda _: tf.ones([elements], tf.float32))

    def exchange(t):
        if len(local) == 1:  # a replica of its own: no device scope is set, and an unplaced tensor has nowhere
            with tf.device(local[0]):  # to be reduced to ("destinations can not be empty"); Identity forwards it
                t = tf.identity(t)
        return tf.distribute.get_replica_context().all_reduce("sum", t)

    @tf.function
    def summed(values):
        return strategy.run(exchange, args=(values,))

    def sync(result) -> None:
        strategy.experimental_local_results(result)[0][:1].numpy()

    rank, _ = worker_rank(tf_config)
    implementation = f"tensorflow {tf.__version__} {'MultiWorker' if tf_config else ''}MirroredStrategy all_reduce " \
                     f"({'NCCL' if device == 'cuda' else 'ring over gRPC' if tf_config else 'in-process copies'})"
    return Collective(rank, strategy.num_replicas_in_sync, implementation, device, RING, buffer, summed, sync,
                      lambda: None)


def mxnet_api() -> Collective:
    """A worker's push and pull of one key through the ps-lite servers (dist_sync), the case's exchange;
    a process started as a server or the scheduler serves inside `import mxnet` and exits there. Without
    ps-lite (one node, a local kvstore) the one worker exchanges with itself."""
    resolve_pslite_hosts()
    os.environ.setdefault("OMP_NUM_THREADS", str(bind_cpus()))  # workers and servers of a node share it, as in the case
    import mxnet as mx

    gpus = mx.context.num_gpus()
    worker = os.environ.get("DMLC_ROLE") == "worker"  # started beside ps-lite servers; kvstores as mxnet-imagenet's
    kv = mx.kv.create(("dist_device_sync" if gpus else "dist_sync") if worker else ("device" if gpus else "local"))
    context = mx.gpu(0) if gpus else mx.cpu()  # a worker drives its node's GPUs: their gradients merge on it first
    keys = itertools.count()

    def buffer(elements: int):
        key, array = next(keys), mx.nd.ones((elements,), ctx=context, dtype="float32")
        kv.init(key, array)
        return key, array

    def allreduce(keyed):
        key, array = keyed
        kv.push(key, array)
        kv.pull(key, out=array)
        return array

    servers = os.environ.get("DMLC_NUM_SERVER", "0")
    implementation = f"mxnet {mx.__version__} kvstore {kv.type} push and pull ({servers} ps-lite server(s))"
    # the end: freeing the kvstore (main's return) waits for every worker, then rank 0 stops the servers
    return Collective(kv.rank, kv.num_workers, implementation, "cuda" if gpus else "cpu", PARAMETER_SERVER, buffer,
                      allreduce, lambda array: array.wait_to_read(), lambda: None)


APIS = {"torch": torch_api, "horovod": horovod_api, "jax": jax_api, "tensorflow": tensorflow_api, "mxnet": mxnet_api}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", choices=list(APIS), required=True)
    parser.add_argument("--sizes", required=True, help="message sizes in bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    if args.iters < 1 or args.warmup < 1:
        parser.error("--iters and --warmup must be at least 1")
    collective = APIS[args.api]()
    timings = []
    for nbytes in (int(s) for s in args.sizes.split(",")):
        elements = max(1, nbytes // 4)
        tensor = collective.buffer(elements)
        for _ in range(args.warmup):
            result = collective.allreduce(tensor)
        collective.sync(result)
        begin = time.perf_counter()
        for _ in range(args.iters):
            result = collective.allreduce(tensor)
        collective.sync(result)
        timings.append({"bytes": elements * 4, "seconds": (time.perf_counter() - begin) / args.iters})
        if collective.rank == 0:
            took_ms = timings[-1]["seconds"] * 1e3
            print(f"{EXCHANGED[collective.exchange]} {elements * 4 / 1e6:.1f} MB: {took_ms:.2f} ms", flush=True)
    folder = os.path.join(os.environ.get("SUITE_RUN_DIR", "."), "allreduce")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"rank-{collective.rank:05d}.json"), "w") as f:
        json.dump({"rank": collective.rank, "size": collective.participants, "exchange": collective.exchange,
                   "implementation": collective.implementation, "device": collective.device, "iters": args.iters,
                   "timings": timings}, f)
    collective.shutdown()


if __name__ == "__main__":
    main()

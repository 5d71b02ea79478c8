"""All-reduce sweep: the interconnect check before a multi-node run. Started inside the case's stack
by the case's own launcher, with the stack's own collective: torch.distributed (NCCL on GPUs, Gloo on
CPUs; started by torchrun, by the suite as ranks, or by srun), Horovod's allreduce (horovodrun), or JAX's
(jaxdist or srun: a jitted sum over a mesh of one device per process, which XLA makes an all-reduce).
Each rank times every message size and writes $SUITE_RUN_DIR/allreduce/rank-<rank>.json; the runner
takes the slowest rank per size (suite/execution/interconnect_check.py).

    python allreduce.py --api torch|horovod|jax --sizes 1048576,4194304,... [--iters 5] [--warmup 1]
"""

import argparse
import json
import os
import time

from suite.instack.jax_platforms import jax_gpu_platform


def torch_api():
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
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    return (dist.get_rank(), dist.get_world_size(), f"torch.distributed {backend}", device.type,
            torch_buffer(device), dist.all_reduce, sync, dist.destroy_process_group)


def torch_buffer(device):
    import torch

    return lambda elements: torch.ones(elements, dtype=torch.float32, device=device)


def horovod_api():
    import horovod.torch as hvd
    import torch

    hvd.init()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
    device = torch.device("cuda") if cuda else torch.device("cpu")
    controller = "mpi" if hvd.mpi_enabled() else "gloo"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    return (hvd.rank(), hvd.size(), f"horovod allreduce ({controller})", device.type, torch_buffer(device),
            lambda t: hvd.allreduce_(t, op=hvd.Sum), sync, hvd.shutdown)


def jax_api():
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
    last = []

    def buffer(elements: int):
        return jax.make_array_from_process_local_data(rows, np.ones((1, elements), dtype=np.float32))

    def allreduce(x) -> None:
        last[:] = [summed(x)]

    def sync() -> None:
        if last:
            last[0].block_until_ready()

    implementation = f"jax {jax.__version__} jitted sum over {len(jax.devices())} devices (XLA all-reduce" \
                     f"{', RCCL' if platform == 'rocm' else ', NCCL' if gpu else ', Gloo'})"
    return (jax.process_index(), jax.process_count(), implementation, platform or "cpu", buffer,
            allreduce, sync, jax.distributed.shutdown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", choices=["torch", "horovod", "jax"], required=True)
    parser.add_argument("--sizes", required=True, help="message sizes in bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    api = {"torch": torch_api, "horovod": horovod_api, "jax": jax_api}[args.api]
    rank, size, implementation, device, buffer, allreduce, sync, shutdown = api()
    timings = []
    for nbytes in (int(s) for s in args.sizes.split(",")):
        elements = max(1, nbytes // 4)
        tensor = buffer(elements)
        for _ in range(args.warmup):
            allreduce(tensor)
        sync()
        begin = time.perf_counter()
        for _ in range(args.iters):
            allreduce(tensor)
        sync()
        timings.append({"bytes": elements * 4, "seconds": (time.perf_counter() - begin) / args.iters})
        if rank == 0:
            print(f"all-reduce {elements * 4 / 1e6:.1f} MB: {timings[-1]['seconds'] * 1e3:.2f} ms", flush=True)
    folder = os.path.join(os.environ.get("SUITE_RUN_DIR", "."), "allreduce")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"rank-{rank:05d}.json"), "w") as f:
        json.dump({"rank": rank, "size": size, "implementation": implementation, "device": device,
                   "iters": args.iters, "timings": timings}, f)
    shutdown()


if __name__ == "__main__":
    main()

"""All-reduce sweep: the interconnect check before a multi-node run. Started inside the case's stack
by the case's own launcher, with the stack's own collective: torch.distributed (NCCL on GPUs, Gloo on
CPUs; started by torchrun, by the suite as ranks, or by srun) or Horovod's allreduce (horovodrun).
Each rank times every message size and writes $SUITE_RUN_DIR/allreduce/rank-<rank>.json; the runner
takes the slowest rank per size (suite/execution/interconnect_check.py).

    python allreduce.py --api torch|horovod --sizes 1048576,4194304,... [--iters 5] [--warmup 1]
"""

import argparse
import json
import os
import time


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
    return (dist.get_rank(), dist.get_world_size(), f"torch.distributed {backend}", device,
            dist.all_reduce, sync, dist.destroy_process_group)


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
    return (hvd.rank(), hvd.size(), f"horovod allreduce ({controller})", device,
            lambda t: hvd.allreduce_(t, op=hvd.Sum), sync, hvd.shutdown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", choices=["torch", "horovod"], required=True)
    parser.add_argument("--sizes", required=True, help="message sizes in bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    import torch

    api = torch_api if args.api == "torch" else horovod_api
    rank, size, implementation, device, allreduce, sync, shutdown = api()
    timings = []
    for nbytes in (int(s) for s in args.sizes.split(",")):
        tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            allreduce(tensor)
        sync()
        begin = time.perf_counter()
        for _ in range(args.iters):
            allreduce(tensor)
        sync()
        timings.append({"bytes": tensor.numel() * 4, "seconds": (time.perf_counter() - begin) / args.iters})
        if rank == 0:
            print(f"all-reduce {tensor.numel() * 4 / 1e6:.1f} MB: {timings[-1]['seconds'] * 1e3:.2f} ms", flush=True)
    folder = os.path.join(os.environ.get("SUITE_RUN_DIR", "."), "allreduce")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"rank-{rank:05d}.json"), "w") as f:
        json.dump({"rank": rank, "size": size, "implementation": implementation, "device": device.type,
                   "iters": args.iters, "timings": timings}, f)
    shutdown()


if __name__ == "__main__":
    main()

"""Where a torch.distributed worker is and what it trains on, the same for every launcher: torchrun and
the suite's `ranks` set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; under a bare
`srun python train.py` they are taken from SLURM's variables (as NERSC documents); one process alone
is a world of one."""

import os
import subprocess
import time

import torch
import torch.distributed as dist

from suite.instack.cpu_binding import bind_cpus


def place() -> dict[str, int]:
    """rank, local_rank, world, local_world from the environment (filled in where missing)."""
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env:
        env.update(RANK=env["SLURM_PROCID"], LOCAL_RANK=env["SLURM_LOCALID"], WORLD_SIZE=env["SLURM_NTASKS"],
                   LOCAL_WORLD_SIZE=str(int(env["SLURM_NTASKS"]) // int(env.get("SLURM_NNODES", "1"))))
        env.setdefault("MASTER_ADDR", first_slurm_node())
    for name, default in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                          ("MASTER_PORT", "29500")):
        env.setdefault(name, default)
    env.setdefault("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])
    return {k: int(env[v]) for k, v in (("rank", "RANK"), ("local_rank", "LOCAL_RANK"), ("world", "WORLD_SIZE"),
                                        ("local_world", "LOCAL_WORLD_SIZE"))}


def first_slurm_node() -> str:
    nodes = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                           capture_output=True, text=True, check=True).stdout.split()
    return nodes[0]


def pick_device(where: dict, no_cuda: bool) -> torch.device:
    """This worker's GPU, or the CPU with this worker's share of the node's cores (bound to it with
    --cpu-bind) as its threads."""
    threads = bind_cpus(where["local_rank"], where["local_world"])
    if torch.cuda.is_available() and not no_cuda:
        torch.cuda.set_device(where["local_rank"])
        return torch.device("cuda", where["local_rank"])
    torch.set_num_threads(threads)
    return torch.device("cpu")


def pick_backend(case: str, requested: str, device: torch.device) -> str:
    backend = requested if requested != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    available = {"nccl": dist.is_nccl_available() and device.type == "cuda", "gloo": dist.is_gloo_available(),
                 "mpi": dist.is_mpi_available()}
    if not available[backend]:
        raise SystemExit(f"{case}: backend {backend} is not available with this torch build on {device.type}")
    return backend


def agree(count: int, device: torch.device) -> int:
    """Rank 0's count, on every rank."""
    value = torch.tensor([count], dtype=torch.int64, device=device)
    dist.broadcast(value, src=0)
    return int(value.item())


def leave_process_group() -> None:
    """Destroy the process group once Gloo's worker threads have let go of their finished work. A worker
    that drops the last reference to a Python tensor takes the GIL, under its queue's lock; the group's
    destructor, run from Python with the GIL held, takes that lock: the two wait for each other (seen with
    torch 2.13 on the CPU, one exit in three). A pause with the GIL released lets the workers finish first."""
    time.sleep(0.5)
    dist.destroy_process_group()

"""Where a JAX process is and what it trains on, the same for every way it is started: the suite's
`jaxdist` launcher sets JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID (and RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE); under a bare `srun python train.py` they are taken from
SLURM's variables; one process alone is a world of one and starts no coordination service.

Call `place()` and `start(...)` before anything else of JAX runs: the CPU threads, the platform and
the collectives must be set before JAX makes its backend."""

import os
import subprocess
import time

from suite.instack.cpu_binding import bind_cpus
from suite.instack.jax_platforms import jax_gpu_platform

# How long a process waits for the others at a barrier: a large model's compilation on a slow host, not a hang
# (a process that fails ends the run, and the coordination service fails a barrier whose process is gone)
BARRIER_TIMEOUT_S = 3600


def place() -> dict:
    """rank, local_rank, world, local_world and the coordinator address from the environment."""
    env = os.environ
    if "JAX_PROCESS_ID" not in env and "RANK" not in env and "SLURM_PROCID" in env:
        env.update(RANK=env["SLURM_PROCID"], LOCAL_RANK=env["SLURM_LOCALID"], WORLD_SIZE=env["SLURM_NTASKS"],
                   LOCAL_WORLD_SIZE=str(int(env["SLURM_NTASKS"]) // int(env.get("SLURM_NNODES", "1"))))
        env.setdefault("JAX_COORDINATOR_ADDRESS", f"{first_slurm_node()}:{29400 + int(env['SLURM_JOB_ID']) % 1000}")
    rank = int(env.get("JAX_PROCESS_ID", env.get("RANK", "0")))
    world = int(env.get("JAX_NUM_PROCESSES", env.get("WORLD_SIZE", "1")))
    return {"rank": rank, "world": world, "local_rank": int(env.get("LOCAL_RANK", "0")),
            "local_world": int(env.get("LOCAL_WORLD_SIZE", str(world))),
            "coordinator": env.get("JAX_COORDINATOR_ADDRESS", "127.0.0.1:29400")}


def first_slurm_node() -> str:
    nodes = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                           capture_output=True, text=True, check=True).stdout.split()
    return nodes[0]


def start(where: dict, no_cuda: bool, cpu_dispatch: str) -> str:
    """Sets JAX up for this process and joins the others; the platform its devices are ("gpu" or "cpu").

    On a CPU: this process bound to its share of the node's cores where --cpu-bind asks (the share's
    size in where["threads"]), JAX's CPU platform alone, Gloo for the collectives between processes, and
    each step run in the calling thread where cpu_dispatch is "inline" (JAX's asynchronous dispatch on a CPU
    can take the next step's buffers before the last step's are freed: a step's memory twice, or not, by turns).
    On GPUs, where the stack has JAX's CUDA or ROCm plugin and the host lists a GPU
    (suite/instack/jax_platforms.py; the cpu flavour on a GPU host trains on the CPU, and the probe then
    refuses a run the runner asked on GPUs): one GPU per process, its local rank's."""
    where["threads"] = bind_cpus(where["local_rank"], where["local_world"])
    on_gpu = not no_cuda and jax_gpu_platform() is not None
    if not on_gpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    if not on_gpu:
        try:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        except (AttributeError, KeyError, ValueError):  # a jax whose CPU collectives are Gloo without asking
            pass
        if cpu_dispatch == "inline":  # read when JAX makes its CPU backend: before jax.devices() below
            jax.config.update("jax_cpu_enable_async_dispatch", False)
    if where["world"] > 1:
        jax.distributed.initialize(coordinator_address=where["coordinator"], num_processes=where["world"],
                                   process_id=where["rank"],
                                   local_device_ids=[where["local_rank"]] if on_gpu else None)
    # what JAX found, not what was asked: a GPU build that finds no GPU falls back to the CPU, and the probe
    # then refuses a run the runner asked on GPUs
    return "gpu" if jax.devices()[0].platform in ("gpu", "cuda", "rocm") else "cpu"


def agree(count: int) -> int:
    """Process 0's count, on every process."""
    import numpy as np
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.asarray(count, dtype=np.int32)))


def wait_for_the_others(point: str, timeout_s: int = BARRIER_TIMEOUT_S) -> float:
    """Waits until every process has reached `point`, through the coordination service (no collective);
    the seconds waited. Call it before a collective that may follow a compilation: on CPUs Gloo gives a
    peer 30 s to join a collective, and processes compile at very different speeds where JAX's persistent
    compilation cache is set (only process 0 writes it: process 0 finds its programs there, the others
    compile them) or where the hosts differ. A JAX without the coordination client waits for nothing."""
    import jax

    if jax.process_count() == 1:
        return 0.0
    from jax._src import distributed  # the client JAX's own checkpointing waits at barriers with

    client = getattr(getattr(distributed, "global_state", None), "client", None)
    if client is None:
        return 0.0
    started = time.monotonic()
    client.wait_at_barrier(f"hpcdl-{point}", timeout_in_ms=timeout_s * 1000)
    return time.monotonic() - started

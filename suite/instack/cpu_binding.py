"""CPU binding of a case process, done by the process itself at start-up. Standard library only:
imported by case scripts inside their stack.

The runner passes the policy as SUITE_CPU_BIND (`--cpu-bind`, Make: CPU_BIND); a process calls
`bind_cpus(local_rank, local_size)` as soon as it knows its place (before its framework starts its
thread pools where it can) and computes with the number of threads it returns. This works the same
whoever started the process (the scheduler, horovodrun, torchrun's agent, srun).

Share: the cores this process may use (its affinity when started) are split evenly over the slots
(devices) of the machine, and a process gets the cores of the slots it drives: a rank its slot, a
process that drives a whole node (a ps-lite worker or server, a MirroredStrategy process) the node's
slots. Several "hosts" of one machine (loopback hostfiles) get consecutive slots, from
SUITE_SLOT_OFFSET and SUITE_MACHINE_SLOTS (suite/execution/plan.py); SUITE_SLOT_OFFSET=ranks where one
launcher starts the processes of all those hosts with one environment (horovodrun): a process's host then
begins at slot rank - local_rank, ranks being numbered host by host, so it must pass its rank.

  none        no binding; threads = the size of the share (processes do not oversubscribe)
  cores       bound to the share
  numa        bound to the NUMA node(s) of the share (/sys/devices/system/node)
  gpu-affine  bound to the cores nearest the process's GPU (`nvidia-smi topo -m`, CPU Affinity);
              where that cannot be read, as numa
"""

import os
import re
import subprocess

POLICIES = ("none", "cores", "numa", "gpu-affine")


def bind_cpus(local_rank: int = 0, local_size: int = 1, rank: int | None = None) -> int:
    """Binds every thread of this process as $SUITE_CPU_BIND says; returns the threads to use. `rank`: the
    process's global rank, needed where SUITE_SLOT_OFFSET=ranks."""
    policy = os.environ.get("SUITE_CPU_BIND", "none")
    allowed = sorted(os.sched_getaffinity(0))
    if bound_by_srun():  # srun --cpu-bind placed this task already: keep it, do not split it again
        return len(allowed)
    first, end, total = slots(local_rank, local_size, rank)
    share = cpu_share(allowed, first, end, total)
    if policy == "none":
        return len(share)
    if policy not in POLICIES:
        raise SystemExit(f"SUITE_CPU_BIND must be one of {', '.join(POLICIES)}, got '{policy}'")
    cpus = set(share)
    if policy == "gpu-affine":  # the GPUs of this process: its slots on its own host
        offset = int(os.environ.get("SUITE_SLOT_OFFSET", "0"))
        cpus = gpu_cpus([gpu_index(i) for i in range(first - offset, end - offset)]) & set(allowed) or numa_cpus(share)
    elif policy == "numa":
        cpus = numa_cpus(share)
    set_affinity(cpus & set(allowed) or set(share))
    return len(share)


def bound_by_srun() -> bool:
    return os.environ.get("SLURM_CPU_BIND_TYPE", "none").strip(",") not in ("", "none")


def slots(local_rank: int, local_size: int, rank: int | None = None) -> tuple[int, int, int]:
    """This process's slots on the machine, as [first, end) of `total`."""
    offset = slot_offset(local_rank, rank)
    host_slots = int(os.environ.get("SUITE_DEVICES_PER_NODE") or local_size)
    total = int(os.environ.get("SUITE_MACHINE_SLOTS") or host_slots)
    if local_size > host_slots:  # more processes than slots: each its own slot
        host_slots = total = local_size
    first = offset + local_rank * host_slots // local_size
    return first, offset + (local_rank + 1) * host_slots // local_size, total


def slot_offset(local_rank: int, rank: int | None) -> int:
    """The first slot of this process's host among the machine's: SUITE_SLOT_OFFSET, or by rank."""
    given = os.environ.get("SUITE_SLOT_OFFSET", "0")
    if given != "ranks":
        return int(given)
    if rank is None:
        raise SystemExit("SUITE_SLOT_OFFSET=ranks (several hosts of this machine under one launcher): "
                         "the case must pass its global rank, bind_cpus(local_rank, local_size, rank)")
    return rank - local_rank


def cpu_share(cpus: list[int], first: int, end: int, total: int) -> list[int]:
    """The cpus of slots [first, end) when `cpus` are split evenly over `total` slots; with fewer
    cpus than slots, slots share a cpu."""
    n = len(cpus)
    return cpus[first * n // total:end * n // total] or [cpus[first * n // total]]


def set_affinity(cpus: set[int]) -> None:
    """Every thread of the process: frameworks may have started theirs already."""
    os.sched_setaffinity(0, cpus)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # the thread has ended
            pass


def parse_cpu_list(text: str) -> set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}"""
    cpus = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def numa_cpus(share: list[int], root: str = "/sys/devices/system/node") -> set[int]:
    """The cpus of every NUMA node that holds a cpu of `share` (the share itself where unknown)."""
    found = set()
    try:
        nodes = [n for n in os.listdir(root) if n.startswith("node") and n[4:].isdigit()]
        for node in nodes:
            with open(os.path.join(root, node, "cpulist")) as f:
                cpus = parse_cpu_list(f.read())
            if cpus & set(share):
                found |= cpus
    except OSError:
        pass
    return found or set(share)


def gpu_index(local_rank: int) -> int:
    """The physical GPU of a rank: its local rank, through CUDA_VISIBLE_DEVICES where that lists ids."""
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and all(v.strip().isdigit() for v in visible):
        return int(visible[local_rank % len(visible)])
    return local_rank


def gpu_cpus(gpus: list[int], topo: str | None = None) -> set[int]:
    """The CPU Affinity of these GPUs in `nvidia-smi topo -m`, together; empty where unknown."""
    if topo is None:
        try:
            topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return set()
    topo = re.sub(r"\x1b\[[0-9;]*m", "", topo)  # some drivers underline the header
    lines = [line.split("\t") for line in topo.splitlines() if line.strip()]
    if not lines:
        return set()
    header = [h.strip() for h in lines[0]]
    header = header if header[0] == "" else ["", *header]  # the rows' first column names the device
    if "CPU Affinity" not in header:
        return set()
    column = header.index("CPU Affinity")
    found = set()
    for row in lines[1:]:
        if row[0].strip() in {f"GPU{gpu}" for gpu in gpus} and len(row) > column:
            try:
                found |= parse_cpu_list(row[column].strip())
            except ValueError:  # N/A
                return set()
    return found


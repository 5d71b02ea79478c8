"""The NVIDIA GPUs of a host, as the runner needs them before launch: how many each host of a plan
has (one short probe per host: directly here, through the scheduler elsewhere), which flavour of a
stack fits this host (cuda where there are GPUs, cpu otherwise), and whether the devices asked for
per node are there.

A host's count is what `nvidia-smi -L` lists, narrowed by CUDA_VISIBLE_DEVICES where that is set
(SLURM sets it for the GPUs of a job step); no nvidia-smi means no GPU."""

import os
import subprocess

from suite.base.errors import UsageError

FLAVOURS = ("cpu", "cuda")
# The probe a host runs: nvidia-smi's list (or a line saying there is none), then what the process
# may use. One short command, the same here, over ssh and as a SLURM step.
PROBE_SCRIPT = ('if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>/dev/null; '
                'else echo "no nvidia-smi"; fi; echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"')
PROBE = ("sh", "-c", PROBE_SCRIPT)


def count_from_probe(text: str) -> int:
    """GPUs in a probe's output: nvidia-smi's `GPU n: ...` lines, at most as many as the process may
    use (CUDA_VISIBLE_DEVICES, where set)."""
    lines = text.splitlines()
    listed = sum(line.startswith("GPU ") for line in lines)
    visible = next((line.split("=", 1)[1] for line in lines if line.startswith("CUDA_VISIBLE_DEVICES=")), "(unset)")
    if visible == "(unset)":
        return listed
    allowed = [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    return min(listed, len(allowed))


def host_gpus() -> int:
    """NVIDIA GPUs this process may use on this host."""
    try:
        done = subprocess.run(PROBE, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return count_from_probe(done.stdout)


def pick_flavour(requested: str | None = None, gpus: int | None = None) -> str:
    """The stack flavour to use: the one asked for (FLAVOUR / --flavour), else cuda where the host
    has GPUs (`gpus`, else this host's count) and cpu where it has none."""
    if requested and requested not in FLAVOURS:
        raise UsageError(f"FLAVOUR must be one of {', '.join(FLAVOURS)}, got '{requested}'")
    if requested:
        return requested
    return "cuda" if (host_gpus() if gpus is None else gpus) else "cpu"


def check_devices(asked: dict[str, int], found: dict[str, int | None], given: str) -> None:
    """Refuses more devices per node than a GPU host has (host -> asked, host -> found; None: not
    known). A host without GPUs runs its devices as worker processes: any count is fine there."""
    for host, count in asked.items():
        have = found.get(host)
        if have and count > have:
            raise UsageError(f"{given}={count} but host {host} has {have} GPU(s) (nvidia-smi -L"
                             f"{', CUDA_VISIBLE_DEVICES' if os.environ.get('CUDA_VISIBLE_DEVICES') else ''}); "
                             f"ask for at most {have}")

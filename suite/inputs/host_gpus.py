"""The NVIDIA GPUs of a host, as the runner needs them before launch: how many each host of a plan
has (one short probe per host: directly here, through the scheduler elsewhere), which flavour of a
stack fits this host (cuda where there are GPUs, cpu otherwise), and whether the devices asked for
per node are there.

A host's count is what `nvidia-smi -L` lists, narrowed by CUDA_VISIBLE_DEVICES where that is set
(SLURM sets it for the GPUs of a job step). No nvidia-smi and no NVIDIA device file means no GPU; a
probe that fails (nvidia-smi exits non-zero, or NVIDIA devices without an nvidia-smi to count them) is
an error naming the host and what the probe said, never a host without GPUs."""

import os
import subprocess

from suite.base.errors import UsageError

FLAVOURS = ("cpu", "cuda")
# The probe a host runs: nvidia-smi's list (or a line saying there is none), then what the process
# may use. One short command, the same here, over ssh and as a SLURM step.
PROBE_SCRIPT = ('if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>&1; echo "nvidia-smi exit=$?"; '
                'else echo "no nvidia-smi"; fi; echo "nvidia devices=$(ls /dev | grep -c \'^nvidia[0-9][0-9]*$\')"; '
                'echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"')
PROBE = ("sh", "-c", PROBE_SCRIPT)
NO_DEVICES_FOUND = "6"  # nvidia-smi's exit status for "No devices were found": a driver, and no GPU to use


class GpuProbeError(UsageError):
    """A host's GPUs could not be counted: the probe's failure, in one line."""


def probe_failure(text: str, host: str) -> str | None:
    """What went wrong with a host's probe, or None where it counted its GPUs (or found none to count)."""
    lines = text.splitlines()
    status = next((line.split("=", 1)[1] for line in lines if line.startswith("nvidia-smi exit=")), "0")
    if status not in ("0", NO_DEVICES_FOUND):
        said = next((line.strip() for line in lines if line.strip() and "=" not in line), "no output")
        return f"the GPU probe on {host} failed: nvidia-smi -L exited {status}: {said}"
    devices = next((line.split("=", 1)[1] for line in lines if line.startswith("nvidia devices=")), "0")
    if "no nvidia-smi" in lines and devices.strip() not in ("", "0"):
        return (f"host {host} has {devices.strip()} NVIDIA device(s) (/dev/nvidia*) but no nvidia-smi on its PATH: "
                "its GPUs cannot be counted (install the NVIDIA driver's tools, or put nvidia-smi on PATH)")
    return None


def count_from_probe(text: str, host: str = "this host") -> int:
    """GPUs in a probe's output: nvidia-smi's `GPU n: ...` lines, at most as many as the process may
    use (CUDA_VISIBLE_DEVICES, where set); GpuProbeError where the probe failed."""
    if failure := probe_failure(text, host):
        raise GpuProbeError(failure)
    lines = text.splitlines()
    listed = sum(line.startswith("GPU ") for line in lines)
    visible = next((line.split("=", 1)[1] for line in lines if line.startswith("CUDA_VISIBLE_DEVICES=")), "(unset)")
    if visible == "(unset)":
        return listed
    allowed = [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    return min(listed, len(allowed))


def host_gpus() -> int:
    """NVIDIA GPUs this process may use on this host (GpuProbeError where they cannot be counted)."""
    try:
        done = subprocess.run(PROBE, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuProbeError(f"the GPU probe on this host failed: {type(exc).__name__}: {exc}") from None
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

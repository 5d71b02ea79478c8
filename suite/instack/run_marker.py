"""The marker every process of a run carries: SUITE_RUN_DIR=<repetition folder> in its environment
(suite/execution/plan.py), inherited by whatever it starts. The telemetry sampler and the runner's
stray sweep both find a run's processes by it."""


def carries(pid: int, variable: bytes) -> bool:
    """Whether the environment of process pid holds `variable` (b"NAME=value") exactly."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return variable in f.read().split(b"\0")
    except OSError:  # ended meanwhile, or not ours to read
        return False

"""A stand-in nvidia-smi, put first on PATH in addition to the real CPU runs."""

from pathlib import Path

GPU_LINE = "GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i}0000000-0000-0000-0000-000000000000)"


def fake_nvidia_smi(folder: Path, count: int) -> Path:
    """An nvidia-smi that lists `count` GPUs, first on PATH (in addition to the real CPU runs)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(GPU_LINE.format(i=i) for i in range(count))
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{lines}\nEOF\n")
    script.chmod(0o755)
    return folder

"""A stand-in nvidia-smi, put first on PATH in addition to the real CPU runs."""

from pathlib import Path

GPU_LINE = "GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i}0000000-0000-0000-0000-000000000000)"
# nvidia-smi --query-gpu=index,uuid,pci.bus_id,name --format=csv,noheader (suite.instack.probe.visible_gpu)
QUERY_LINE = "{i}, GPU-{i}0000000-0000-0000-0000-000000000000, 00000000:{bus:02X}:00.0, NVIDIA H100 80GB HBM3"


def fake_nvidia_smi(folder: Path, count: int) -> Path:
    """An nvidia-smi that lists `count` GPUs (`-L`, and any other call but the query of the GPUs'
    index, UUID and bus id, which it answers as the real one does), first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(GPU_LINE.format(i=i) for i in range(count))
    query = "\n".join(QUERY_LINE.format(i=i, bus=0x18 + i) for i in range(count))
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      f"if [ \"$1\" = \"--query-gpu=index,uuid,pci.bus_id,name\" ]; then\ncat <<'EOF'\n{query}\nEOF\n"
                      f"else\ncat <<'EOF'\n{lines}\nEOF\nfi\n")
    script.chmod(0o755)
    return folder

"""The SIF file and the program that runs it: where a stack's image is, its metadata beside it, and the
checks of the file itself before a run (readable, a SIF, the size it was built with)."""

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from suite.base.errors import UsageError
from suite.stacks import images

SIF_MAGIC = b"SIF_MAGIC"  # at byte 32 of every SIF file, after its launch line


def found_program() -> str | None:
    return os.environ.get("SUITE_APPTAINER") or shutil.which("apptainer") or shutil.which("singularity")


def apptainer_program() -> str:
    tool = found_program()
    if not tool:
        raise UsageError("RUNTIME=apptainer needs `apptainer` (or `singularity`) on PATH on this host")
    return tool


@functools.cache
def runtime_version(tool: str) -> str | None:
    """`apptainer --version`'s number (1.4.5), or None when it does not answer."""
    try:
        said = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"(\d+\.\d+[\w.+-]*)", said)
    return found.group(1) if found else None


def image_path(stack: str, flavour: str, image_dir: Path | None = None) -> Path:
    if os.environ.get("SUITE_IMAGE"):
        return Path(os.environ["SUITE_IMAGE"])
    return Path(image_dir or images.build_dir()) / f"{stack}-{flavour}.sif"


def meta_path(image: Path | str) -> Path:
    return Path(f"{image}.json")


def check_sif(image: Path, meta: dict, build_hint: str) -> None:
    """Refuses an image that cannot be read, is no SIF, or is not the size it was built with (a copy
    cut short, or a file replaced since): every rank would fail on it, each in its own way."""
    try:
        with open(image, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise UsageError(f"cannot read the image {image} ({exc.strerror})") from None
    if head[32:32 + len(SIF_MAGIC)] != SIF_MAGIC:
        raise UsageError(f"{image} is not a SIF image (no SIF header): rebuild it with `{build_hint}`")
    built, size = meta.get("image_bytes"), image.stat().st_size
    if built is not None and size != built:
        raise UsageError(f"{image} has {size} bytes, not the {built} it was built with (cut short or replaced): "
                         f"rebuild it with `{build_hint}`")

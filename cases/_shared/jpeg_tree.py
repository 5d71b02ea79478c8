"""A small ImageNet-style tree of generated JPEGs (<split>/<wnid-like class>/<class>_<n>.JPEG), for
the cases' `make data ... SYNTHETIC=1`: mxnet-imagenet packs it into RecordIO, pytorch-ddp reads it
as class folders. Needs numpy and Pillow (both stacks have them)."""

from pathlib import Path

import numpy as np
from PIL import Image


def write_synthetic_tree(root: Path, classes: int, per_split: dict, seed: int) -> None:
    """ImageNet-like layout (wnid-style class folders, <wnid>_<n>.JPEG) with varied image sizes."""
    rng = np.random.default_rng(seed)
    for split, count in per_split.items():
        for c in range(classes):
            folder = root / split / f"n{c:08d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                width, height = (int(v) for v in rng.integers(160, 400, size=2))
                synthetic_image(rng, c, width, height).save(folder / f"n{c:08d}_{i}.JPEG", quality=90)


def synthetic_image(rng, label: int, width: int, height: int) -> Image.Image:
    """A smooth class-coloured gradient with mild noise: compresses like a photo, not like noise."""
    base = np.array([(37 * label) % 256, (91 * label + 80) % 256, (53 * label + 160) % 256], dtype=np.float32)
    ramp = np.linspace(-60, 60, width, dtype=np.float32)[None, :, None]
    pixels = base + ramp + rng.normal(0, 8, size=(height, width, 3)).astype(np.float32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")

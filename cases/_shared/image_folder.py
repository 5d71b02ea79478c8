"""Class folders of JPEGs read for training, framework-free (pytorch-ddp's DataLoader workers and
jax-resnet's decoding threads call the same code): every (path, class index) under root/<class>/ with
the classes in sorted order, and one image decoded by Pillow with a random-resized crop to the image
size and a horizontal flip (torchvision's RandomResizedCrop, with its scale and ratio ranges), as uint8
HWC. ImageNet's mean and deviation, on 0..255 pixels, for the normalisation each case does itself."""

import json
import math
import os
from pathlib import Path

import numpy as np
from PIL import Image

from cases._shared.jpeg_tree import EXTENSIONS

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def train_root() -> str:
    """Where the case reads its training images: $SUITE_DATA_DIR/imagefolder/train."""
    return str(tree_folder() / "train")


def tree_folder() -> Path:
    return Path(os.environ.get("SUITE_DATA_DIR", "data")) / "imagefolder"


def folder_facts() -> dict:
    """What data runs, for the record: the tree the case reads and what its manifest says."""
    folder = tree_folder()
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    label = "imagefolder-synthetic" if manifest.get("synthetic") else "imagefolder"
    return {"data": label, "data_path": str((folder / "train").resolve()), "data_source": manifest.get("source")}


def list_samples(root: str) -> tuple[list[str], list[tuple[str, int]]]:
    """The class names and every (path, class index) under root/<class>/, both in sorted order."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    samples = [(os.path.join(root, name, file), label) for label, name in enumerate(classes)
               for file in sorted(os.listdir(os.path.join(root, name)))
               if os.path.splitext(file)[1].lower() in EXTENSIONS]
    return classes, samples


def load_crop(path: str, size: int, rng) -> np.ndarray:
    """The image at path as RGB, a random-resized crop of it scaled to size x size, flipped with
    probability 1/2 (rng: a random.Random); uint8 HWC."""
    with Image.open(path) as image:
        image = image.convert("RGB")
        box = random_resized_box(*image.size, rng)
        image = image.resize((size, size), Image.BILINEAR, box=box)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(image)


def random_resized_box(width: int, height: int, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)) -> tuple[int, ...]:
    """A crop of scale x the area and an aspect ratio in `ratio` (log-uniform); after 10 misses the
    central crop closest to `ratio` (torchvision's RandomResizedCrop.get_params)."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left, top = rng.randint(0, width - w), rng.randint(0, height - h)
            return left, top, left + w, top + h
    w, h = width, height
    if width / height < ratio[0]:
        h = round(width / ratio[0])
    elif width / height > ratio[1]:
        w = round(height * ratio[1])
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h

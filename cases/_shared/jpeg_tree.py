"""Trees of class folders of JPEGs, as the image cases' data scripts read, link or generate them
(mxnet-imagenet packs one into RecordIO, pytorch-ddp reads one as class folders): the arguments both
scripts take, where a source's splits are, a generated ImageNet-style tree for `make data ...
SYNTHETIC=1`, and (from cases/_shared/folders.py) a folder made beside its final place and swapped in
at the end. Needs numpy and Pillow (both stacks have them)."""

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

from cases._shared.folders import swapped_in  # noqa: F401 (the image data scripts import it from here)
from suite.instack.arguments import data_parser

EXTENSIONS = {".jpg", ".jpeg", ".png"}


def tree_arguments(case: str, description: str, train_per_class: int,
                   seed_help: str = "synthetic: seed of the pixels and sizes") -> argparse.ArgumentParser:
    """The arguments of a data script that links a tree (--src) or generates one (--synthetic)."""
    parser = data_parser(case, description)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--src", type=Path, help="folder of class folders of JPEGs (optionally under train/ and val/)")
    parser.add_argument("--synthetic", action="store_true", help="generate a small JPEG tree")
    parser.add_argument("--classes", type=int, default=10, help="synthetic: number of classes")
    parser.add_argument("--train-per-class", type=int, default=train_per_class,
                        help="synthetic: training images per class")
    parser.add_argument("--val-per-class", type=int, default=4, help="synthetic: validation images per class")
    parser.add_argument("--seed", type=int, default=100, help=seed_help)
    return parser


def check_tree_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.synthetic == bool(args.src):
        parser.error("give exactly one of --src FOLDER (SRC=...) or --synthetic (SYNTHETIC=1)")
    if args.src and not args.src.is_dir():
        parser.error(f"--src {args.src} is not a folder")
    if min(args.classes, args.train_per_class) < 1 or args.val_per_class < 0:
        parser.error("--classes and --train-per-class must be at least 1, --val-per-class at least 0")


def source_splits(src: Path) -> dict[str, Path]:
    """TREE/{train,val}/<class>/*.JPEG (val where there is one), or TREE/<class>/*.JPEG as train (a folder:
    check_tree_arguments refused anything else)."""
    if not (src / "train").is_dir():
        return {"train": src}
    return {name: src / name for name in ("train", "val") if (src / name).is_dir()}


def write_synthetic_tree(root: Path, args: argparse.Namespace) -> None:
    """ImageNet-like layout (wnid-style class folders, <wnid>_<n>.JPEG) with varied image sizes:
    --classes classes, --train-per-class and --val-per-class images (a split of 0 is left out)."""
    rng = np.random.default_rng(args.seed)
    per_split = {"train": args.train_per_class, "val": args.val_per_class}
    for split, count in ((k, v) for k, v in per_split.items() if v > 0):
        for c in range(args.classes):
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



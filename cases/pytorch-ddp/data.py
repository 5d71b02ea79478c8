"""pytorch-ddp data: class folders of JPEGs under D/imagefolder/train (and val/ where there is one).

    data.py --data-dir D --synthetic    writes a small ImageNet-style tree there (mxnet-imagenet's generator)
    data.py --data-dir D --src TREE     links a real one: TREE/{train,val}/<class>/*.JPEG or TREE/<class>/*.JPEG
                                        (Imagewoof, Imagenette, ImageNet's CLS-LOC); nothing is copied

D/imagefolder/manifest.json says what is there (source, synthetic or not, classes, images per split).
Runs inside the pytorch stack.
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from cases._shared.jpeg_tree import write_synthetic_tree

FOLDER = "imagefolder"
EXTENSIONS = {".jpg", ".jpeg", ".png"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pytorch-ddp data", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--src", type=Path, help="folder of class folders of JPEGs (optionally under train/ and val/)")
    parser.add_argument("--synthetic", action="store_true", help="generate a small JPEG tree")
    parser.add_argument("--classes", type=int, default=10, help="synthetic: number of classes")
    parser.add_argument("--train-per-class", type=int, default=32, help="synthetic: training images per class")
    parser.add_argument("--val-per-class", type=int, default=4, help="synthetic: validation images per class")
    parser.add_argument("--seed", type=int, default=100, help="synthetic: seed of the pixels and sizes")
    args = parser.parse_args(argv)
    if args.synthetic == bool(args.src):
        parser.error("give exactly one of --src FOLDER (SRC=...) or --synthetic (SYNTHETIC=1)")
    if min(args.classes, args.train_per_class) < 1 or args.val_per_class < 0:
        parser.error("--classes and --train-per-class must be at least 1, --val-per-class at least 0")
    return args


def count_images(split: Path) -> tuple[int, int]:
    """(class folders, images) of one split."""
    classes = [d for d in split.iterdir() if d.is_dir()]
    images = sum(1 for d in classes for f in d.iterdir() if f.suffix.lower() in EXTENSIONS)
    return len(classes), images


def source_splits(src: Path) -> dict[str, Path]:
    if not src.is_dir():
        sys.exit(f"error: --src {src} is not a folder")
    if not (src / "train").is_dir():
        return {"train": src}
    return {name: src / name for name in ("train", "val") if (src / name).is_dir()}


def write_manifest(folder: Path, source: str, synthetic: bool) -> dict:
    splits = {}
    for split in sorted(p for p in folder.iterdir() if p.is_dir()):
        classes, images = count_images(split)
        splits[split.name] = {"classes": classes, "images": images}
    if not splits.get("train", {}).get("images"):
        sys.exit(f"error: no JPEG images in class folders under {folder / 'train'}")
    manifest = {"source": source, "synthetic": synthetic, "splits": splits,
                "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv=None) -> None:
    args = parse_args(argv)
    out = args.data_dir.resolve() / FOLDER
    splits = source_splits(args.src) if args.src else {}
    # Made beside the final folder and swapped in at the end: a failure leaves no half set.
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if args.synthetic:
        per_split = {"train": args.train_per_class, "val": args.val_per_class}
        write_synthetic_tree(partial, args.classes, {k: v for k, v in per_split.items() if v > 0}, args.seed)
        source = "synthetic-imagenet-jpeg"
    else:
        for name, folder in splits.items():
            (partial / name).symlink_to(folder.resolve(), target_is_directory=True)
        source = str(args.src.resolve())
    manifest = write_manifest(partial, source, args.synthetic)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    shown = ", ".join(f"{k}: {v['images']} images in {v['classes']} classes" for k, v in manifest["splits"].items())
    print(f"{out}: {shown} (from {source})", flush=True)


if __name__ == "__main__":
    main()

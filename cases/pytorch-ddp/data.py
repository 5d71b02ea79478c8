"""pytorch-ddp data: class folders of JPEGs under D/imagefolder/train (and val/ where there is one).

    data.py --data-dir D --synthetic    writes a small ImageNet-style tree there (mxnet-imagenet's generator)
    data.py --data-dir D --src TREE     links a real one: TREE/{train,val}/<class>/*.JPEG or TREE/<class>/*.JPEG
                                        (Imagewoof, Imagenette, ImageNet's CLS-LOC); nothing is copied

D/imagefolder/manifest.json says what is there (source, synthetic or not, classes, images per split).
Runs inside the pytorch stack.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from cases._shared.jpeg_tree import (
    EXTENSIONS,
    check_tree_arguments,
    source_splits,
    swapped_in,
    tree_arguments,
    write_synthetic_tree,
)

FOLDER = "imagefolder"


def parse_args(argv=None) -> argparse.Namespace:
    parser = tree_arguments("pytorch-ddp", __doc__.split("\n")[0], train_per_class=32)
    args = parser.parse_args(argv)
    check_tree_arguments(parser, args)
    return args


def count_images(split: Path) -> tuple[int, int]:
    """(class folders, images) of one split."""
    classes = [d for d in split.iterdir() if d.is_dir()]
    images = sum(1 for d in classes for f in d.iterdir() if f.suffix.lower() in EXTENSIONS)
    return len(classes), images


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
    with swapped_in(out) as partial:
        if args.synthetic:
            write_synthetic_tree(partial, args)
            source = "synthetic-imagenet-jpeg"
        else:
            for name, folder in splits.items():
                (partial / name).symlink_to(folder.resolve(), target_is_directory=True)
            source = str(args.src.resolve())
        manifest = write_manifest(partial, source, args.synthetic)
    shown = ", ".join(f"{k}: {v['images']} images in {v['classes']} classes" for k, v in manifest["splits"].items())
    print(f"{out}: {shown} (from {source})", flush=True)


if __name__ == "__main__":
    main()

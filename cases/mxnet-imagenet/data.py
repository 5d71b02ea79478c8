"""mxnet-imagenet data: pack a tree of class folders of JPEGs into MXNet RecordIO, as im2rec does.

    data.py --data-dir D --src TREE     TREE/{train,val}/<class>/*.JPEG, or TREE/<class>/*.JPEG (train only)
    data.py --data-dir D --synthetic    first writes a small ImageNet-style tree under D, then packs it

Output: D/imagenet-rec/{train,val}.{lst,rec,idx} and manifest.json. Classes are numbered in sorted
order of their folder names; every image is re-encoded as JPEG with its shorter side resized.
Runs inside the mxnet stack.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from pathlib import Path

import mxnet as mx
from PIL import Image

from cases._shared.jpeg_tree import (
    EXTENSIONS,
    check_tree_arguments,
    source_splits,
    swapped_in,
    tree_arguments,
    write_synthetic_tree,
)

REC_DIR = "imagenet-rec"
SYNTHETIC_DIR = "imagenet-synthetic-jpeg"


class PackError(Exception):
    pass


def parse_args(argv=None) -> argparse.Namespace:
    parser = tree_arguments("mxnet-imagenet", __doc__.split("\n")[0], train_per_class=20,
                            seed_help="shuffle order of the training list (and synthetic pixels)")
    parser.add_argument("--resize", type=int, default=480,
                        help="shorter side in pixels after packing (im2rec --resize)")
    parser.add_argument("--quality", type=int, default=95, help="JPEG quality of the packed images")
    parser.add_argument("--num-thread", type=int, default=os.cpu_count() or 1, help="encoding threads")
    args = parser.parse_args(argv)
    check_tree_arguments(parser, args)
    if min(args.resize, args.num_thread) < 1:
        parser.error("--resize and --num-thread must be at least 1")
    if not 1 <= args.quality <= 100:
        parser.error("--quality must be between 1 and 100")
    return args


def list_images(folder: Path, classes: list[str]) -> list[tuple[int, str]]:
    """(label, path relative to folder) for each image; labels are positions in `classes` (sorted)."""
    unknown = sorted({p.name for p in folder.iterdir() if p.is_dir()} - set(classes))
    if unknown:
        sys.exit(f"error: {folder} has class folder(s) not in the training set: {', '.join(unknown[:3])}")
    items = []
    for label, name in enumerate(classes):
        if (folder / name).is_dir():
            files = sorted(p for p in (folder / name).iterdir() if p.suffix.lower() in EXTENSIONS)
            items += [(label, f"{name}/{p.name}") for p in files]
    return items


def encode(path: Path, resize: int, quality: int) -> bytes:
    """The image as JPEG bytes, its shorter side scaled to `resize` (up or down, as im2rec does)."""
    try:
        with Image.open(path) as img:
            img = img.convert("RGB")
            width, height = img.size
            scale = resize / min(width, height)
            size = (resize, round(height * scale)) if width <= height else (round(width * scale), resize)
            out = BytesIO()
            img.resize(size, Image.BILINEAR).save(out, format="JPEG", quality=quality)
    except (OSError, ValueError) as exc:
        raise PackError(f"cannot pack {path}: {exc}") from None
    return out.getvalue()


def encoded_in_order(items: list[tuple[int, str]], folder: Path, args):
    """JPEG bytes of each item, in list order, encoded by --num-thread threads a window at a time
    (so that a million-image list does not become a million pending futures)."""
    window = 64 * args.num_thread
    with ThreadPoolExecutor(args.num_thread) as pool:
        for start in range(0, len(items), window):
            chunk = items[start:start + window]
            yield from pool.map(lambda item: encode(folder / item[1], args.resize, args.quality), chunk)


def pack(folder: Path, items: list[tuple[int, str]], prefix: Path, args) -> dict:
    """Writes prefix.lst (index, label, path), then prefix.rec/.idx with MXNet's indexed RecordIO."""
    with open(prefix.with_suffix(".lst"), "w") as lst:
        lst.writelines(f"{index}\t{float(label):f}\t{rel}\n" for index, (label, rel) in enumerate(items))
    record = mx.recordio.MXIndexedRecordIO(str(prefix.with_suffix(".idx")), str(prefix.with_suffix(".rec")), "w")
    started = time.time()
    for index, ((label, _), jpeg) in enumerate(zip(items, encoded_in_order(items, folder, args))):
        header = mx.recordio.IRHeader(flag=0, label=float(label), id=index, id2=0)
        record.write_idx(index, mx.recordio.pack(header, jpeg))
        if (index + 1) % 10000 == 0:
            print(f"  {prefix.name}: {index + 1}/{len(items)} images", flush=True)
    record.close()
    seconds = time.time() - started
    print(f"{prefix.name}: {len(items)} images packed in {seconds:.1f} s -> {prefix.with_suffix('.rec')}", flush=True)
    return {"images": len(items), "rec_bytes": prefix.with_suffix(".rec").stat().st_size,
            "idx_sha256": hashlib.sha256(prefix.with_suffix(".idx").read_bytes()).hexdigest()}


def pack_tree(splits: dict[str, Path], out: Path, args, source: str) -> dict:
    classes = sorted(p.name for p in splits["train"].iterdir() if p.is_dir())
    if not classes:
        sys.exit(f"error: {splits['train']} has no class folders")
    manifest = {"source": source, "synthetic": args.synthetic, "classes": len(classes), "resize": args.resize,
                "quality": args.quality, "packed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "splits": {}}
    with swapped_in(out) as partial:
        for split, folder in splits.items():
            items = list_images(folder, classes)
            if not items:
                sys.exit(f"error: no JPEG images under {folder}")
            if split == "train":
                random.Random(args.seed).shuffle(items)  # im2rec shuffles its lists too
            manifest["splits"][split] = pack(folder, items, partial / split, args)
        (partial / "class_names.txt").write_text("\n".join(classes) + "\n")
        (partial / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv=None) -> None:
    args = parse_args(argv)
    data_dir = args.data_dir.resolve()
    if args.synthetic:
        src = data_dir / SYNTHETIC_DIR
        shutil.rmtree(src, ignore_errors=True)
        write_synthetic_tree(src, args)
        print(f"synthetic JPEG tree: {args.classes} classes under {src}", flush=True)
        source = "synthetic-imagenet-jpeg"
    else:
        src, source = args.src.resolve(), str(args.src.resolve())
    try:
        pack_tree(source_splits(src), data_dir / REC_DIR, args, source)
    except PackError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()

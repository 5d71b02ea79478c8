"""Prepares CIFAR-10 for tf-cifar under <data dir>/cifar-10-batches-py (run by `make data CASE=tf-cifar`).

Default: download the official archive (or take it from --src), check its published MD5, unpack it.
--synthetic: write a small generated set in the same format, for machines without the data.
"""

import argparse
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import cifar

from suite.instack.arguments import data_parser
from suite.instack.file_digest import file_digest

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
MD5 = "c58f30108f718f92721af3b95e74349a"  # published on https://www.cs.toronto.edu/~kriz/cifar.html
ARCHIVE = "cifar-10-python.tar.gz"
TIMEOUT_S = 20


class Refused(Exception):
    pass


def parse_args(argv=None) -> argparse.Namespace:
    parser = data_parser("tf-cifar", __doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--synthetic", action="store_true", help="generate a small set in the CIFAR-10 format")
    parser.add_argument("--src", type=Path, help="a copy of cifar-10-python.tar.gz to unpack instead of downloading")
    parser.add_argument("--train-per-batch", type=int, default=100,
                        help="synthetic: images per training batch (5 batches)")
    parser.add_argument("--test-images", type=int, default=100, help="synthetic: images in test_batch")
    args = parser.parse_args(argv)
    if args.train_per_batch < 1 or args.test_images < 1:
        parser.error("--train-per-batch and --test-images must be at least 1")
    if args.src and not args.src.is_file():
        parser.error(f"--src {args.src}: no such file")
    return args


def has_real_set(folder: Path) -> bool:
    return all((folder / name).exists() for name in cifar.FILES) and not cifar.is_synthetic(folder)


def make_synthetic(folder: Path, per_batch: int, test: int) -> None:
    if (folder / cifar.META).exists() and not cifar.is_synthetic(folder):
        raise Refused(f"{folder} holds the real CIFAR-10; not replacing it with generated data "
                      "(choose another DATA_DIR)")
    cifar.write_synthetic(folder, per_batch, test)
    print(f"wrote a synthetic CIFAR-format set to {folder}: {5 * per_batch} training and {test} test images "
          f"(records say data '{cifar.SYNTHETIC}')")


def download(target: Path) -> None:
    partial = target.with_name(target.name + ".part")
    print(f"downloading {URL} ...", flush=True)
    try:
        with urllib.request.urlopen(URL, timeout=TIMEOUT_S) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        reason = getattr(exc, "reason", None) or exc
        raise Refused(f"cannot download {URL} ({reason}). This step needs internet access, which compute nodes "
                      f"often lack: run it on a login node, or fetch the archive elsewhere and pass "
                      f"SRC=/path/to/{ARCHIVE}; SYNTHETIC=1 generates a small set in the same format") from None
    partial.rename(target)


def fetch_archive(data_dir: Path, src: Path | None) -> Path:
    if src is not None:  # a file: parse_args refused anything else
        archive = src
    else:
        archive = data_dir / ARCHIVE
        if not archive.exists():
            download(archive)
    found = file_digest(archive, "md5")
    if found != MD5:
        raise Refused(f"{archive}: MD5 {found} is not the published {MD5} (damaged or a different file; delete it "
                      "and run again)")
    return archive


def unpack(archive: Path, data_dir: Path, folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)  # only a generated set gets here (a real one returns earlier)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(data_dir, filter="data")
    missing = [name for name in cifar.FILES if not (folder / name).exists()]
    if missing:
        raise Refused(f"{archive} unpacked without {', '.join(missing)} under {folder}")


def make_real(data_dir: Path, folder: Path, src: Path | None) -> None:
    if has_real_set(folder):
        print(f"CIFAR-10 already prepared in {folder}")
        return
    archive = fetch_archive(data_dir, src)
    unpack(archive, data_dir, folder)
    print(f"CIFAR-10 unpacked to {folder} (archive MD5 {MD5} checked)")


def main(argv=None) -> int:
    args = parse_args(argv)
    data_dir = args.data_dir
    folder = data_dir / cifar.FOLDER
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        if args.synthetic:
            make_synthetic(folder, args.train_per_batch, args.test_images)
        else:
            make_real(data_dir, folder, args.src)
    except (Refused, cifar.DataError, OSError, tarfile.TarError) as exc:
        print(f"error: make data CASE=tf-cifar: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

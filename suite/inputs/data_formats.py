"""The formats of the files a case reads, checked before launch: cheap looks that find a wrong or damaged
file in one line, where the ranks would stop with a traceback. A case names the format of each path in
its case.toml ([data] formats); what only the ranks can see (a token id beyond the vocabulary in a file
too large to scan here) the case's script checks itself.

Each check returns None, or what is wrong with the file in words."""

import io
import os
import pickle
from pathlib import Path

from suite.base.errors import UsageError

RECORDIO_MAGIC = 0xCED7230A
JPEG_START, PNG_START = b"\xff\xd8\xff", b"\x89PNG"
IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png"}
CIFAR_ROW = 3 * 32 * 32
CIFAR_CLASSES = 10
DEFAULT_SCAN_BYTES = 256 * 2**20


def scan_bytes() -> int:
    """How much of a token file the check reads for ids beyond the vocabulary (SUITE_DATA_SCAN_BYTES, default 256
    MiB): a larger file is left to the ranks, which check every batch they read."""
    text = os.environ.get("SUITE_DATA_SCAN_BYTES", str(DEFAULT_SCAN_BYTES))
    if not text.isdigit():
        raise UsageError(f"SUITE_DATA_SCAN_BYTES must be a number of bytes (0 or more), got '{text}'")
    return int(text)


def uint16_tokens(path: Path, vocab: int | None = None) -> str | None:
    size = path.stat().st_size
    if size == 0:
        return "is empty: no token ids"
    if size % 2:
        return f"holds {size} bytes, an odd number: not a file of uint16 token ids"
    if vocab is None or size > scan_bytes():
        return None
    import numpy as np

    tokens = np.fromfile(path, dtype=np.uint16)
    if int(tokens.max()) >= vocab:
        at = int(np.argmax(tokens >= vocab))
        return f"holds token id {int(tokens[at])} (token {at}), beyond --vocab-size {vocab}"
    return None


def recordio(path: Path) -> str | None:
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) < 8 or int.from_bytes(head[:4], "little") != RECORDIO_MAGIC:
        return f"does not start with MXNet RecordIO's magic number {RECORDIO_MAGIC:#x} (starts with '{head[:4].hex()}')"
    length = int.from_bytes(head[4:], "little") & ((1 << 29) - 1)
    if 8 + length > path.stat().st_size:
        return f"its first record claims {length} bytes, more than the file holds: a truncated RecordIO file"
    return None


def recordio_index(path: Path) -> str | None:
    with open(path, errors="replace") as f:
        first = f.readline()
    fields = first.split("\t")
    if len(fields) != 2 or not all(field.strip().isdigit() for field in fields):
        return f"is not a RecordIO index (lines of 'index<TAB>offset'): its first line is {first.strip()[:60]!r}"
    return None


class _ArraysOnly(pickle.Unpickler):
    """Unpickles lists, dicts and numpy arrays, nothing that could run code."""

    def find_class(self, module, name):
        numpy_part = module.split(".")[0] == "numpy" and name in {"_reconstruct", "ndarray", "dtype", "scalar"}
        if numpy_part or (module, name) == ("_codecs", "encode"):  # protocol 2 pickles bytes through _codecs.encode
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a CIFAR batch")


def cifar_batch(path: Path) -> str | None:
    import numpy as np

    try:
        batch = _ArraysOnly(io.BytesIO(path.read_bytes()), encoding="bytes").load()
        rows, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError) as exc:
        return f"is not a CIFAR-10 python batch ({type(exc).__name__}: {exc})"
    if rows.ndim != 2 or rows.shape[1] != CIFAR_ROW or len(rows) != len(labels) or not len(rows):
        return (f"is not a CIFAR-10 python batch: {rows.shape} pixel rows and {labels.shape} labels, "
                "expected (n, 3072) and (n,)")
    if labels.min() < 0 or labels.max() >= CIFAR_CLASSES:
        return f"holds labels outside 0..{CIFAR_CLASSES - 1}"
    return None


def image_tree(path: Path) -> str | None:
    classes = sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []
    if not classes:
        return "is not a folder of class folders"
    for folder in classes:
        images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
        if not images:
            return f"has a class folder without images: {folder.name}"
        with open(images[0], "rb") as f:
            start = f.read(4)
        if not (start.startswith(JPEG_START) or start == PNG_START):
            return (f"holds {images[0].relative_to(path)}, which is neither a JPEG nor a PNG "
                    f"(starts with '{start.hex()}')")
    return None


FORMATS = {"uint16-tokens": uint16_tokens, "recordio": recordio, "recordio-index": recordio_index,
           "cifar-batch": cifar_batch, "image-tree": image_tree}


def format_problem(kind: str, path: Path, **limits) -> str | None:
    """What is wrong with `path` as a file (or folder) of format `kind` (`limits`: e.g. vocab, the bound of
    token ids), or None."""
    return FORMATS[kind](path, **limits)

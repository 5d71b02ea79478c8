"""The CIFAR-10 "python version" on disk: a folder of pickled batches (data_batch_1..5, test_batch,
batches.meta). Reading, writing (for the generated set) and fingerprints; numpy and stdlib only."""

import hashlib
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
META = "batches.meta"
FILES = (*TRAIN_BATCHES, TEST_BATCH, META)
LABEL_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SIDE = 32
SYNTHETIC = "synthetic-cifar-format"


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # uint8, (n, 32, 32, 3), channels last
    labels: np.ndarray  # int32, (n,)


@dataclass(frozen=True)
class Cifar:
    folder: Path
    train: Split
    test: Split
    synthetic: bool

    @property
    def source(self) -> str:
        """What the record's config.data says."""
        return SYNTHETIC if self.synthetic else "cifar-10"


class DataError(RuntimeError):
    pass


def _unpickle(path: Path) -> dict:
    # The official files were pickled by Python 2: keys come back as bytes.
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="bytes")
    except FileNotFoundError:
        raise DataError(f"{path} is missing (run 'make data CASE=tf-cifar', "
                        "SYNTHETIC=1 for a small generated set)") from None
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise DataError(f"{path} is not a CIFAR-10 python batch: {exc}") from None


def read_batch(path: Path) -> Split:
    batch = _unpickle(path)
    try:
        rows, labels = np.asarray(batch[b"data"], dtype=np.uint8), np.asarray(batch[b"labels"], dtype=np.int32)
    except KeyError as exc:
        raise DataError(f"{path}: no {exc.args[0]!r} entry in the batch") from None
    if rows.ndim != 2 or rows.shape[1] != 3 * SIDE * SIDE or len(rows) != len(labels):
        raise DataError(f"{path}: expected (n, 3072) pixel rows and n labels, got {rows.shape} and {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= len(LABEL_NAMES)):
        raise DataError(f"{path}: labels outside 0..{len(LABEL_NAMES) - 1}")
    # Each row holds the red plane, then green, then blue, each row-major: to (n, 32, 32, 3).
    images = rows.reshape(-1, 3, SIDE, SIDE).transpose(0, 2, 3, 1)
    return Split(np.ascontiguousarray(images), labels)


def _concat(splits: list[Split]) -> Split:
    return Split(np.concatenate([s.images for s in splits]), np.concatenate([s.labels for s in splits]))


def load(folder: str | Path) -> Cifar:
    folder = Path(folder)
    meta = _unpickle(folder / META)
    train = _concat([read_batch(folder / name) for name in TRAIN_BATCHES])
    test = read_batch(folder / TEST_BATCH)
    return Cifar(folder, train, test, synthetic=bool(meta.get(b"synthetic", False)))


def is_synthetic(folder: Path) -> bool:
    return bool(_unpickle(folder / META).get(b"synthetic", False))


def fingerprints(folder: str | Path) -> dict[str, str]:
    """sha256 of every file of the set, for the record."""
    return {name: hashlib.sha256((Path(folder) / name).read_bytes()).hexdigest() for name in FILES}


def _pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_batch(path: Path, split: Split, label: str) -> None:
    rows = split.images.transpose(0, 3, 1, 2).reshape(len(split.images), -1)
    _pickle(path, {b"batch_label": label.encode(), b"labels": [int(v) for v in split.labels],
                   b"data": np.ascontiguousarray(rows, dtype=np.uint8),
                   b"filenames": [f"synthetic_{i:05d}.png".encode() for i in range(len(rows))]})


def synthetic_split(count: int, rng: np.random.Generator) -> Split:
    """Images a network can learn from: each class has its own mean colour, plus noise."""
    labels = rng.integers(0, len(LABEL_NAMES), size=count).astype(np.int32)
    palette = np.random.default_rng(10).integers(30, 226, size=(len(LABEL_NAMES), 3))
    noise = rng.normal(0, 40, size=(count, SIDE, SIDE, 3))
    images = np.clip(palette[labels][:, None, None, :] + noise, 0, 255).astype(np.uint8)
    return Split(images, labels)


def write_synthetic(folder: Path, per_batch: int, test: int, seed: int = 0) -> None:
    """A small set in the official layout (5 training batches, a test batch, batches.meta)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, name in enumerate(TRAIN_BATCHES, start=1):
        write_batch(folder / name, synthetic_split(per_batch, rng), f"synthetic training batch {i} of 5")
    write_batch(folder / TEST_BATCH, synthetic_split(test, rng), "synthetic testing batch 1 of 1")
    _pickle(folder / META, {b"num_cases_per_batch": per_batch, b"num_vis": 3 * SIDE * SIDE,
                            b"label_names": [n.encode() for n in LABEL_NAMES], b"synthetic": True})

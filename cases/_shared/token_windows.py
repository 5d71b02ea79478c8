"""Training windows from a flat file of uint16 token ids (nanoGPT's train.bin), memory-mapped: window
i is tokens [i x context, (i + 1) x context + 1), its inputs the first `context` tokens and its
targets the same shifted by one. Every pass over the file shuffles the windows with the same seed on
every rank, and rank r of w reads windows r, r + w, r + 2w ... of that order: the ranks' windows
are disjoint and together cover the file. NumPy alone: pytorch-gpt and jax-gpt read the same windows of
the same file in the same order (`rows`). `open_windows` opens $SUITE_DATA_DIR/tokens/train.bin as both
cases do, with the checks a rank can make before it trains."""

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np


class TokenError(ValueError):
    """A token id the model's vocabulary cannot hold."""


class TokenWindows:
    def __init__(self, path: Path, context: int, rank: int, world: int, seed: int = 0, vocab: int | None = None):
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
        self.path, self.vocab = path, vocab
        self.context, self.rank, self.world, self.seed = context, rank, world, seed
        self.count = max(0, (len(self.tokens) - 1) // context)

    def per_rank(self) -> int:
        return self.count // self.world

    def share(self, epoch: int) -> np.ndarray:
        """This rank's window indices in the order of pass `epoch` (equal shares: the rest is left out)."""
        order = np.random.default_rng([self.seed, epoch]).permutation(self.count)
        return order[self.rank:self.per_rank() * self.world:self.world]

    def window(self, index: int) -> np.ndarray:
        start = int(index) * self.context
        window = np.asarray(self.tokens[start:start + self.context + 1], dtype=np.int64)
        if self.vocab is not None and window.max() >= self.vocab:
            at = start + int(np.argmax(window >= self.vocab))
            raise TokenError(f"{self.path} holds token id {int(self.tokens[at])} (token {at}), beyond the "
                             f"vocabulary of {self.vocab} (--vocab-size)")
        return window

    def rows(self, batch: int) -> Iterator[np.ndarray]:
        """(batch, context + 1) int64 windows, pass after pass."""
        epoch = 0
        while True:
            share = self.share(epoch)
            for first in range(0, len(share) - batch + 1, batch):
                yield np.stack([self.window(i) for i in share[first:first + batch]])
            epoch += 1


def data_folder() -> Path:
    return Path(os.environ.get("SUITE_DATA_DIR", "data")) / "tokens"


def open_windows(case: str, context: int, vocab: int, rank: int, world: int, seed: int, needed: int,
                 per: str) -> tuple[TokenWindows, dict]:
    """This rank's windows of the token file and the file's manifest; a one-line SystemExit where the manifest
    says its ids go beyond the vocabulary, or the file holds less than one step (`needed` windows) per `per`."""
    path = data_folder() / "train.bin"
    try:
        manifest = json.loads((data_folder() / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    if manifest.get("vocab_size", 0) > vocab:
        raise SystemExit(f"{case}: {path} holds token ids up to {manifest['vocab_size'] - 1}, "
                         f"beyond --vocab-size {vocab}")
    windows = TokenWindows(path, context, rank, world, seed=seed, vocab=vocab)
    if windows.per_rank() < needed:
        raise SystemExit(f"{case}: {len(windows.tokens)} tokens in {path} give {windows.per_rank()} windows of "
                         f"{context} per {per}: less than one step of {needed}")
    return windows, manifest


def data_facts(windows: TokenWindows, manifest: dict) -> dict:
    """What the record says of the token file that trained."""
    return {"data": "tokens-synthetic" if manifest.get("synthetic") else "tokens",
            "data_path": str(windows.path.resolve()), "data_source": manifest.get("source"),
            "tokenizer": manifest.get("tokenizer"), "data_tokens": len(windows.tokens),
            "windows_per_rank": windows.per_rank()}

"""Training windows from a flat file of uint16 token ids (nanoGPT's train.bin), memory-mapped: window
i is tokens [i x context, (i + 1) x context + 1), its inputs the first `context` tokens and its
targets the same shifted by one. Every pass over the file shuffles the windows with the same seed on
every rank, and rank r of w reads windows r, r + w, r + 2w ... of that order: the ranks' windows
are disjoint and together cover the file. NumPy alone (torch only for `batches`): cases/jax-gpt reads the
same windows through `rows`."""

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

    def batches(self, batch: int):
        """(inputs, targets), each a (batch, context) int64 torch tensor, pass after pass, on the CPU."""
        import torch

        for rows in self.rows(batch):
            rows = torch.from_numpy(rows)
            yield rows[:, :-1], rows[:, 1:]

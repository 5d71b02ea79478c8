"""Training windows from a flat file of uint16 token ids (nanoGPT's train.bin), memory-mapped: window
i is tokens [i x context, (i + 1) x context + 1), its inputs the first `context` tokens and its
targets the same shifted by one. Every pass over the file shuffles the windows with the same seed on
every rank, and rank r of w reads windows r, r + w, r + 2w ... of that order: the ranks' windows
are disjoint and together cover the file."""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch


class TokenWindows:
    def __init__(self, path: Path, context: int, rank: int, world: int, seed: int = 0):
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
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
        return np.asarray(self.tokens[start:start + self.context + 1], dtype=np.int64)

    def batches(self, batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(inputs, targets), each (batch, context) int64, pass after pass, on the CPU."""
        epoch = 0
        while True:
            share = self.share(epoch)
            for first in range(0, len(share) - batch + 1, batch):
                rows = torch.from_numpy(np.stack([self.window(i) for i in share[first:first + batch]]))
                yield rows[:, :-1], rows[:, 1:]
            epoch += 1

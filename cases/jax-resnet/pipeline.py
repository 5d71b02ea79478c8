"""jax-resnet's --data imagefolder: pytorch-ddp's class folders of JPEGs ($DATA_DIR/imagefolder/train, `make
data CASE=jax-resnet` or CASE=pytorch-ddp: the same tree), each image decoded by Pillow with pytorch-ddp's
random-resized crop and flip (cases/_shared/image_folder.py) in a pool of threads (Pillow lets go of the
GIL while it decodes and resizes). Each epoch is shuffled from seed + epoch and every process reads its own
share (DistributedSampler's rule: every world-th image of the order from its rank on, as many for each
process), in full batches only; the next batch is decoded while the step runs. Batches leave as float32
NHWC normalised with ImageNet's mean and deviation, int32 labels."""

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from cases._shared.image_folder import MEAN, STD, list_samples, load_crop


class ImageFolderBatches:
    """next(batches) -> (images, labels) of this process: `rows` images a step, decoded by `threads` threads."""

    def __init__(self, root: str, size: int, rows: int, rank: int, world: int, threads: int, seed: int):
        self.classes, self.samples = list_samples(root)
        self.share = len(self.samples) // world
        if self.share < rows:
            raise SystemExit(f"error: {root} has {len(self.samples)} images: {self.share} for each of {world} "
                             f"process(es), fewer than one step's {rows}")
        self.size, self.rows, self.rank, self.world, self.seed = size, rows, rank, world, seed
        self.epoch, self.queued = -1, []
        self.rng = random.Random(seed + 7919 * rank)  # the crops and flips of this process
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="decode")
        self.pending = self.submit()

    def steps_per_epoch(self) -> int:
        return self.share // self.rows

    def epoch_share(self, epoch: int) -> list[int]:
        """This process's images of an epoch in the order read, full batches only."""
        order = np.random.default_rng(self.seed + epoch).permutation(len(self.samples))
        return [int(i) for i in order[self.rank::self.world][:self.steps_per_epoch() * self.rows]]

    def next_indices(self) -> list[int]:
        """The next full batch of this process's share; a new shuffled epoch when the last ends."""
        if len(self.queued) < self.rows:
            self.epoch += 1
            self.queued = self.epoch_share(self.epoch)
        batch, self.queued = self.queued[:self.rows], self.queued[self.rows:]
        return batch

    def submit(self) -> tuple[list, np.ndarray]:
        """The next batch's images handed to the threads (each with a generator of its own, drawn here in
        order, so the crops do not depend on which thread runs first), and its labels."""
        indices = self.pending_indices = self.next_indices()
        futures = [self.pool.submit(load_crop, self.samples[i][0], self.size, random.Random(self.rng.getrandbits(64)))
                   for i in indices]
        return futures, np.asarray([self.samples[i][1] for i in indices], np.int32)

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        futures, labels = self.pending
        images = np.stack([f.result() for f in futures]).astype(np.float32)
        self.pending = self.submit()
        images = (images - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)
        return images, labels

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

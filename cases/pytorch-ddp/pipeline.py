"""The imagefolder input of pytorch-ddp: class folders of JPEGs decoded with Pillow, a random-resized
crop to the image size and a horizontal flip (cases/_shared/image_folder.py, as jax-resnet's), a
DistributedSampler that gives each rank its own share of the images, and a DataLoader with worker
processes and pinned memory. Images leave the workers as uint8 CHW; they are normalised on the device,
where it costs least."""

import random

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from cases._shared.image_folder import MEAN, STD, list_samples, load_crop


class ImageFolder(Dataset):
    """(path, class index) of every image under root/<class>/, classes in sorted order."""

    def __init__(self, root: str, size: int):
        self.classes, self.samples = list_samples(root)
        self.size = size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        return torch.from_numpy(load_crop(path, self.size, random).copy()).permute(2, 0, 1), label


def make_loader(root: str, size: int, batch: int, rank: int, world: int, workers: int, pin: bool,
                seed: int = 0) -> tuple[DataLoader, DistributedSampler]:
    """Every rank gets len(dataset) / world distinct images per epoch (the sampler pads the last
    share by repeating a few); only full batches are trained, so every rank takes the same steps."""
    dataset = ImageFolder(root, size)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=workers, pin_memory=pin,
                        drop_last=True, persistent_workers=workers > 0)
    return loader, sampler


class Normalise:
    """uint8 NCHW batches to normalised float on the device, in the training memory format."""

    def __init__(self, device: torch.device, memory_format: torch.memory_format):
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
        self.device, self.memory_format = device, memory_format

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = images.to(self.device, non_blocking=True).float().sub_(self.mean).div_(self.std)
        return images.contiguous(memory_format=self.memory_format), labels.to(self.device, non_blocking=True)

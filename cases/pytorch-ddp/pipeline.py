"""The imagefolder input of pytorch-ddp: class folders of JPEGs decoded with Pillow, a random-resized
crop to the image size and a horizontal flip (torchvision's RandomResizedCrop and fastai's, with the
same scale and ratio ranges), a DistributedSampler that gives each rank its own share of the images,
and a DataLoader with worker processes and pinned memory. Images leave the workers as uint8 CHW;
they are normalised on the device, where it costs least."""

import math
import os
import random

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

EXTENSIONS = (".jpg", ".jpeg", ".png")
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)  # ImageNet's, on 0..255 pixels
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


class ImageFolder(Dataset):
    """(path, class index) of every image under root/<class>/, classes in sorted order."""

    def __init__(self, root: str, size: int):
        self.classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
        self.samples = [(os.path.join(root, name, file), label) for label, name in enumerate(self.classes)
                        for file in sorted(os.listdir(os.path.join(root, name))) if file.lower().endswith(EXTENSIONS)]
        self.size = size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        with Image.open(path) as image:
            image = image.convert("RGB")
            box = random_resized_box(*image.size, random)
            image = image.resize((self.size, self.size), Image.BILINEAR, box=box)
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(image)).permute(2, 0, 1), label


def random_resized_box(width: int, height: int, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)) -> tuple[int, ...]:
    """A crop of scale x the area and an aspect ratio in `ratio` (log-uniform); after 10 misses the
    central crop closest to `ratio` (torchvision's RandomResizedCrop.get_params)."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left, top = rng.randint(0, width - w), rng.randint(0, height - h)
            return left, top, left + w, top + h
    w, h = width, height
    if width / height < ratio[0]:
        h = round(width / ratio[0])
    elif width / height > ratio[1]:
        w = round(height * ratio[1])
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


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

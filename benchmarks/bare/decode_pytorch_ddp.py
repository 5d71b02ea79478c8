"""What pytorch-ddp's imagefolder input costs without training: every training image through the
case's own ImageFolder (Pillow decode, random-resized crop, flip), in this one process on one core.
Prints one JSON line: images, seconds per image.

    <pytorch stack python> benchmarks/bare/decode_pytorch_ddp.py DATA_DIR/imagefolder/train IMAGE_SIZE
"""

import json
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "cases", "pytorch-ddp")]  # the case's pipeline imports cases._shared
from pipeline import ImageFolder  # noqa: E402 (after the path it is found on)


def main(root: str, size: int) -> None:
    os.sched_setaffinity(0, [min(os.sched_getaffinity(0))])
    dataset = ImageFolder(root, size)
    for index in range(len(dataset)):  # a first pass reads the files into the page cache, as epoch 1 does
        dataset[index]
    started = time.perf_counter()
    for index in range(len(dataset)):
        dataset[index]
    print(json.dumps({"images": len(dataset), "seconds_per_image": (time.perf_counter() - started) / len(dataset)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

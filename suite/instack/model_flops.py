"""FLOPs of one training step per image for architectures the suite trains, for where a framework
gives no count of its own (MXNet) and for published figures (whose runs were not counted here); and
the cache of the counts the cases make (cases/_shared/flops.py, tf-cifar's profiler count), per case,
model and sizes (every option that changes the counted graph is in the key), in the user's cache
folder or $SUITE_FLOPS_CACHE. Standard library only.

The figures were counted with PyTorch's FlopCounterMode over one forward and backward pass of
cases/_shared/torch_resnet.py's ResNet-50 at 224 px (cases/_shared/flops.py counts every PyTorch run
the same way): v1.5 24.30 GFLOP per image (forward 8.18 GFLOP, i.e. 4.09 G multiply-adds, about 3 x
forward as the input needs no gradient); v1, with the stride on the first 1x1 convolution of a
downsampling block (gluon's resnet50_v1), 22.91 GFLOP. A convolution network's FLOPs grow with the
image's area: other sizes are scaled by (size / 224)^2."""

import json
import os
from pathlib import Path

TRAINING_FLOPS_AT_224 = {
    "resnet50-v1.5": 24_299_077_632,
    "resnet50-v1": 22_911_811_584,
}
ALIASES = {"resnet50": "resnet50-v1.5"}
SOURCE = ("architecture count: {model} at 224 px, {gflop:.2f} GFLOP per image per training step "
          "(FlopCounterMode on the same architecture){scaled}")


def training_flops_per_image(model: str, image_size: int) -> tuple[float, str] | None:
    """(FLOPs per image of one training step, where the figure comes from), or None for an
    architecture not listed."""
    name = ALIASES.get(model, model)
    at_224 = TRAINING_FLOPS_AT_224.get(name)
    if at_224 is None or not image_size:
        return None
    scaled = "" if image_size == 224 else f", x ({image_size} / 224)^2"
    return at_224 * (image_size / 224) ** 2, SOURCE.format(model=name, gflop=at_224 / 1e9, scaled=scaled)


def cache_path() -> Path:
    """$SUITE_FLOPS_CACHE (a file: the tests point it into a folder of their own), else
    flops-per-sample.json in the user's cache folder."""
    if os.environ.get("SUITE_FLOPS_CACHE"):
        return Path(os.environ["SUITE_FLOPS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hpc-dl-bench" / "flops-per-sample.json"


def cached(key: dict, count) -> tuple[float, bool]:
    """(count() for `key`, whether it came from the cache); a count is made once per key and host user."""
    name = json.dumps(key, sort_keys=True)
    found = _read_cache().get(name)
    if found:
        return found, True
    value = count()
    _write_cache(name, value)
    return value, False


def _read_cache() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(name: str, value: float) -> None:
    """Best effort (a read-only home, a container): a count is quick to make again."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**_read_cache(), name: value}, indent=1, sort_keys=True))
        tmp.replace(path)  # ranks of one host may write at once: each replaces the file whole
    except OSError:
        pass

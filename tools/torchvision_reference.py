"""Writes tests/data/torchvision_resnet50.json: parameter count, state_dict shapes and leaf-module
settings of torchvision's own resnet50(), the reference the case's ResNet-50 is tested against.

torchvision does not import next to the CPU torch of the stack (its C++ operators fail to register),
but its model code is plain Python: this loads torchvision/models/resnet.py from an unpacked
torchvision wheel without running torchvision/__init__.py.

    pip download --no-deps torchvision==0.28.0 -d /tmp/tv && python -m zipfile -e /tmp/tv/*.whl /tmp/tvx
    <stack python> tools/torchvision_reference.py /tmp/tvx > tests/data/torchvision_resnet50.json
"""

import importlib
import json
import sys
import types
from pathlib import Path


def load_torchvision_resnet(unpacked_wheel: Path):
    for name in ("torchvision", "torchvision.models"):
        module = types.ModuleType(name)
        module.__path__ = [str(unpacked_wheel / name.replace(".", "/"))]
        sys.modules[name] = module
    return importlib.import_module("torchvision.models.resnet")


def set_deterministic_weights(model) -> None:
    """Same weights for any model with the same state_dict names and shapes, scaled so that
    activations stay finite through all blocks."""
    import torch

    with torch.no_grad():
        for index, (name, tensor) in enumerate(sorted(model.state_dict().items())):
            if not tensor.is_floating_point():
                continue
            noise = torch.randn(tensor.shape, generator=torch.Generator().manual_seed(index))
            if name.endswith("running_var"):
                tensor.copy_(1 + 0.1 * noise.abs())
            elif tensor.dim() == 1:
                tensor.copy_((1 if name.endswith("weight") else 0) + 0.1 * noise)
            else:
                tensor.copy_(noise / tensor[0].numel() ** 0.5)


def probe_logits(model) -> list[list[float]]:
    """First logits of the model in eval mode on a fixed 2x3x64x64 input, with deterministic weights."""
    import torch

    set_deterministic_weights(model)
    model.eval()
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1234))
    with torch.no_grad():
        return model(images)[:, :16].tolist()


def describe(model) -> dict:
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "state_dict": {k: list(v.shape) for k, v in model.state_dict().items()},
        "leaf_modules": {n: repr(m) for n, m in model.named_modules() if not list(m.children())},
        "probe_logits": probe_logits(model),
    }


if __name__ == "__main__":
    resnet = load_torchvision_resnet(Path(sys.argv[1]))
    reference = {"source": "torchvision 0.28.0 torchvision.models.resnet.resnet50()", **describe(resnet.resnet50())}
    json.dump(reference, sys.stdout, indent=1, sort_keys=True)
    print()

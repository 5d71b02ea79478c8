"""ResNet-50 v1.5 (and ResNet-18) in Flax (flax.linen), laid out as torchvision's: the stride of a
bottleneck on its 3x3 convolution (v1.5), no convolution biases, PyTorch's explicit padding (Flax's "SAME"
pads a stride-2 convolution of an even input on one side only), batch normalisation with PyTorch's
momentum 0.1 and eps 1e-5, and the weights initialised as torchvision does (He normal, fan out). NHWC, as
XLA wants it. 25,557,032 parameters at 1000 classes, counted as PyTorch counts them (the batch statistics
are not parameters in either)."""

from functools import partial
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

STAGES = {"resnet50": (3, 4, 6, 3), "resnet18": (2, 2, 2, 2)}
WIDTHS = (64, 128, 256, 512)
HE = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


def conv(features: int, kernel: int, stride: int, dtype) -> nn.Conv:
    pad = kernel // 2
    return nn.Conv(features, (kernel, kernel), (stride, stride), padding=((pad, pad), (pad, pad)), use_bias=False,
                   kernel_init=HE, dtype=dtype)


class Block(nn.Module):
    """A bottleneck (1x1, 3x3 with the stride, 1x1 four times as wide) or, for ResNet-18, a basic block."""

    width: int
    stride: int
    bottleneck: bool
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=self.dtype)
        out = self.width * 4 if self.bottleneck else self.width
        if self.bottleneck:
            y = nn.relu(norm()(conv(self.width, 1, 1, self.dtype)(x)))
            y = nn.relu(norm()(conv(self.width, 3, self.stride, self.dtype)(y)))
            y = norm()(conv(out, 1, 1, self.dtype)(y))
        else:
            y = nn.relu(norm()(conv(self.width, 3, self.stride, self.dtype)(x)))
            y = norm()(conv(out, 3, 1, self.dtype)(y))
        if self.stride != 1 or x.shape[-1] != out:
            x = norm()(conv(out, 1, self.stride, self.dtype)(x))
        return nn.relu(x + y)


class ResNet(nn.Module):
    model: str
    classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = conv(64, 7, 2, self.dtype)(x.astype(self.dtype))
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=self.dtype)(x))
        x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        for stage, (blocks, width) in enumerate(zip(STAGES[self.model], WIDTHS)):
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                x = Block(width, stride, self.model == "resnet50", self.dtype)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.classes, dtype=self.dtype)(x).astype(jnp.float32)


def training_flops_per_image(model: str, size: int, classes: int) -> int:
    """The products of one training step per image, as PyTorch's FlopCounterMode counts them (the other
    cases' figure): 2 FLOPs a multiply-add, the backward pass twice the forward (gradients of the input
    and of the weights) except the first convolution's, whose input needs no gradient."""
    macs, stem = 0, 0

    def layer(side: int, cin: int, cout: int, kernel: int, stride: int) -> int:
        nonlocal macs
        out = (side + 2 * (kernel // 2) - kernel) // stride + 1
        macs += out * out * cin * cout * kernel * kernel
        return out

    side = layer(size, 3, 64, 7, 2)
    stem = macs
    side, channels = (side - 1) // 2 + 1, 64  # the max pool
    bottleneck = model == "resnet50"
    for stage, (blocks, width) in enumerate(zip(STAGES[model], WIDTHS)):
        out = width * 4 if bottleneck else width
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            if stride != 1 or channels != out:
                layer(side, channels, out, 1, stride)
            if bottleneck:
                inner = layer(side, channels, width, 1, 1)
                inner = layer(inner, width, width, 3, stride)
                layer(inner, width, out, 1, 1)
            else:
                inner = layer(side, channels, width, 3, stride)
                layer(inner, width, out, 3, 1)
            side, channels = inner, out
    macs += channels * classes
    return 2 * (3 * macs - stem)


NORM = {"weight": ("params", "scale"), "bias": ("params", "bias"), "running_mean": ("batch_stats", "mean"),
        "running_var": ("batch_stats", "var")}
CONV_TO_TORCH = (3, 2, 0, 1)  # Flax's (kh, kw, in, out) -> PyTorch's (out, in, kh, kw)


def torch_weights(model: str) -> list[tuple[str, str, tuple[str, ...], tuple[int, ...] | None]]:
    """Every weight and statistic as (torchvision's state_dict name, its Flax collection, its path there, the
    axes that take the Flax array to PyTorch's layout, or None): to load PyTorch's weights and compare."""
    found = []

    def layer(name: str, path: tuple[str, ...], conv_index: int, norm_name: str) -> None:
        found.append((f"{name}.weight", "params", (*path, f"Conv_{conv_index}", "kernel"), CONV_TO_TORCH))
        found.extend((f"{norm_name}.{key}", collection, (*path, f"BatchNorm_{conv_index}", leaf), None)
                     for key, (collection, leaf) in NORM.items())

    layer("conv1", (), 0, "bn1")
    convs, block = (3 if model == "resnet50" else 2), 0
    for stage, blocks in enumerate(STAGES[model]):
        for i in range(blocks):
            prefix, path = f"layer{stage + 1}.{i}", (f"Block_{block}",)
            for k in range(convs):
                layer(f"{prefix}.conv{k + 1}", path, k, f"{prefix}.bn{k + 1}")
            if i == 0 and (stage > 0 or model == "resnet50"):
                layer(f"{prefix}.downsample.0", path, convs, f"{prefix}.downsample.1")
            block += 1
    found.append(("fc.weight", "params", ("Dense_0", "kernel"), (1, 0)))
    found.append(("fc.bias", "params", ("Dense_0", "bias"), None))
    return found

"""ResNet-50 v1.5 in plain PyTorch, shared by the PyTorch cases (pytorch-synthetic, pytorch-ddp) so
that they train the same model, and usable where torchvision cannot be imported; ResNet-18; and a
tiny CNN whose step costs almost nothing, so that a run measures what an input pipeline delivers
(pytorch-ddp --model tiny-cnn).

v1.5 puts the stride of a downsampling bottleneck on its 3x3 convolution (v1 has it on the first
1x1). Module names, shapes and layer settings equal torchvision's `resnet50()`; tests/integration/test_model.py
checks that against tests/data/torchvision_resnet50.json, taken from torchvision itself.
"""

import torch
from torch import nn


def conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1):
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = conv1x1(in_ch, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, out_ch)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(conv1x1(in_ch, out_ch, stride), nn.BatchNorm2d(out_ch))
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + shortcut)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (ResNet-18 and -34), torchvision's names."""

    expansion = 1

    def __init__(self, in_ch: int, width: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv3x3(in_ch, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != width:
            self.downsample = nn.Sequential(conv1x1(in_ch, width, stride), nn.BatchNorm2d(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + shortcut)


class ResNet(nn.Module):
    def __init__(self, blocks_per_stage: list[int], num_classes: int = 1000, block=Bottleneck):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        in_ch = 64
        for stage, blocks in enumerate(blocks_per_stage):
            width = 64 * 2**stage
            stride = 1 if stage == 0 else 2
            layers = []
            for index in range(blocks):
                layers.append(block(in_ch, width, stride if index == 0 else 1))
                in_ch = width * block.expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_ch, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(num_classes: int = 1000) -> ResNet:
    return ResNet([3, 4, 6, 3], num_classes)


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet([2, 2, 2, 2], num_classes, BasicBlock)


class TinyCNN(nn.Module):
    """Two small strided convolutions and a linear layer."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(inplace=True),
                                      nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(inplace=True),
                                      nn.AdaptiveAvgPool2d((1, 1)))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


MODELS = {"resnet50": resnet50, "resnet18": resnet18, "tiny-cnn": TinyCNN}

"""ResNet-50 v1.5 in MXNet Gluon, layer for layer the model of the PyTorch cases
(cases/_shared/torch_resnet.py, equal to torchvision's resnet50()): no convolution biases (the model
zoo's resnet50_v1 has biases on its 1x1 convolutions and the stride on the first of them), batch
normalisation after every convolution, the stride of a downsampling block on its 3x3 convolution.

Child blocks carry the PyTorch module names (conv1, layer2, 0, downsample ...), so that
`torch_shapes` lists the weights under PyTorch's state_dict names for the tests; Gluon's layouts
(out, in, kh, kw) and (out, in) are PyTorch's.
"""

from mxnet.gluon import nn

BLOCKS = (3, 4, 6, 3)
EXPANSION = 4


def conv(channels: int, kernel: int, stride: int = 1, in_channels: int = 0) -> nn.Conv2D:
    return nn.Conv2D(channels, kernel, strides=stride, padding=kernel // 2, use_bias=False, in_channels=in_channels)


def norm(channels: int) -> nn.BatchNorm:
    return nn.BatchNorm(epsilon=1e-5, momentum=0.9, in_channels=channels)


class Bottleneck(nn.HybridBlock):
    def __init__(self, in_ch: int, width: int, stride: int, **kwargs):
        super().__init__(**kwargs)
        out_ch = width * EXPANSION
        with self.name_scope():
            self.conv1, self.bn1 = conv(width, 1, in_channels=in_ch), norm(width)
            self.conv2, self.bn2 = conv(width, 3, stride, width), norm(width)
            self.conv3, self.bn3 = conv(out_ch, 1, in_channels=width), norm(out_ch)
            self.downsample = None
            if stride != 1 or in_ch != out_ch:
                self.downsample = nn.HybridSequential()
                self.downsample.add(conv(out_ch, 1, stride, in_ch), norm(out_ch))

    def hybrid_forward(self, F, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + shortcut)


class ResNet50V15(nn.HybridBlock):
    def __init__(self, classes: int = 1000, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv1, self.bn1 = conv(64, 7, 2, 3), norm(64)
            self.maxpool = nn.MaxPool2D(3, 2, 1)
            in_ch = 64
            for stage, blocks in enumerate(BLOCKS):
                layer = nn.HybridSequential()
                for block in range(blocks):
                    width = 64 * 2**stage
                    layer.add(Bottleneck(in_ch, width, 2 if stage > 0 and block == 0 else 1))
                    in_ch = width * EXPANSION
                setattr(self, f"layer{stage + 1}", layer)
            self.fc = nn.Dense(classes, in_units=in_ch)

    def hybrid_forward(self, F, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(F.mean(x, axis=(2, 3)))


def torch_params(block, prefix: str = ""):
    """(PyTorch state_dict name, Gluon parameter) of every parameter: child blocks are registered
    under their attribute names, or 0, 1 ... in a sequence."""
    names = {"gamma": "weight", "beta": "bias"}
    for key, param in block._reg_params.items():
        yield f"{prefix}{names.get(key, key)}", param
    for name, child in block._children.items():
        yield from torch_params(child, f"{prefix}{name}.")


def torch_shapes(block) -> dict[str, list[int]]:
    return {name: list(param.shape) for name, param in torch_params(block)}


def parameter_count(net) -> int:
    """As PyTorch counts parameters: those with gradients (batch normalisation's gamma and beta
    included), not batch normalisation's running statistics."""
    return sum(p.data().size for p in net.collect_params().values() if p.grad_req != "null")

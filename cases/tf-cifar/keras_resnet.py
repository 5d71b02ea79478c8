"""ResNet-50 v1.5 and ResNet-18 in Keras 2 (tf_keras), layer for layer the models of the PyTorch cases
(cases/_shared/torch_resnet.py, equal to torchvision's resnet50() and resnet18()): no convolution biases, batch
normalisation after every convolution (eps 1e-5, momentum 0.1 in PyTorch's sense), the stride of a
downsampling block on its 3x3 convolution, explicit symmetric zero padding as PyTorch pads (Keras'
"same" pads strided convolutions asymmetrically), a 1000-way dense layer. Keras' own ResNet50 is v1
with convolution biases, hence this definition.

Layers are named after the PyTorch modules with "_" for "." (layer2_0_downsample_0), so that
`torch_shapes` can list the weights under PyTorch's names and in PyTorch's layouts for the tests.
"""

import tf_keras as keras
from tf_keras import layers


def conv_init():
    """PyTorch's kaiming_normal_(mode="fan_out", nonlinearity="relu"), as the PyTorch cases initialise;
    a new instance per layer (an unseeded Keras initializer gives every call the same values)."""
    return keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")


def conv_bn(x, filters: int, kernel: int, stride: int, name: str, bn_name: str, relu: bool = True):
    if kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
    x = layers.Conv2D(filters, kernel, strides=stride, use_bias=False, kernel_initializer=conv_init(), name=name)(x)
    x = layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name=bn_name)(x)
    return layers.ReLU(name=f"{bn_name}_relu")(x) if relu else x


def block_out(x, y, out_ch: int, stride: int, name: str):
    """The residual sum: y plus x, through a strided 1x1 convolution where the shape changes."""
    shortcut = x
    if stride != 1 or x.shape[-1] != out_ch:
        shortcut = conv_bn(x, out_ch, 1, stride, f"{name}_downsample_0", f"{name}_downsample_1", relu=False)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([y, shortcut]))


def bottleneck(x, width: int, stride: int, name: str):
    y = conv_bn(x, width, 1, 1, f"{name}_conv1", f"{name}_bn1")
    y = conv_bn(y, width, 3, stride, f"{name}_conv2", f"{name}_bn2")
    y = conv_bn(y, width * 4, 1, 1, f"{name}_conv3", f"{name}_bn3", relu=False)
    return block_out(x, y, width * 4, stride, name)


def basic_block(x, width: int, stride: int, name: str):
    y = conv_bn(x, width, 3, stride, f"{name}_conv1", f"{name}_bn1")
    y = conv_bn(y, width, 3, 1, f"{name}_conv2", f"{name}_bn2", relu=False)
    return block_out(x, y, width, stride, name)


def resnet(blocks_per_stage: tuple[int, ...], block, classes: int, input_shape, name: str) -> keras.Model:
    inputs = keras.Input(input_shape)
    x = conv_bn(inputs, 64, 7, 2, "conv1", "bn1")
    x = layers.ZeroPadding2D(1, name="maxpool_pad")(x)  # after a ReLU, zeros pad as PyTorch's -inf does
    x = layers.MaxPooling2D(3, strides=2, name="maxpool")(x)
    for stage, blocks in enumerate(blocks_per_stage):
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            x = block(x, 64 * 2**stage, stride, f"layer{stage + 1}_{index}")
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    x = layers.Dense(classes, name="fc")(x)
    return keras.Model(inputs, layers.Softmax(name="softmax")(x), name=name)


def resnet50_v15(classes: int = 1000, input_shape=(224, 224, 3), **_) -> keras.Model:
    """Takes the keyword arguments of keras.applications models; weights are always random."""
    return resnet((3, 4, 6, 3), bottleneck, classes, input_shape, "resnet50_v1.5")


def resnet18(classes: int = 1000, input_shape=(224, 224, 3), **_) -> keras.Model:
    """Takes the keyword arguments of keras.applications models; weights are always random."""
    return resnet((2, 2, 2, 2), basic_block, classes, input_shape, "resnet18")


TORCH_NAMES = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias",
               "moving_mean": "running_mean", "moving_variance": "running_var"}
TO_TORCH = {4: (3, 2, 0, 1), 2: (1, 0)}  # axes: Keras (kh, kw, in, out) -> PyTorch (out, in, kh, kw)


def torch_weights(model: keras.Model):
    """(PyTorch state_dict name, Keras weight, axes from Keras' layout to PyTorch's or None) of every weight."""
    for layer in model.layers:
        for weight in layer.weights:
            kind = weight.name.split("/")[-1].split(":")[0]
            yield f"{layer.name.replace('_', '.')}.{TORCH_NAMES[kind]}", weight, TO_TORCH.get(len(weight.shape))


def torch_shapes(model: keras.Model) -> dict[str, list[int]]:
    """Every weight's shape under its PyTorch name, in PyTorch's layout."""
    return {name: [int(weight.shape[i]) for i in axes or range(len(weight.shape))]
            for name, weight, axes in torch_weights(model)}


def parameter_count(model: keras.Model) -> int:
    """As PyTorch counts parameters: trainable weights (batch normalisation's scale and shift
    included), not batch normalisation's moving statistics."""
    return sum(int(w.shape.num_elements()) for w in model.trainable_weights)

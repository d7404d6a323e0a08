"""MXNet's own launcher, tools/launch.py as the mxnet wheel ships it, runnable on Python 3.9+.

    python -m cdsgd_mx.mxnet_launch --launcher local|ssh [-H HOSTFILE] -n 2 -s 1 python train.py

takes exactly tools/launch.py's arguments. MXNet 1.9.1's dmlc_tracker calls
threading.Thread.isAlive, which Python 3.9 removed: as shipped, on Python 3.11 here, it exits 1
right after starting the scheduler ("'Thread' object has no attribute 'isAlive'"), no worker
trains, and the scheduler process is left running. This restores that one name and runs the
shipped file unchanged.

The script it runs needs `import cdsgd_mx` as its first import (on a server or the scheduler
that runs ours and exits; docs/usage.md, "Launching on a cluster"), and the job's secret in a
file only its owner can read, named by CDSGD_SECRET_FILE on every node (auth.py).
"""
import importlib.util
import os
import runpy
import sys
import threading


def tools_launch_path():
    """tools/launch.py of the installed mxnet wheel (found without importing mxnet)."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None:
        sys.exit("cdsgd_mx.mxnet_launch: mxnet is not installed (pip install -e \".[cpu]\")")
    path = os.path.join(os.path.dirname(spec.origin), "tools", "launch.py")
    if not os.path.exists(path):
        sys.exit("cdsgd_mx.mxnet_launch: this mxnet install has no tools/launch.py (looked at %s)" % path)
    return path


def main(argv=None):
    path = tools_launch_path()
    if not hasattr(threading.Thread, "isAlive"):
        threading.Thread.isAlive = threading.Thread.is_alive  # the name dmlc_tracker still calls
    sys.argv = [path] + list(sys.argv[1:] if argv is None else argv)
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()

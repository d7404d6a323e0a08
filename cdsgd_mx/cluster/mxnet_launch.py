"""MXNet's own launcher, tools/launch.py as the mxnet wheel ships it, runnable on Python 3.9+.

    python -m cdsgd_mx.mxnet_launch --launcher local|ssh [-H HOSTFILE] -n 2 -s 1 python train.py

takes exactly tools/launch.py's arguments. MXNet 1.9.1's dmlc_tracker calls
threading.Thread.isAlive, which Python 3.9 removed: as shipped, on Python 3.11 here, it exits 1
right after starting the scheduler ("'Thread' object has no attribute 'isAlive'"), no worker
trains, and the scheduler process is left running. This restores that one name and runs the
shipped file unchanged.

A node that fails ends the job (issue 39): tools/launch.py as shipped leaves the others running
(the scheduler and servers wait for the failed worker forever) and exits 0 once they are killed
by hand. Here every node it starts is a process of its own session; the first one to exit
non-zero stops all the others, and this command exits 1, naming it. (With --launcher ssh that
stops the local ssh clients; the remote nodes end with them where sshd hangs up on them.)

The script it runs needs `import cdsgd_mx` as its first import (on a server or the scheduler
that runs ours and exits; docs/usage.md, "Launching on a cluster"), and the job's secret in a
file only its owner can read, named by CDSGD_SECRET_FILE on every node (auth.py).
"""
import importlib.util
import os
import runpy
import signal
import subprocess
import sys
import threading
import time


def tools_launch_path():
    """tools/launch.py of the installed mxnet wheel (found without importing mxnet)."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None:
        sys.exit("cdsgd_mx.mxnet_launch: mxnet is not installed (pip install -e \".[cpu]\")")
    path = os.path.join(os.path.dirname(spec.origin), "tools", "launch.py")
    if not os.path.exists(path):
        sys.exit("cdsgd_mx.mxnet_launch: this mxnet install has no tools/launch.py (looked at %s)" % path)
    return path


STOPPED_CODES = (-signal.SIGTERM, -signal.SIGKILL, 128 + signal.SIGTERM, 128 + signal.SIGKILL)  # our stop's
ROLE_ORDER = {"worker": 0, "server": 1, "scheduler": 2}


class Nodes:
    """The processes dmlc_tracker starts (through subprocess.Popen: the scheduler, and every
    worker and server with --launcher local), and which of them failed."""

    def __init__(self):
        self.procs, self.failed, self.lock = [], [], threading.Lock()
        self.stopping = False

    def popen(self, real):
        nodes = self

        class Node(real):
            def __init__(self, *args, **kwargs):
                kwargs.setdefault("start_new_session", True)  # its group: stopping it stops its children
                super().__init__(*args, **kwargs)
                self.role = (kwargs.get("env") or {}).get("DMLC_ROLE", "scheduler")
                with nodes.lock:
                    nodes.procs.append(self)

            def wait(self, timeout=None):
                code = super().wait(timeout)
                if code != 0:
                    nodes.fail(self, code)
                return code
        return Node

    def fail(self, proc, code):
        with self.lock:
            if self.stopping:
                # one we stopped, or one that failed on its own before our stop reached it: a
                # worker that raised, seen after the server that lost it (each node is waited
                # for in its own thread, and under load either thread may return first)
                if code not in STOPPED_CODES:
                    self.failed.append((proc.role, code))
                return
            self.stopping = True
            self.failed.append((proc.role, code))
            others = [p for p in self.procs if p is not proc and p.poll() is None]
        sys.stderr.write("cdsgd_mx.mxnet_launch: a %s exited with %d: stopping the job's other %d process(es)\n"
                         % (proc.role, code, len(others)))
        sys.stderr.flush()
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
            for p in others:
                try:
                    os.killpg(p.pid, sig)
                except OSError:
                    pass
            deadline = time.time() + grace
            while grace and time.time() < deadline and any(p.poll() is None for p in others):
                time.sleep(0.1)


def main(argv=None):
    path = tools_launch_path()
    if not hasattr(threading.Thread, "isAlive"):
        threading.Thread.isAlive = threading.Thread.is_alive  # the name dmlc_tracker still calls
    sys.argv = [path] + list(sys.argv[1:] if argv is None else argv)
    nodes = Nodes()
    real = subprocess.Popen
    subprocess.Popen = nodes.popen(real)  # (subprocess.call and check_call look it up at each call)
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        subprocess.Popen = real
    if nodes.failed:
        sys.exit(verdict(nodes.failed))


def verdict(failed):
    """The last line of a failed job: every node that failed on its own, workers first (a
    worker's own error is what brings its servers and scheduler down with it, far more often
    than the other way round)."""
    failed = sorted(failed, key=lambda rc: ROLE_ORDER.get(rc[0], len(ROLE_ORDER)))
    return "cdsgd_mx.mxnet_launch: the job failed: %s (its output is above)" % ", ".join(
        "a %s exited with %d" % rc for rc in failed)


if __name__ == "__main__":
    main()

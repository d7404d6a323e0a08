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

Two jobs started in the same second on one host: the tracker takes the lowest free port from
9091 for the scheduler, so both took the same one; one scheduler could not bind it and its nodes
joined the other job's scheduler, and both jobs failed. Here the port is drawn at random from the
tracker's own range (9091-9998, so a firewall opened for tools/launch.py still fits), and a job
whose scheduler found its port taken (our scheduler exits 76) is started again on another.

The script it runs needs `import cdsgd_mx` as its first import (on a server or the scheduler
that runs ours and exits; docs/usage.md, "Launching on a cluster"), and the job's secret in a
file only its owner can read, named by CDSGD_SECRET_FILE on every node (auth.py).
"""
import importlib.util
import os
import re
import runpy
import signal
import subprocess
import sys
import threading
import time

from cdsgd_mx.cluster.address import EXIT_PORT_TAKEN
from cdsgd_mx.cluster.launch import free_port_in


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
TRACKER_PORTS = range(9091, 9999)  # where dmlc_tracker's PSTracker looks for the scheduler's port
PORT_TRIES = 5  # jobs started per run, each on another port, while the scheduler finds its port taken


def role_of(args, kwargs):
    """The node a Popen of the tracker starts: DMLC_ROLE in its environment (the scheduler, and
    --launcher local's nodes), or in its command (--launcher ssh's `export DMLC_ROLE=...`)."""
    role = (kwargs.get("env") or {}).get("DMLC_ROLE")
    if role is None:
        cmd = args[0] if args else kwargs.get("args", "")
        found = re.search(r"DMLC_ROLE=(\w+)", cmd if isinstance(cmd, str) else " ".join(map(str, cmd)))
        role = found.group(1) if found else "scheduler"
    return role


class Nodes:
    """The processes dmlc_tracker starts (through subprocess.Popen: the scheduler, and every
    worker and server with --launcher local), and which of them failed."""

    def __init__(self):
        self.procs, self.failed, self.lock = [], [], threading.Lock()
        self.stopping, self.port = False, None

    def popen(self, real):
        nodes = self

        class Node(real):
            def __init__(self, *args, **kwargs):
                kwargs.setdefault("start_new_session", True)  # its group: stopping it stops its children
                super().__init__(*args, **kwargs)
                self.role, self.reported = role_of(args, kwargs), False
                with nodes.lock:
                    nodes.procs.append(self)

            def wait(self, timeout=None):
                code = super().wait(timeout)
                if code != 0 and not self.reported:  # (check_call waits twice: once, and on leaving)
                    self.reported = True
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
    argv = [path] + list(sys.argv[1:] if argv is None else argv)
    for tries in range(1, PORT_TRIES + 1):
        nodes = run_tracker(path, argv, free_port_in("", TRACKER_PORTS))
        if not nodes.failed:
            return
        if nodes.failed[0] != ("scheduler", EXIT_PORT_TAKEN) or tries == PORT_TRIES:
            sys.exit(verdict(nodes.failed))
        sys.stderr.write("cdsgd_mx.mxnet_launch: the scheduler's port %s was taken before the scheduler could bind "
                         "it (another job's?): starting the job again on another port\n" % nodes.port)
        sys.stderr.flush()


def run_tracker(path, argv, port):
    """One job: tools/launch.py run as shipped, its scheduler's port search starting at port
    (None: the tracker's own lowest free one), every node it starts watched by Nodes (and the
    port the tracker gave the scheduler in nodes.port)."""
    from dmlc_tracker import tracker
    shipped = tracker.PSTracker
    nodes = Nodes()

    class PSTracker(shipped):
        def __init__(self, hostIP, cmd, envs=None, **ignored):
            super().__init__(hostIP, cmd, port=port or TRACKER_PORTS.start, port_end=TRACKER_PORTS.stop, envs=envs)
            nodes.port = getattr(self, "port", None)
    sys.argv = list(argv)
    real = subprocess.Popen
    subprocess.Popen = nodes.popen(real)  # (subprocess.call and check_call look it up at each call)
    tracker.PSTracker = PSTracker  # (tracker.submit looks it up at each call)
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        subprocess.Popen, tracker.PSTracker = real, shipped
    return nodes


def verdict(failed):
    """The last line of a failed job: every node that failed on its own, workers first (a
    worker's own error is what brings its servers and scheduler down with it, far more often
    than the other way round)."""
    failed = sorted(failed, key=lambda rc: ROLE_ORDER.get(rc[0], len(ROLE_ORDER)))
    return "cdsgd_mx.mxnet_launch: the job failed: %s (its output is above)" % ", ".join(
        "a %s exited with %d" % rc for rc in failed)


if __name__ == "__main__":
    main()

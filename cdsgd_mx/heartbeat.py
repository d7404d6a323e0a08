"""A node's heartbeat to the launcher's watchdog (cdsgd_mx.watchdog).

Once a second each node of a job started by cdsgd_mx.launch sends one UDP datagram to the
launcher: who it is, its phase (start, train, exit), how many steps it has begun and, when one
of its threads is blocked on the network, on what and for how long. The launcher learns from
the silence of a node that it is stopped or hung (a stopped process sends nothing; ps-lite's own
heartbeats only feed a scheduler query that MXNet never makes), and from the waits which round
is held up. Datagrams carry a MAC with the job's secret (auth.py): nothing else is believed.

Nothing runs without CDSGD_MONITOR (host:port, set by the launcher): under another launcher
(MXNet's tools/launch.py) this module does nothing.
"""
import atexit
import json
import os
import socket
import threading
import time
from contextlib import contextmanager

from . import auth

MONITOR = "CDSGD_MONITOR"
INTERVAL = 1.0  # seconds between beats


class _Node:
    def __init__(self):
        self.lock = threading.Lock()
        self.phase = "start"
        self.step = 0          # steps begun (pushpull calls)
        self.rank = None       # MXNet's rank, once known
        self.resumed = None    # the step a checkpoint restored (a restarted job says where it resumed)
        self.waits = {}        # thread ident -> (what, since)
        self.seq = 0           # beats sent: the launcher ignores one that arrives after a newer one
        self.thread = None
        self.send = None       # sends one beat now


_node = _Node()


def node_label():
    """The launcher's name of this process: 'scheduler', 'server 0', 'worker 1' (launch index)."""
    role = os.environ.get("DMLC_ROLE", "?")
    return role if role == "scheduler" else "%s %s" % (role, os.environ.get("CDSGD_LAUNCH_INDEX", "?"))


def start():
    """Start beating (once per process; a no-op without CDSGD_MONITOR or a job secret)."""
    where = os.environ.get(MONITOR)
    if not where or _node.thread is not None:
        return
    host, _, port = where.rpartition(":")
    try:
        secret = auth.job_secret()
    except auth.SecretError:
        return  # the node itself reports a missing secret; beats would not be believed anyway
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def send():
        try:
            sock.sendto(encode(secret, report()), (host, int(port)))
        except OSError:
            pass  # the launcher is gone or the network refuses: the job ends another way

    _node.send = send
    _node.thread = threading.Thread(target=_beat, name="cdsgd-heartbeat", daemon=True)
    _node.thread.start()
    atexit.register(set_phase, "exit")  # runs before MXNet's own exit work (atexit is LIFO)


def set_phase(phase):
    """A new phase is sent at once: the last beat of a worker that exits must carry its final
    step count (the watchdog compares it with the others')."""
    if _node.phase != phase:
        _node.phase = phase
        if _node.send is not None:
            _node.send()


def set_step(step, rank=None):
    _node.step = step
    if rank is not None:
        _node.rank = rank


def set_resumed(step):
    _node.resumed = step
    _node.step = step


@contextmanager
def waiting(what):
    """Mark this thread as blocked on the network for `what` (e.g. 'step 12, bucket 3')."""
    me = threading.get_ident()
    with _node.lock:
        _node.waits[me] = (what, time.monotonic())
    try:
        yield
    finally:
        with _node.lock:
            _node.waits.pop(me, None)


def report():
    """This node's state as sent: the longest current wait, with its age in seconds."""
    with _node.lock:
        waits = list(_node.waits.values())
    with _node.lock:
        _node.seq += 1
        seq = _node.seq
    msg = {"node": node_label(), "host": socket.gethostname(), "pid": os.getpid(), "seq": seq,
           "phase": _node.phase, "step": _node.step, "rank": _node.rank, "resumed": _node.resumed,
           "wait": None, "waited": 0.0}
    if waits:
        what, since = min(waits, key=lambda w: w[1])
        msg["wait"], msg["waited"] = what, round(time.monotonic() - since, 3)
    return msg


def encode(secret, msg):
    text = json.dumps(msg, sort_keys=True)
    return ("%s:%s" % (auth.mac(secret, "beat", text), text)).encode()


def decode(secret, packet):
    """The report in a datagram, or None if it does not carry the job's MAC."""
    try:
        given, sep, text = packet.decode("ascii").partition(":")
        if sep and auth.verify(secret, given, "beat", text):
            msg = json.loads(text)
            return msg if isinstance(msg, dict) and isinstance(msg.get("node"), str) else None
    except (UnicodeDecodeError, ValueError):
        pass
    return None


def _beat():
    while True:
        _node.send()
        time.sleep(INTERVAL)

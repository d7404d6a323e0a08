"""A node's heartbeat to the launcher's watchdog (cdsgd_mx.cluster.watchdog).

Once a second each node of a job started by cdsgd_mx.launch sends one UDP datagram to the
launcher: who it is, its phase (start, train, exit), how many steps it has begun and, when one
of its threads is blocked on the network, on what and for how long. The launcher learns from
the silence of a node that it is stopped or hung (a stopped process sends nothing; ps-lite's own
heartbeats only feed a scheduler query that MXNet never makes), and from the waits which round
is held up. Datagrams carry a MAC with the job's secret (auth.py): nothing else is believed.

Under another launcher (MXNet's tools/launch.py, srun, anything that sets DMLC_* itself) there
is no CDSGD_MONITOR: the nodes then beat to our scheduler (DMLC_PS_ROOT_URI, the UDP port of
the same number as ps-lite's), which keeps the job's hub (cluster/hub.py) and answers each beat.
When a worker fails, or falls silent outside its exit, the hub answers "stop" and every node
that hears it exits in one line: servers and the scheduler, too, end by themselves (issue 39).
A node that hears nothing from the hub for its timeout exits as well (the scheduler is gone).

Each node also watches itself, under any launcher (issue 30): a thread that has waited on the
network (a round, a barrier, an acknowledgement) for longer than CDSGD_STALL_TIMEOUT seconds
(default 600; CDSGD_START_TIMEOUT, default 1800, while the node starts; 0: never) makes the
node print one line naming what it waited for and exit with EXIT_STALL, so whatever started it
sees a failed task. Only waits count: a slow but live step (compute, evaluation) never trips
it. cdsgd_mx.launch gives its nodes timeouts a minute longer than its own, so that its richer,
job-wide verdict comes first and the two never fight.
"""
import atexit
import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager

from cdsgd_mx.wire import auth

MONITOR = "CDSGD_MONITOR"
INTERVAL = 1.0  # seconds between beats
STALL_TIMEOUT, START_TIMEOUT = "CDSGD_STALL_TIMEOUT", "CDSGD_START_TIMEOUT"
DEFAULT_TIMEOUTS = {STALL_TIMEOUT: 600.0, START_TIMEOUT: 1800.0}
EXIT_STALL = 75  # EX_TEMPFAIL, as cdsgd_mx.launch ends a stalled job: a restart may get past it
EXIT_STOPPED = 1  # the hub stopped the job: another node failed


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
        self.watcher = None    # the self-watch thread
        self.limits = (0.0, 0.0)  # its (stall, start) timeouts, once started
        self.to_hub = False    # beats go to the scheduler's hub (no launcher watchdog)
        self.heard = 0.0       # when the hub last answered


_node = _Node()


def node_label():
    """The launcher's name of this process: 'scheduler', 'server 0', 'worker 1' (launch index;
    just the role under another launcher)."""
    role, index = os.environ.get("DMLC_ROLE", "?"), os.environ.get("CDSGD_LAUNCH_INDEX")
    return role if role == "scheduler" or index is None else "%s %s" % (role, index)


def start():
    """Start the self-watch, and beating (once per process; to the launcher's CDSGD_MONITOR, else
    to the scheduler's hub; none without a job secret)."""
    watch_self()
    where = os.environ.get(MONITOR) or hub_address()
    if not where or _node.thread is not None:
        return
    _node.to_hub = not os.environ.get(MONITOR)
    host, _, port = where.rpartition(":")
    try:
        secret = auth.job_secret()
    except auth.SecretError:
        return  # the node itself reports a missing secret; beats would not be believed anyway
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.0)

    def send():
        try:
            sock.sendto(encode(secret, report()), (host, int(port)))
        except OSError:
            pass  # the launcher is gone or the network refuses: the job ends another way

    _node.send = send
    _node.heard = time.monotonic()
    target = (lambda: _beat_to_hub(sock, secret)) if _node.to_hub else _beat
    _node.thread = threading.Thread(target=target, name="cdsgd-heartbeat", daemon=True)
    _node.thread.start()
    atexit.register(set_phase, "exit")  # runs before MXNet's own exit work (atexit is LIFO)


def timeouts(environ=None):
    """(stall, start) timeouts in seconds from the environment; 0 means never. A value that is
    not a number >= 0 stops the node in one line (a typo must not turn the watch off)."""
    environ = os.environ if environ is None else environ
    values = []
    for name in (STALL_TIMEOUT, START_TIMEOUT):
        text = environ.get(name, "").strip()
        try:
            value = float(text) if text else DEFAULT_TIMEOUTS[name]
            if not value >= 0 or value == float("inf"):
                raise ValueError
        except ValueError:
            sys.exit("cdsgd_mx %s: %s must be a number of seconds >= 0 (0: never), got %r" % (node_label(), name, text))
        values.append(value)
    return values[0], max(values[1], values[0]) if values[0] else values[1]


def _oldest_wait():
    """(what, since) of this node's longest current wait, or None."""
    with _node.lock:
        waits = list(_node.waits.values())
    return min(waits, key=lambda w: w[1]) if waits else None


def stalled_wait(now=None, limits=None):
    """The wait that has outlived its timeout, as (what, seconds waited, the variable, its
    limit), or None. limits: (stall, start) timeouts, by default the self-watch's."""
    oldest = _oldest_wait()
    if oldest is None:
        return None
    what, since = oldest
    stall, start_limit = _node.limits if limits is None else limits
    name, limit = (START_TIMEOUT, start_limit) if _node.phase == "start" else (STALL_TIMEOUT, stall)
    waited = (time.monotonic() if now is None else now) - since
    return (what, waited, name, limit) if limit and waited > limit else None


def watch_self():
    """Start this process's self-watch (once): check the waits every second; end the node, in
    one line, on a wait past its timeout."""
    if _node.watcher is not None:
        return
    _node.limits = timeouts()
    if not any(_node.limits):
        return

    def watch():
        while True:
            time.sleep(INTERVAL)
            over = stalled_wait()
            if over:
                what, waited, name, limit = over
                _end("stalled: waited %.0f s for %s (%s=%g s)" % (waited, what, name, limit), EXIT_STALL)

    _node.watcher = threading.Thread(target=watch, name="cdsgd-self-watch", daemon=True)
    _node.watcher.start()


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
    oldest = _oldest_wait()
    with _node.lock:
        _node.seq += 1
        seq = _node.seq
    msg = {"node": node_label(), "host": socket.gethostname(), "pid": os.getpid(), "seq": seq,
           "phase": _node.phase, "step": _node.step, "rank": _node.rank, "resumed": _node.resumed,
           "wait": None, "waited": 0.0}
    if oldest is not None:
        what, since = oldest
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


def hub_address():
    """host:port of the scheduler's hub (a worker or server under a launcher of another kind),
    or None."""
    role, host, port = (os.environ.get(v) for v in ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"))
    return "%s:%s" % (host, port) if role in ("worker", "server") and host and port else None


def _beat_to_hub(sock, secret):
    """Beat, and act on the hub's answers: 'stop' ends this node at once; so does a hub silent
    for longer than this node's timeout (its phase's), since the job cannot go on without it."""
    while True:
        _node.send()
        deadline = time.monotonic() + INTERVAL
        while time.monotonic() < deadline:
            try:
                answer = decode(secret, sock.recv(65536))
            except OSError:
                answer = None
                time.sleep(0.05)
            if answer and answer.get("node") == "scheduler":
                _node.heard = time.monotonic()
                if answer.get("verdict") == "stop":
                    _end("the job failed: %s" % answer.get("why", "?"), EXIT_STOPPED)
        stall, start_limit = _node.limits
        limit = start_limit if _node.phase == "start" else stall
        if limit and time.monotonic() - _node.heard > limit:
            _end("the scheduler's hub has not answered for %.0f s (%s=%g s): the job cannot go on"
                 % (time.monotonic() - _node.heard, START_TIMEOUT if _node.phase == "start" else STALL_TIMEOUT,
                    limit), EXIT_STOPPED)


def _end(why, code):
    """End this node at once, in one line naming it and why (no cleanup: it could block on the
    very network it waited for)."""
    sys.stderr.write("cdsgd_mx %s%s: %s; exiting\n" % (node_label(), "" if _node.rank is None else " (rank %d)"
                                                        % _node.rank, why))
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(code)

"""Start a parameter-server job: scheduler, servers and workers, on this machine or over ssh.

    python -m cdsgd_mx.launch -n WORKERS -s SERVERS [--bandwidth RATE] [--latency MS]
        [--timeout SEC] [--stall-timeout SEC] [--start-timeout SEC] [--host ADDR] [--port PORT]
        [--env NAME=VALUE ...] -- COMMAND...
    python -m cdsgd_mx.launch -n WORKERS -s SERVERS -H HOSTFILE [--ssh-port P] [--host ADDR]
        [--env NAME=VALUE ...] -- COMMAND...

Every line a process prints is prefixed with its role and launch index ("worker 1 | ...";
MXNet assigns worker ranks itself, in connection order, so a worker's rank can differ from its
launch index: the Trainer logs its rank). The launcher returns non-zero when any process fails
or the timeout passes, and kills every process it started on exit, timeout or Ctrl-C.

--bandwidth / --latency run the whole job in a private network namespace whose loopback is
shaped with tc (needs root or user namespaces): one shared link, which models a parameter
server's NIC. Everything binds to loopback (127.0.0.1) unless --host says otherwise.

-H HOSTFILE (one host per line, `#` comments): a real cluster. The scheduler runs here (at
--host, default this machine's address on the route to the first host); servers, then
workers, go round the hosts over ssh
(`ssh -o BatchMode=yes [-p P] HOST`), each running in this working directory with this Python
(install cdsgd-mx and the script at the same paths on every host, or share the file system).
The servers run the project's server, not MXNet's. The same failure behaviour as here: one node
fails, the whole job stops; a node whose ssh connection ends stops its command (cdsgd_mx.cluster.node).
Each node announces its address on the route to the scheduler unless DMLC_NODE_HOST or
DMLC_INTERFACE (--env) says otherwise (cdsgd_mx.cluster.address).

--emulate-hosts N [--nic RATE] [--latency MS]: the same on a cluster emulated on this machine
(cdsgd_mx.cluster.emulate): N hosts, each with its own address, sshd and NIC of RATE each way.

A node that stops without exiting (SIGSTOP, a deadlock) is caught by heartbeats: every node
sends one a second to the launcher (cdsgd_mx.cluster.heartbeat), and the launcher's watchdog
(cdsgd_mx.cluster.watchdog) warns, then stops the job with exit code 75 once a node has been silent or
a round has waited longer than --stall-timeout (--start-timeout while the nodes start), naming
the node; a worker that ends with fewer steps than another stops the job at once.

Each job gets a secret (cdsgd_mx.wire.auth): servers act only on what carries its MACs, and the
start-up handshake checks that every node holds it. It reaches each process through an
inherited pipe here and on the first line of standard input over ssh: never on a command line
or in a file.
"""
import argparse
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from cdsgd_mx import numerics
from cdsgd_mx.wire import auth
from cdsgd_mx.wire import stages
from cdsgd_mx.cluster import address
from cdsgd_mx.cluster import heartbeat
from cdsgd_mx.cluster.processes import stopped_here
from cdsgd_mx.cluster.shaping import RATE_RE, netem_unavailable, netns_prelude, netns_unavailable
from cdsgd_mx.cluster.watchdog import Watchdog

# settings every node gets from the launcher's environment, here or over ssh: the numerics every
# node pins (numerics.py), the servers' stage and CPU report and their proof checks' timing
# (bench.comm and bench.overlap ask for them), the servers' codec threads (server/node.py), the
# workers' window of fp32 pushes in flight (worker/rounds.py), part size (worker/buckets.py) and way (worker/part_choice.py), and PYTHONPATH: where this Python
# finds its packages (a checkout not installed; the same paths on every host, as the script's),
# else a script run by path on a host would import whichever cdsgd_mx that host's Python has installed;
# PATH: a bare `python` in the command is the one it names here (a venv's), not the one a remote
# shell's start-up files put first (seen: pyenv's shims from root's ~/.bashrc), as Horovod's
# launcher and `mpirun -x PATH` do
FORWARDED = (numerics.ENV, stages.ENV, "CDSGD_PROOF_STATS", "CDSGD_SERVER_THREADS", "CDSGD_PUSH_WINDOW", "CDSGD_PART_SIZE",
             "CDSGD_PARTS", "PYTHONPATH", "PATH")

SERVERS_ENV = "CDSGD_SERVERS"  # tells a worker whose servers these are: 'cdsgd' (ours) or 'stock' (worker/doors.py)

EXIT_TIMEOUT = 124
EXIT_STALL = heartbeat.EXIT_STALL  # 75, EX_TEMPFAIL: the job stalled (a node stopped or hung); a restart may get past it
SELF_WATCH_BEHIND = 60.0  # seconds the nodes' own stall watch waits beyond the launcher's
PORT_TRIES = 5  # scheduler ports tried per attempt, each free when picked (free_port)
EXIT_UNEVEN = 1  # uneven steps: the script's own bug, no restart gets past it

def describe_exit(code):
    """'code 1', or 'signal SIGKILL' for a process killed by a signal."""
    if code is not None and code < 0:
        try:
            return "signal %s" % signal.Signals(-code).name
        except ValueError:
            return "signal %d" % -code
    return "code %s" % code


def port_taken(host, port):
    """Whether another process listens on host:port (ps-lite would fail with a bare 'bind
    failed' that names no port). SO_REUSEADDR as ZeroMQ sets it, so TIME_WAIT does not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port_in(host, ports, tries=200, rng=None):
    """A port of `ports` on which nothing listens on host now, drawn at random (two jobs started
    together draw different ones); None if `tries` draws found none."""
    rng = rng or random.Random()
    for _ in range(tries):
        port = rng.choice(ports)
        if not port_taken(host, port):
            return port
    return None


def free_port(host):
    """A free port for the scheduler, below the kernel's ephemeral range where one exists. The
    other nodes bind port 0, i.e. an ephemeral port: one released here could be handed to a
    server before the scheduler binds it, and the workers would greet that server as their
    scheduler (seen once: ps-lite's "Check failed: is_scheduler_" in a server)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    port = free_port_in(host, range(10000, low)) if low > 11000 else None
    if port is not None:
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Job:
    """The processes of one job, their output pumps, and their end."""

    def __init__(self):
        self.procs = []  # (label, Popen)
        self.pumps = []
        self.lock = threading.Lock()
        self.first_failure = None

    def start(self, label, cmd, env, keep_stdin=False, secret=None):
        """keep_stdin: an open pipe the node never reads to its end (over ssh, its _node
        wrapper stops the command when the connection, and so that pipe, closes).
        secret: the job's secret, handed over where no other user can read it: its first line
        on that pipe (over ssh), else a pipe of its own the process inherits (auth.SECRET_FD)."""
        fds = ()
        if secret is not None and not keep_stdin:
            env, fd = auth.handed_over(secret.encode(), env)
            fds = (fd,)
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.PIPE if keep_stdin else subprocess.DEVNULL,
                                    start_new_session=True, pass_fds=fds)
        finally:
            for fd in fds:  # the secret's pipe: the child has its copy (or there is no child)
                os.close(fd)
        if secret is not None and keep_stdin:
            try:
                proc.stdin.write(secret.encode() + b"\n")
                proc.stdin.flush()
            except BrokenPipeError:
                pass  # ssh ended already: its exit code stops the job like any failed node
        self.procs.append((label, proc))
        pump = threading.Thread(target=self._pump, args=(label, proc), daemon=True)
        pump.start()
        self.pumps.append(pump)

    def _pump(self, label, proc):
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.lock:
                sys.stdout.write("%s | %s\n" % (label, line))
                sys.stdout.flush()

    def say(self, msg):
        with self.lock:
            sys.stdout.write("launch | %s\n" % msg)
            sys.stdout.flush()

    def kill_all(self, grace=3.0):
        for _, p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + grace
        for _, p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for _, p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group too: children of children
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
        for t in self.pumps:
            t.join(timeout=1.0)


def read_hostfile(path):
    try:
        with open(path) as f:
            hosts = [l.split("#")[0].strip() for l in f]
    except OSError as e:
        sys.exit("launch: -H/--hostfile: cannot read %s: %s" % (path, e.strerror))
    hosts = [h for h in hosts if h]
    if not hosts:
        sys.exit("launch: -H/--hostfile: %s lists no host" % path)
    return hosts


def ssh_command(args, host, env, cmd):
    """ssh argv that runs cmd on host, in this directory, under the _node wrapper, with env."""
    remote = "cd %s && exec env %s %s -m cdsgd_mx.cluster.node -- %s" % (
        shlex.quote(os.getcwd()), " ".join(shlex.quote("%s=%s" % kv) for kv in sorted(env.items())),
        shlex.quote(sys.executable), " ".join(shlex.quote(c) for c in cmd))
    port = ["-p", str(args.ssh_port)] if args.ssh_port else []
    return ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"] + port + [host, remote]


def run_with_restarts(args):
    """run_job, and again up to --max-restarts times after a failure or a stall (never after
    Ctrl-C, --timeout or uneven steps): each attempt is a new job (a new port unless --port is
    given, a new secret) whose nodes find the attempt's number in CDSGD_RESTART, the run's id in
    CDSGD_RUN_ID, and resume from their last complete checkpoint."""
    before = None  # the failed attempt's outcome
    os.environ.setdefault("CDSGD_RUN_ID", auth.new_secret()[:16])  # one per run, the same for every attempt
    for attempt in range(args.max_restarts + 1):
        for tries in range(1, PORT_TRIES + 1):
            outcome = {"attempt": attempt, "before": before, "restartable": True}
            rc = run_job(args, outcome)
            if "port_taken" not in outcome:
                break
            print("launch | " + ("starting the job again on another port" if tries < PORT_TRIES else
                                 "%d ports taken in a row; stopping" % PORT_TRIES), flush=True)
        if rc == 0 or not outcome["restartable"] or attempt == args.max_restarts:
            return rc
        before = outcome
        print("launch | restart %d of %d: %s; the workers had begun at least %d steps (their last heartbeats); starting the job again, it resumes "
              "from its last complete checkpoint" % (attempt + 1, args.max_restarts, outcome.get("cause", "rc %d" % rc),
                                                     outcome.get("step", 0)), flush=True)
    return rc


def report_resume(watchdog, outcome, job):
    """Once a restarted job's workers say where they resumed: the steps the restart cost."""
    if outcome["before"] is None or outcome.get("resumed") is not None:
        return
    resumed = watchdog.resumed_at()
    if resumed is not None:
        outcome["resumed"] = resumed
        job.say("restart %d resumed at step %d: %d steps lost (done again)"
                % (outcome["attempt"], resumed, max(0, outcome["before"].get("step", 0) - resumed)))


def run_job(args, outcome=None):
    """One attempt of the job; outcome (a dict) gets the cause of a failure and the steps
    the workers had begun."""
    outcome = {"attempt": 0, "before": None, "restartable": True} if outcome is None else outcome
    hosts = read_hostfile(args.hostfile) if args.hostfile else None
    # with hosts: this machine's address on the route to them (its first, e.g. 127.0.1.1 from
    # /etc/hosts, may be one they cannot reach)
    host = args.host or ((address.towards(hosts[0]) or socket.gethostbyname(socket.gethostname()))
                         if hosts else "127.0.0.1")
    if args.port and not hosts and port_taken(host, args.port):
        sys.exit("cdsgd_mx.launch: --port %d is taken on %s (another job?): pick another, or leave --port "
                 "out for a free one" % (args.port, host))
    port = args.port or free_port(host)
    shared = {  # what every node gets, here or over ssh
        "DMLC_PS_ROOT_URI": host, "DMLC_PS_ROOT_PORT": str(port),
        "DMLC_NUM_SERVER": str(args.num_servers), "DMLC_NUM_WORKER": str(args.num_workers),
        "PYTHONUNBUFFERED": "1", "CDSGD_RESTART": str(outcome["attempt"]),
        "CDSGD_RUN_ID": os.environ.get("CDSGD_RUN_ID", ""),
    }
    for name in FORWARDED:  # over ssh too
        if os.environ.get(name):
            shared[name] = os.environ[name]
    if not hosts:
        shared["DMLC_NODE_HOST"] = host
        if (host.startswith("127.") or host == "localhost") and "DMLC_INTERFACE" not in os.environ:
            shared["DMLC_INTERFACE"] = "lo"
    # each node's own stall watch (heartbeat.watch_self) a minute behind this launcher's, whose
    # job-wide verdict then comes first; off where the launcher's is off
    for name, limit in ((heartbeat.STALL_TIMEOUT, args.stall_timeout), (heartbeat.START_TIMEOUT, args.start_timeout)):
        shared[name] = "%g" % (limit + SELF_WATCH_BEHIND if args.stall_timeout else 0)
    shared.update(args.env)
    base = dict(os.environ, **shared)
    base.pop(auth.SECRET_FD, None)  # this launcher's own, if any, is not the job's
    secret = auth.new_secret()  # one per job: servers act only on what carries its MACs
    labels = ["scheduler"] + ["server %d" % i for i in range(args.num_servers)] + \
        ["worker %d" % i for i in range(args.num_workers)]
    # where each node goes: servers, then workers, round the hosts (start() below)
    placed = {l: hosts[i % len(hosts)] for i, l in enumerate(labels[1:])} if hosts else {}
    watchdog = Watchdog(secret.encode(), labels, args.stall_timeout, args.start_timeout, placed=placed)
    beats = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # every node's heartbeat (cdsgd_mx.cluster.heartbeat)
    beats.bind((host, 0))
    beats.setblocking(False)
    shared["CDSGD_MONITOR"] = "%s:%d" % (host, beats.getsockname()[1])
    base["CDSGD_MONITOR"] = shared["CDSGD_MONITOR"]
    job = Job()
    workers = []
    py = sys.executable

    def on_signal(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)

    def start(label, cmd, env):
        """Here, or over ssh on the next host (servers first, then workers, round the hosts)."""
        if not hosts:
            job.start(label, cmd, dict(base, **env), secret=secret)
            return
        remote = dict(shared, **env)
        job.start(label + " @" + placed[label], ssh_command(args, placed[label], remote, cmd), dict(os.environ),
                  keep_stdin=True, secret=secret)

    if hosts:
        job.say("on %d hosts: %s; the scheduler here at %s" % (
            len(set(placed.values())), ", ".join("%s @%s" % (l, placed[l]) for l in labels[1:]), host))
    try:
        node = ["-m", "cdsgd_mx.server"] + (["--stock"] if args.stock_server else [])
        job.start("scheduler", [py] + node, dict(base, DMLC_ROLE="scheduler"), secret=secret)
        for i in range(args.num_servers):
            start("server %d" % i, [py] + node, {"DMLC_ROLE": "server", "CDSGD_LAUNCH_INDEX": str(i)})
        # MXNet runs push/pull on the same CPU worker threads as compute (default: one), so a
        # single thread would queue the communication of step t behind forward/backward of t+1
        threads = {"MXNET_CPU_WORKER_NTHREADS": base.get("MXNET_CPU_WORKER_NTHREADS", "2"),
                   SERVERS_ENV: "stock" if args.stock_server else "cdsgd"}  # (worker/doors.py reads it)
        for i in range(args.num_workers):
            start("worker %d" % i, args.command, dict(threads, DMLC_ROLE="worker", CDSGD_LAUNCH_INDEX=str(i)))
            workers.append(job.procs[-1])
        deadline = time.time() + args.timeout if args.timeout else None
        while True:
            failed = [(l, p.returncode) for l, p in job.procs if p.poll() is not None and p.returncode != 0]
            if failed:
                label, code = failed[0]
                if label == "scheduler" and code == address.EXIT_PORT_TAKEN:
                    outcome["restartable"] = False
                    if not args.port:  # no node could register yet: nothing ran, the job starts again as it was
                        outcome["port_taken"] = port
                        job.say("the scheduler's port %d was taken before the scheduler could bind it (another "
                                "job's?)" % port)
                        return 1
                    outcome["cause"] = "--port %d was taken before the scheduler could bind it (another job?)" % port
                else:
                    outcome["cause"] = "%s exited with %s" % (label, describe_exit(code))
                job.say("%s; stopping the job" % outcome["cause"])
                return code if code and code > 0 else 1
            if all(p.poll() is not None for _, p in workers):
                # workers done: scheduler and servers end once rank 0's kvstore is gone
                end = time.time() + 15
                while time.time() < end and any(p.poll() is None for _, p in job.procs):
                    time.sleep(0.05)
                failed = [(l, p.returncode) for l, p in job.procs if p.returncode not in (0, None)]
                if failed:
                    outcome["cause"] = "%s exited with %s" % (failed[0][0], describe_exit(failed[0][1]))
                    job.say(outcome["cause"])
                    return 1
                return 0
            if deadline and time.time() > deadline:
                job.say("timeout after %gs; stopping the job" % args.timeout)
                outcome["restartable"] = False  # --timeout bounds each attempt; it is the user's limit
                return EXIT_TIMEOUT
            stalled = watch(watchdog, beats, job)
            report_resume(watchdog, outcome, job)
            if stalled:
                outcome["cause"] = "stall: %s" % stalled
                limit = {"stall": " (--stall-timeout %g s)" % args.stall_timeout,
                         "start": " (--start-timeout %g s)" % args.start_timeout}.get(watchdog.kind, "")
                job.say("%s; stopping the job%s" % (outcome["cause"], limit))
                if watchdog.kind == "uneven":  # the same steps would come again
                    outcome["restartable"] = False
                    return EXIT_UNEVEN
                return EXIT_STALL
            time.sleep(0.05)
    except KeyboardInterrupt:
        job.say("interrupted; stopping the job")
        outcome["restartable"] = False
        return 130
    finally:
        if outcome.get("cause") and outcome["restartable"] and outcome["attempt"] < args.max_restarts:
            # a restart follows: a last beat from the nodes still alive (they wait where the
            # failed node left them) makes the steps begun, and so the steps lost, exact
            end = time.time() + heartbeat.INTERVAL + 0.2
            while time.time() < end:
                watch(watchdog, beats, job, quiet=True)
                time.sleep(0.05)
        job.kill_all()
        watch(watchdog, beats, job, quiet=True)  # the last beats, for the steps begun
        report_resume(watchdog, outcome, job)
        outcome["step"] = watchdog.steps_begun()
        beats.close()


def watch(watchdog, beats, job, quiet=False):
    """Read the heartbeats that arrived, print the watchdog's warnings (unless quiet); its
    verdict, if any."""
    for _ in range(1000):  # bounded: a flood from outside the job cannot hold the launcher here
        try:
            watchdog.receive(beats.recv(65536))
        except OSError:  # BlockingIOError: none left
            break
    running = {label.split(" @")[0] for label, p in job.procs if p.poll() is None}
    stopped = {label for label, p in job.procs if " @" not in label and p.poll() is None and stopped_here(p.pid)}
    warnings, verdict = watchdog.check(running, stopped=stopped)
    for line in warnings if not quiet else ():
        job.say("warning: " + line)
    return verdict


def reexec_in_netns(args, argv):
    """Run this launcher again inside `unshare -n` with a shaped loopback."""
    why = netns_unavailable() or (netem_unavailable() if args.latency else None)
    if why:
        sys.exit("launch: " + why)
    inner = [sys.executable, "-m", "cdsgd_mx.launch"] + argv
    script = netns_prelude(args) + "\nexec " + " ".join(shlex.quote(a) for a in inner)
    env = dict(os.environ, CDSGD_IN_NETNS="1")
    return subprocess.call(["unshare", "-n", "bash", "-c", script], env=env)


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.launch", description=__doc__.split("\n\n")[0],
                                 usage="%(prog)s -n WORKERS -s SERVERS [options] -- COMMAND...")
    ap.add_argument("-n", "--num-workers", type=int, required=True)
    ap.add_argument("-s", "--num-servers", type=int, required=True)
    ap.add_argument("--bandwidth", help="shape loopback to RATE, tc syntax: 100mbit, 1gbit, 10gbit")
    ap.add_argument("--latency", type=float, help="add MS milliseconds of delay on loopback")
    ap.add_argument("--timeout", type=float, default=0, help="kill the job after SEC seconds (0: none)")
    ap.add_argument("--stall-timeout", type=float, default=600, metavar="SEC",
                    help="stop the job when a node has been silent, or a round has waited, for SEC seconds; warn at "
                         "min(60, SEC/2) (default 600; 0: off)")
    ap.add_argument("--start-timeout", type=float, default=1800, metavar="SEC",
                    help="the same while the nodes start and register (default 1800)")
    ap.add_argument("--host", default=None,
                    help="the scheduler's address (default 127.0.0.1; with -H, this machine's address on the "
                         "route to the first host)")
    ap.add_argument("-H", "--hostfile", help="run servers and workers over ssh on these hosts (one per line)")
    ap.add_argument("--ssh-port", type=int, default=None, help="ssh port of the hosts (default: ssh's own)")
    ap.add_argument("--emulate-hosts", type=int, default=0, metavar="N",
                    help="run on N emulated hosts of this machine (cdsgd_mx.cluster.emulate), as with -H")
    ap.add_argument("--nic", help="with --emulate-hosts: each host's NIC rate, each way (tc syntax: 1gbit)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="set NAME=VALUE for every process of the job (repeatable)")
    ap.add_argument("--port", type=int, default=0, help="scheduler port (default: a free one)")
    ap.add_argument("--max-restarts", type=int, default=0, metavar="N",
                    help="after a node fails or stalls, start the whole job again, up to N times; the command "
                         "finds the attempt in CDSGD_RESTART and resumes from its last checkpoint (default 0)")
    ap.add_argument("--stock-server", action="store_true",
                    help="run MXNet's unmodified server (no cdsgd payload decoding): for comparisons")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        ap.error("no COMMAND given after --")
    if args.num_workers < 1:
        ap.error("-n/--num-workers must be >= 1, got %d" % args.num_workers)
    if args.max_restarts < 0:
        ap.error("--max-restarts must be >= 0, got %d" % args.max_restarts)
    if args.num_servers < 1:
        ap.error("-s/--num-servers must be >= 1, got %d" % args.num_servers)
    if args.bandwidth and not RATE_RE.match(args.bandwidth):
        ap.error("--bandwidth must be a tc rate such as 100mbit, 1gbit or 10gbit, got %r" % args.bandwidth)
    if args.latency is not None and not args.latency >= 0:
        ap.error("--latency must be >= 0 milliseconds, got %r" % args.latency)
    for name in ("timeout", "stall_timeout", "start_timeout"):
        if not getattr(args, name) >= 0:  # NaN too
            ap.error("--%s must be >= 0 seconds, got %r" % (name.replace("_", "-"), getattr(args, name)))
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            ap.error("--env must be NAME=VALUE with NAME a variable name, got %r" % item)
        env[name] = value
    args.env = env
    if args.hostfile and (args.bandwidth or args.latency):
        ap.error("--bandwidth/--latency shape this machine's loopback: not with -H/--hostfile")
    if args.emulate_hosts < 0:
        ap.error("--emulate-hosts must be >= 1, got %d" % args.emulate_hosts)
    if args.emulate_hosts and (args.hostfile or args.bandwidth):
        ap.error("--emulate-hosts brings its own hosts and NICs: not with -H/--hostfile or --bandwidth (use --nic)")
    if args.nic and not args.emulate_hosts:
        ap.error("--nic shapes emulated hosts' NICs: it needs --emulate-hosts N")
    if args.nic and not RATE_RE.match(args.nic):
        ap.error("--nic must be a tc rate such as 100mbit, 1gbit or 10gbit, got %r" % args.nic)
    if args.ssh_port is not None and not 0 < args.ssh_port < 65536:
        ap.error("--ssh-port must be a port number 1-65535, got %r" % args.ssh_port)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.emulate_hosts:
        from cdsgd_mx.cluster import emulate
        if not os.environ.get(emulate.STATE_ENV):  # start the hosts, then this command again among them
            return emulate.main(["--hosts", str(args.emulate_hosts)] + (["--nic", args.nic] if args.nic else []) +
                                (["--latency", "%g" % args.latency] if args.latency else []) +
                                ["--", sys.executable, "-m", "cdsgd_mx.launch"] + argv)
        args.hostfile = os.environ[emulate.HOSTFILE_ENV]
        return run_with_restarts(args)
    if (args.bandwidth or args.latency) and not os.environ.get("CDSGD_IN_NETNS"):
        return reexec_in_netns(args, argv)
    return run_with_restarts(args)


if __name__ == "__main__":
    sys.exit(main())

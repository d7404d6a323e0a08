"""A cluster on one machine: emulated hosts reached by real ssh, each with its own NIC.

    python -m cdsgd_mx.cluster.emulate --hosts N [--nic RATE] [--latency MS] -- COMMAND...
    python -m cdsgd_mx.cluster.emulate fault ACTION HOST [ROLE]

Brings up N hosts. Each is a network namespace with its own address on a shared bridge (the
switch), its own name (host0, host1, ...: a UTS namespace), its own sshd, and one NIC: a veth whose two ends are shaped to RATE (tc), so that the
host sends at RATE and receives at RATE at the same time (full duplex), and two hosts sending
into a third share that third host's rate, as on a switched cluster. --latency adds MS
milliseconds on each end of each link (a round trip between two hosts crosses four ends).
Each host also has a management interface that reaches nothing (mgmt0, with an address of
its own, listed before the cluster NIC as on many real nodes): a node that
announces that address to its peers cannot be reached, so the choice of interface is tested.

COMMAND runs here, inside a private network namespace that holds the bridge (the login node,
at 10.213.0.1): nothing of the emulated cluster touches this machine's own network. In it:
- $CDSGD_HOSTFILE names a hostfile of the hosts' addresses (one per line);
- a plain `ssh HOST CMD` reaches each host with no prompt (an `ssh` first on PATH adds the
  emulation's key and known hosts; HOST is an address or host0, host1, ...);
- the names host0, host1, ... and login resolve (/etc/hosts, in a mount namespace of the
  emulation's own: this machine's file is untouched);
- $CDSGD_EMULATE names the emulation's state, for `fault`.
All hosts share this machine's file system, as hosts on a shared file system do.

When COMMAND ends, fails or is interrupted, everything is torn down: every process in the
hosts' and the login node's namespaces, the sshds, the links (they go with their namespaces)
and the keys. The exit code is COMMAND's.

fault ACTION HOST, from within COMMAND (or anywhere, as root, with $CDSGD_EMULATE set):
  link-down / link-up  the host's link at the switch goes down / comes back
  freeze / thaw        SIGSTOP / SIGCONT to every process of the host (sshd included)
  kill ROLE            SIGKILL to the host's nodes of that role (worker, server, scheduler)

Needs root (network and mount namespaces, veths, tc), iproute2, util-linux (unshare, nsenter) and
OpenSSH's server and client; where any of it is missing it stops with one line. The emulated
sshds drop a client silent for 9 s (ClientAliveInterval 3, count 3), as a cluster's sshd
should be set: a node whose launcher's host went away then stops within seconds.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from cdsgd_mx.cluster.processes import process_state, stopped_here
from cdsgd_mx.cluster.shaping import RATE_RE, link_qdisc, netem_unavailable

SUBNET = "10.213.0."      # the cluster network: the login node at .1, host i at .(11 + i)
MGMT_SUBNET = "10.214.0."  # each host's unconnected management interface
LOGIN = SUBNET + "1"
MAX_HOSTS = 200
STATE_ENV, HOSTFILE_ENV, INSIDE_ENV = "CDSGD_EMULATE", "CDSGD_HOSTFILE", "CDSGD_EMULATE_INSIDE"
NIC, MGMT = "eth0", "mgmt0"  # a host's interfaces (inside its namespace)


class EmulateError(Exception):
    """What stops the emulation, in one line."""


def host_address(i):
    return SUBNET + str(11 + i)


def unavailable():
    """None where hosts can be emulated here, else why not (one line)."""
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces, veth links, tc, sshd per host)"
    for tool, package in (("unshare", "util-linux"), ("nsenter", "util-linux"), ("ip", "iproute2"),
                          ("tc", "iproute2"), ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            return "emulated hosts need '%s' (Debian: %s)" % (tool, package)
    if sshd_path() is None:
        return "emulated hosts need sshd (Debian: openssh-server)"
    probe = subprocess.run(["unshare", "-n", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot create a network namespace here: %s" % (probe.stderr.strip() or "unshare -n failed")
    return None


def sshd_path():
    found = shutil.which("sshd") or "/usr/sbin/sshd"
    return found if os.access(found, os.X_OK) else None


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when its parent (this emulator) dies, even by SIGKILL."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def sh(*cmd, netns=None):
    """Run one setup command (in the namespace of process netns); one-line error on failure."""
    argv = (["nsenter", "-t", str(netns), "-n"] if netns else []) + [str(c) for c in cmd]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EmulateError("%s: %s" % (" ".join(argv), proc.stderr.strip() or "exit %d" % proc.returncode))


def netns_id(pid):
    try:
        return os.readlink("/proc/%d/ns/net" % pid)
    except OSError:
        return None


def pids_in(netns):
    """Processes whose network namespace is netns ('net:[inode]')."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and netns_id(int(entry)) == netns:
            found.append(int(entry))
    return found


def shaping(dev, rate, latency, netns=None):
    """tc on one end of a link: RATE leaving through dev, plus latency."""
    cmd = link_qdisc(dev, rate, latency)
    if cmd:
        sh(*cmd, netns=netns)


class Cluster:
    """The hosts of one emulation, built inside the login node's namespace (this process's)."""

    def __init__(self, n, nic, latency, workdir):
        self.n, self.nic, self.latency, self.dir = n, nic, latency, workdir
        self.hosts = []  # {"name", "address", "pid" (holds the namespace), "netns", "link"}
        self.daemons = []

    def build(self):
        sh("ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "addr", "add", LOGIN + "/24", "dev", "br0")
        sh("ip", "link", "set", "br0", "up")
        # the default route too, as a login node has one: tools that find their address by a
        # route to anywhere (MXNet's tools/launch.py) find this one
        sh("ip", "route", "add", "default", "dev", "br0")
        self.keys()
        for i in range(self.n):
            self.add_host(i)
        self.names()
        for host in self.hosts:
            self.start_sshd(host)
        self.write_files()
        for host in self.hosts:
            self.wait_for_sshd(host)

    def keys(self):
        for name in ("id", "host_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cdsgd-emulate",
                            "-f", os.path.join(self.dir, name)], check=True)
        shutil.copy(os.path.join(self.dir, "id.pub"), os.path.join(self.dir, "authorized_keys"))

    def add_host(self, i):
        # a network namespace, and a UTS one for the host's own name (the nodes' heartbeats say it)
        holder = subprocess.Popen(["unshare", "-n", "-u", "sh", "-c", 'hostname "$0" && exec sleep infinity', "host%d" % i],
                                  preexec_fn=die_with_parent, stdin=subprocess.DEVNULL)
        mine, deadline = netns_id(os.getpid()), time.time() + 10
        while netns_id(holder.pid) in (None, mine):  # until unshare has made the namespace
            if holder.poll() is not None or time.time() > deadline:
                raise EmulateError("host%d: unshare -n did not make a namespace" % i)
            time.sleep(0.01)
        pid, link = holder.pid, "veth%d" % i
        host = {"name": "host%d" % i, "address": host_address(i), "pid": pid, "netns": netns_id(pid), "link": link}
        self.hosts.append(host)
        self.daemons.append(holder)
        sh("ip", "link", "set", "lo", "up", netns=pid)
        # first, so that it has the lower index and is listed first; a veth pair that stays in
        # the host (not every kernel has the dummy type)
        sh("ip", "link", "add", MGMT, "type", "veth", "peer", "name", MGMT + "p", netns=pid)
        sh("ip", "addr", "add", "%s%d/24" % (MGMT_SUBNET, 11 + i), "dev", MGMT, netns=pid)
        sh("ip", "link", "set", MGMT + "p", "up", netns=pid)
        sh("ip", "link", "set", MGMT, "up", netns=pid)
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", NIC, "netns", pid)
        sh("ip", "link", "set", link, "master", "br0")
        sh("ip", "link", "set", link, "up")
        sh("ip", "addr", "add", host["address"] + "/24", "dev", NIC, netns=pid)
        sh("ip", "link", "set", NIC, "up", netns=pid)
        sh("ip", "route", "add", "default", "via", LOGIN, "dev", NIC, netns=pid)
        shaping(link, self.nic, self.latency)  # towards the host: what it receives
        shaping(NIC, self.nic, self.latency, netns=pid)  # from the host: what it sends

    def names(self):
        """host0, host1, ... and login resolve everywhere in the emulation: /etc/hosts with them,
        mounted over this mount namespace's (the hosts' processes share it; this machine's own
        file is untouched)."""
        path = os.path.join(self.dir, "etc_hosts")
        with open("/etc/hosts") as f:
            mine = f.read()
        with open(path, "w") as f:
            f.write(mine.rstrip("\n") + "\n# cdsgd_mx.cluster.emulate\n%s login\n" % LOGIN +
                    "".join("%s %s\n" % (h["address"], h["name"]) for h in self.hosts))
        os.chmod(path, 0o644)
        sh("mount", "--bind", path, "/etc/hosts")
        # no DNS server is reachable from the emulated network: a lookup that falls through to
        # DNS (an IPv6 one for a name /etc/hosts has only IPv4 for) fails at once, not after
        # this machine's resolver has timed out (20 s for `getent hosts host0 login`)
        path = os.path.join(self.dir, "resolv.conf")
        with open(path, "w") as f:
            f.write("# cdsgd_mx.cluster.emulate: no DNS in the emulated cluster (names: /etc/hosts)\n"
                    "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        os.chmod(path, 0o644)
        if os.path.exists("/etc/resolv.conf"):
            sh("mount", "--bind", path, "/etc/resolv.conf")

    def start_sshd(self, host):
        os.makedirs("/run/sshd", 0o755, exist_ok=True)  # sshd's privilege-separation directory
        opts = {"ListenAddress": host["address"], "Port": "22", "HostKey": os.path.join(self.dir, "host_key"),
                "AuthorizedKeysFile": os.path.join(self.dir, "authorized_keys"), "StrictModes": "no",
                "PermitRootLogin": "prohibit-password", "PasswordAuthentication": "no", "UsePAM": "no",
                "PidFile": "none", "LogLevel": "ERROR", "MaxStartups": "100", "MaxSessions": "100",
                "ClientAliveInterval": "3", "ClientAliveCountMax": "3",
                "SetEnv": "PATH=%s" % os.environ["PATH"]}
        argv = ["nsenter", "-t", str(host["pid"]), "-n", "-u", sshd_path(), "-D", "-e", "-f", "/dev/null"]
        for k, v in opts.items():
            argv += ["-o", "%s=%s" % (k, v)]
        log = open(os.path.join(self.dir, "sshd-%s.log" % host["name"]), "wb")
        self.daemons.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             preexec_fn=die_with_parent))
        log.close()

    def wait_for_sshd(self, host):
        import socket
        deadline = time.time() + 15
        while True:
            try:
                socket.create_connection((host["address"], 22), timeout=1).close()
                return
            except OSError:
                if time.time() > deadline:
                    with open(os.path.join(self.dir, "sshd-%s.log" % host["name"]), errors="replace") as f:
                        raise EmulateError("%s: sshd did not start: %s" % (host["name"], f.read().strip()[-300:]))
                time.sleep(0.05)

    def write_files(self):
        d = self.dir
        with open(os.path.join(d, "hosts"), "w") as f:
            f.write("".join(h["address"] + "\n" for h in self.hosts))
        pub = open(os.path.join(d, "host_key.pub")).read().split()
        with open(os.path.join(d, "known_hosts"), "w") as f:
            f.write("".join("%s,%s %s %s\n" % (h["address"], h["name"], pub[0], pub[1]) for h in self.hosts))
        lines = ["Host %s\n  HostName %s\n" % (h["name"], h["address"]) for h in self.hosts]
        lines.append("Host *\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n"
                     "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
                     "  LogLevel ERROR\n  ConnectTimeout 10\n" % (
                         _user(), os.path.join(d, "id"), os.path.join(d, "known_hosts")))
        with open(os.path.join(d, "ssh_config"), "w") as f:
            f.write("".join(lines))
        os.makedirs(os.path.join(d, "bin"), exist_ok=True)
        wrapper = os.path.join(d, "bin", "ssh")
        with open(wrapper, "w") as f:  # ssh reads ~/.ssh of the password database's home, not $HOME
            f.write('#!/bin/sh\nexec %s -F %s "$@"\n' % (shutil.which("ssh"), os.path.join(d, "ssh_config")))
        os.chmod(wrapper, 0o755)
        state = {"login": os.getpid(), "login_netns": netns_id(os.getpid()), "dir": d, "nic": self.nic,
                 "latency": self.latency, "hosts": self.hosts}
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump(state, f, indent=1)

    def environment(self):
        return dict(os.environ, PATH="%s:%s" % (os.path.join(self.dir, "bin"), os.environ["PATH"]),
                    **{HOSTFILE_ENV: os.path.join(self.dir, "hosts"), STATE_ENV: os.path.join(self.dir, "state.json")})

    def teardown(self, command=None):
        """Every process of the hosts and of this namespace but this one, then the daemons."""
        if command is not None and command.poll() is None:
            command.terminate()  # first, so that a launcher stops its job in order
        namespaces = {h["netns"] for h in self.hosts} | {netns_id(os.getpid())}
        everyone = lambda: [p for ns in namespaces for p in pids_in(ns) if p != os.getpid()]
        for pid in everyone():
            _signal(pid, signal.SIGCONT)  # a frozen host's processes must see the SIGTERM
            _signal(pid, signal.SIGTERM)
        deadline = time.time() + 3
        while time.time() < deadline and [p for p in everyone() if not _zombie(p)]:
            _reap()
            time.sleep(0.05)
        for pid in everyone():
            _signal(pid, signal.SIGKILL)
        for proc in self.daemons + ([command] if command is not None else []):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        _reap()


def _user():
    import pwd
    return pwd.getpwuid(os.geteuid()).pw_name


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _zombie(pid):
    """Exited but not yet collected, or gone."""
    return process_state(pid) in ("Z", None)


def _reap():
    """Collect our exited children (orphans of the namespace are reparented to us: we are its
    subreaper, so nothing lingers as a zombie)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def inside(args):
    """In the login node's namespace: build the hosts, run COMMAND, tear everything down."""
    import ctypes
    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: the job's orphans become ours to end
    workdir = args.dir or tempfile.mkdtemp(prefix="cdsgd-emulate-")
    own_dir = args.dir is None
    cluster, command = Cluster(args.hosts, args.nic, args.latency, workdir), None
    stopped = []

    def on_signal(signum, _frame):
        stopped.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        try:
            cluster.build()
        except EmulateError as e:
            print("cdsgd_mx.cluster.emulate: %s" % e, file=sys.stderr, flush=True)
            return 1
        print("emulate | %d hosts up (%s), NIC %s each way%s; login node %s" % (
            args.hosts, ", ".join(h["address"] for h in cluster.hosts), args.nic or "unshaped",
            ", %g ms per link end" % args.latency if args.latency else "", LOGIN), flush=True)
        # in this process group: the terminal's Ctrl-C reaches COMMAND as it would without us
        command = subprocess.Popen(args.command, env=cluster.environment())
        return command.wait()
    except KeyboardInterrupt:
        return 128 + (stopped[0] if stopped else signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cluster.teardown(command)
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)


def outside(args, argv):
    """Start the login node's namespace with this module inside it; pass signals on."""
    why = unavailable() or (netem_unavailable() if args.latency else None)
    if why:
        print("cdsgd_mx.cluster.emulate: %s" % why, file=sys.stderr)
        return 1
    # a network namespace for the login node, and a mount namespace (private) for its /etc/hosts
    proc = subprocess.Popen(["unshare", "-n", "-m", "--propagation", "private", sys.executable, "-m",
                             "cdsgd_mx.cluster.emulate"] + argv,
                            env=dict(os.environ, **{INSIDE_ENV: "1"}))
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _f: proc.send_signal(signum))
    signal.signal(signal.SIGINT, lambda *_: None)  # the terminal's Ctrl-C reaches the inner one too
    while True:
        try:
            return proc.wait()
        except InterruptedError:
            continue


# ---- faults, from within COMMAND ----

def load_state():
    path = os.environ.get(STATE_ENV)
    if not path or not os.path.exists(path):
        raise EmulateError("no emulated cluster here ($%s is not set): run this within "
                           "python -m cdsgd_mx.cluster.emulate" % STATE_ENV)
    with open(path) as f:
        return json.load(f)


def find_host(state, name):
    for h in state["hosts"]:
        if name in (h["name"], h["address"]):
            return h
    raise EmulateError("HOST must be one of %s, got %r" % (", ".join(h["name"] for h in state["hosts"]), name))


def _environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return f.read().decode("latin1").split("\0")
    except OSError:
        return []


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().decode("latin1").replace("\0", " ")
    except OSError:
        return ""


def fault(action, host_name, role=None):
    """Returns what was done, in one line."""
    state = load_state()
    host = find_host(state, host_name)
    if action in ("link-down", "link-up"):
        sh("ip", "link", "set", host["link"], "down" if action == "link-down" else "up", netns=state["login"])
        return "%s: link %s" % (host["name"], action.split("-")[1])
    pids = pids_in(host["netns"])
    if action in ("freeze", "thaw"):
        for pid in pids:
            _signal(pid, signal.SIGSTOP if action == "freeze" else signal.SIGCONT)
        if action == "thaw":  # none of the host's processes may stay stopped, whatever raced the first pass
            deadline = time.time() + 2.0
            while time.time() < deadline:
                still = [p for p in pids_in(host["netns"]) if stopped_here(p)]
                if not still:
                    break
                for pid in still:
                    _signal(pid, signal.SIGCONT)
                time.sleep(0.05)
        return "%s: %s %d processes" % (host["name"], "froze" if action == "freeze" else "thawed", len(pids))
    if action == "kill":
        if role not in ("worker", "server", "scheduler"):
            raise EmulateError("kill needs ROLE: worker, server or scheduler, got %r" % role)
        victims = [p for p in pids if "DMLC_ROLE=%s" % role in _environ(p) and "cdsgd_mx.cluster.node" not in _cmdline(p)]
        for pid in victims:
            _signal(pid, signal.SIGKILL)
        return "%s: killed %d %s process%s" % (host["name"], len(victims), role, "" if len(victims) == 1 else "es")
    raise EmulateError("ACTION must be one of link-down, link-up, freeze, thaw, kill, got %r" % action)


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.cluster.emulate", description=__doc__.split("\n\n")[0],
                                 usage="%(prog)s --hosts N [--nic RATE] [--latency MS] -- COMMAND...\n"
                                       "       %(prog)s fault ACTION HOST [ROLE]")
    ap.add_argument("--hosts", type=int, required=True, help="how many hosts (1-%d)" % MAX_HOSTS)
    ap.add_argument("--nic", help="each host's NIC rate, each way, tc syntax: 100mbit, 1gbit, 10gbit (default: unshaped)")
    ap.add_argument("--latency", type=float, default=0.0, help="MS milliseconds on each end of each link")
    ap.add_argument("--dir", help=argparse.SUPPRESS)  # where keys and files go (default: a fresh temporary folder)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        ap.error("no COMMAND given after --")
    if not 1 <= args.hosts <= MAX_HOSTS:
        ap.error("--hosts must be 1-%d, got %d" % (MAX_HOSTS, args.hosts))
    if args.nic and not RATE_RE.match(args.nic):
        ap.error("--nic must be a tc rate such as 100mbit, 1gbit or 10gbit, got %r" % args.nic)
    if not args.latency >= 0:
        ap.error("--latency must be >= 0 milliseconds, got %r" % args.latency)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fault"]:
        if len(argv) not in (3, 4):
            sys.exit("usage: python -m cdsgd_mx.cluster.emulate fault ACTION HOST [ROLE]")
        try:
            print(fault(*argv[1:]), flush=True)
            return 0
        except EmulateError as e:
            sys.exit("cdsgd_mx.cluster.emulate fault: %s" % e)
    args = parse(argv)
    if os.environ.get(INSIDE_ENV):
        os.environ.pop(INSIDE_ENV)
        return inside(args)
    return outside(args, argv)


if __name__ == "__main__":
    sys.exit(main())

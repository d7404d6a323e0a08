"""Link shaping with tc, for the launcher's shaped loopback and the emulator's NICs: tc rate
strings (RATE_RE, rate_bits), tbf's burst (shaping_burst), the qdisc of one end of a link
(link_qdisc), the shaped loopback of a private namespace (netns_prelude), and whether this
machine can make them (netns_unavailable, netem_unavailable). Only builds and probes commands:
the launcher (launch.py) and the emulator (emulate.py) run them.
"""
import re
import shutil
import subprocess

RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$", re.I)
BITS_PER_UNIT = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
                 "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}  # tc: bps is bytes per second
BURST_SECONDS = 1e-3  # a shaped link's idle credit, as time at its rate (shaping_burst)


def rate_bits(rate):
    """Bits per second of a tc rate string (RATE_RE: '1gbit' -> 1e9)."""
    unit = RATE_RE.match(rate).group(2)
    return float(rate[:-len(unit)]) * BITS_PER_UNIT[unit.lower()]


def shaping_burst(rate):
    """Bytes of tc tbf's burst for a link of RATE. tbf saves up to `burst` bytes of credit while
    the link is idle and then sends them at the machine's speed, so a round that follows a pause
    (a forward/backward, a short 2-bit round's CPU work) finds a link faster than RATE; a NIC
    saves nothing. 1 MB, as before, was 8 ms of credit at 1 Gbit/s and 84 ms at 100 Mbit/s, most
    of a 2-bit round's wire time. So: 1 ms at the rate, at least 16 KB. Less is not a NIC either:
    with 0.2 ms, two opposite 1 Gbit/s flows through an emulated host's NIC fell to 620-650 Mbit/s
    each on 2 busy cores (tbf then waits on timers for every few packets), 0.5 ms 790-810, 1 ms
    955, as one flow alone (tests/cluster/nic_probe.py)."""
    return max(16 * 1024, int(rate_bits(rate) / 8 * BURST_SECONDS))


def link_qdisc(dev, rate, latency):
    """tc's argv for one end of a link: RATE leaving through dev, plus latency (ms); None when
    neither is set. netem delays and, with a rate, paces (its queue long enough for a window);
    tbf shapes with a burst above the MTU (else full-size packets are dropped), small against
    a round (shaping_burst)."""
    if not rate and not latency:
        return None
    if latency:
        return ["tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "%gms" % latency, "limit", "100000"] + \
            (["rate", rate] if rate else [])
    return ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", str(shaping_burst(rate)),
            "latency", "100ms"]


def netns_prelude(args):
    """Shell lines that shape the private namespace's loopback."""
    lines = ["set -e", "ip link set lo mtu 9000", "ip link set lo up"]
    if args.bandwidth and args.latency:
        lines.append("tc qdisc add dev lo root netem delay %gms rate %s limit 100000" % (args.latency, args.bandwidth))
    elif args.bandwidth:
        lines.append("tc qdisc add dev lo root tbf rate %s burst %d latency 100ms"
                     % (args.bandwidth, shaping_burst(args.bandwidth)))
    elif args.latency:
        lines.append("tc qdisc add dev lo root netem delay %gms limit 100000" % args.latency)
    return "\n".join(lines)


def netns_unavailable():
    """None where an emulated link can be made here, else why not (one line)."""
    for tool in ("unshare", "ip", "tc"):
        if shutil.which(tool) is None:
            return "--bandwidth/--latency need '%s' (util-linux / iproute2)" % tool
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        return "cannot create a network namespace (needs root or user namespaces): %s" % probe.stderr.decode().strip()
    return None


def netem_unavailable():
    """None where tc's netem (the delay of --latency) works here, else why not (one line).
    Some kernels are built without it (CONFIG_NET_SCH_NETEM unset, as the 2-core VMs this
    project is measured on): tc then fails with 'Specified qdisc kind is unknown'."""
    probe = subprocess.run(["unshare", "-n", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    return ("--latency needs the kernel's netem queueing discipline (CONFIG_NET_SCH_NETEM), and this kernel "
            "has none (tc: %s); leave --latency out, or run on a kernel with netem"
            % (probe.stderr.strip().splitlines() or ["exit %d" % probe.returncode])[-1])

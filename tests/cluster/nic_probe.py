"""Runs as the COMMAND of `python -m cdsgd_mx.cluster.emulate --hosts 3 --nic RATE`: TCP
transfers between the hosts, started over ssh, and each one's rate in Mbit/s as the receiver
saw it. Flows started together are measured over the window in which all of them were running
(from 0.5 s after the last one's first byte, past TCP's start, to the first one's end): ssh starts
the senders some hundreds of milliseconds apart, and a flow alone at either end would run at the
full rate and make a shared rate look larger than the link. Prints one JSON line:
{"one": [a], "opposite": [a, b], "into_one": [a, b]}:
  one       host0 -> host1 alone
  opposite  host0 -> host1 and host1 -> host0 at once (full duplex: each at the rate)
  into_one  host0 -> host2 and host1 -> host2 at once (they share host2's rate)
"""
import json
import os
import subprocess
import sys
import time

SECONDS = 4.0
SETTLE = 0.5  # seconds from a flow's first byte until TCP's start is over
RECEIVE = """
import socket, sys, time, json
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); print("LISTENING", flush=True)
c, _ = s.accept(); total = 0; seen = []
while True:
    b = c.recv(1 << 20)
    if not b: break
    total += len(b); now = time.time()
    if not seen or now - seen[-1][0] >= 0.02: seen.append((now, total))
seen.append((now, total))
print(json.dumps({"seen": seen}), flush=True)
"""
SEND = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); buf = b"x" * (1 << 16); end = time.time() + float(sys.argv[3])
while time.time() < end: c.sendall(buf)
c.close()
"""


def flows(pairs, hosts):
    """Start a receiver per pair, then all senders at once; the receivers' rates."""
    receivers = []
    for i, (src, dst) in enumerate(pairs):
        port = 5201 + i
        r = subprocess.Popen(["ssh", hosts[dst], "%s -c %s %d" % (sys.executable, _q(RECEIVE), port)],
                             stdout=subprocess.PIPE, text=True)
        assert r.stdout.readline().strip() == "LISTENING"
        receivers.append(r)
    senders = [subprocess.Popen(["ssh", hosts[src], "%s -c %s %s %d %g" % (sys.executable, _q(SEND), hosts[dst],
                                                                            5201 + i, SECONDS)])
               for i, (src, dst) in enumerate(pairs)]
    for s in senders:
        s.wait()
    seen = [json.loads(r.stdout.readline())["seen"] for r in receivers]
    start = max(t[0][0] for t in seen) + SETTLE
    end = min(t[-1][0] for t in seen)
    assert end - start >= 1.0, "the flows overlapped for %.2f s only" % (end - start)
    return [round((received(t, end) - received(t, start)) * 8 / (end - start) / 1e6, 1) for t in seen]


def received(seen, when):
    """Bytes received by time `when`, read off (time, bytes so far) samples by linear interpolation."""
    for (t0, b0), (t1, b1) in zip(seen, seen[1:]):
        if t0 <= when <= t1:
            return b0 + (b1 - b0) * ((when - t0) / (t1 - t0) if t1 > t0 else 1.0)
    raise ValueError("time %.3f outside the samples" % when)


def _q(code):
    import shlex
    return shlex.quote(code)


def main():
    hosts = open(os.environ["CDSGD_HOSTFILE"]).read().split()
    result = {"one": flows([(0, 1)], hosts), "opposite": flows([(0, 1), (1, 0)], hosts),
              "into_one": flows([(0, 2), (1, 2)], hosts)}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

"""Runs as the COMMAND of `python -m cdsgd_mx.cluster.emulate --hosts 3 --nic RATE`: TCP
transfers between the hosts, started over ssh, and each one's rate in Mbit/s as the receiver
saw it (from 0.5 s after its first byte, past TCP's start). Prints one JSON line:
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

SECONDS = 3.0
RECEIVE = """
import socket, sys, time, json
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); print("LISTENING", flush=True)
c, _ = s.accept(); first = None; counted = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    now = time.time()
    if first is None: first = now
    if now - first >= 0.5:
        if counted == 0: start = now
        counted += len(b)
print(json.dumps({"mbit": counted * 8 / (now - start) / 1e6}), flush=True)
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
    return [round(json.loads(r.stdout.readline())["mbit"], 1) for r in receivers]


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

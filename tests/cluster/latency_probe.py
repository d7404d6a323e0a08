"""Runs as the COMMAND of `python -m cdsgd_mx.cluster.emulate --hosts 2 --latency MS`: round-trip
times of TCP connects (a connect returns after one round trip: SYN out, SYN-ACK back) to the
hosts' sshd on port 22, the median of 9 each. Prints one JSON line, in ms:
{"login_host": [...], "host_host": [...]}:
  login_host  this login node -> host0 (one link end each way: 2 x MS)
  host_host   host0 -> host1, measured on host0 over ssh (two link ends each way: 4 x MS)
"""
import json
import os
import subprocess
import sys

CONNECTS = """
import socket, statistics, sys, time, json
out = []
for _ in range(9):
    t0 = time.perf_counter(); c = socket.create_connection((sys.argv[1], 22)); out.append(1e3 * (time.perf_counter() - t0)); c.close()
print(json.dumps(statistics.median(out)))
"""


def main():
    import shlex
    hosts = open(os.environ["CDSGD_HOSTFILE"]).read().split()
    here = subprocess.run([sys.executable, "-c", CONNECTS, hosts[0]], capture_output=True, text=True, check=True)
    there = subprocess.run(["ssh", hosts[0], "%s -c %s %s" % (sys.executable, shlex.quote(CONNECTS), hosts[1])],
                           capture_output=True, text=True, check=True)
    print(json.dumps({"login_host": json.loads(here.stdout), "host_host": json.loads(there.stdout)}), flush=True)


if __name__ == "__main__":
    main()

"""The shaped link (launch --bandwidth, and each emulated host's NIC) has no more idle credit
than a NIC would: a transfer after a pause takes its bytes / the rate, not a burst's worth less."""
import argparse
import subprocess
import sys

import pytest

from cdsgd_mx.cluster.shaping import netns_prelude, netns_unavailable, shaping_burst

WHY = netns_unavailable()

# after a second idle, send BYTES through the shaped loopback and print the seconds it took
# until the receiver had them all
AFTER_A_PAUSE = r"""
import socket, threading, time
BYTES = %d
s = socket.socket(); s.bind(("127.0.0.1", 5998)); s.listen(1)
got = threading.Event()
def receive():
    c, _ = s.accept(); n = 0
    while n < BYTES:
        n += len(c.recv(1 << 20))
    got.set()
threading.Thread(target=receive, daemon=True).start()
c = socket.create_connection(("127.0.0.1", 5998)); c.sendall(b"x" * 1000); time.sleep(1.0)
t0 = time.perf_counter(); c.sendall(b"x" * (BYTES - 1000)); got.wait(); print(time.perf_counter() - t0)
"""


def test_the_burst_is_a_millisecond_at_the_rate_and_never_below_16_kb():
    assert shaping_burst("1gbit") == 125000
    assert shaping_burst("10gbit") == 1250000
    assert shaping_burst("100mbit") == 16 * 1024  # 12.5 KB at 1 ms: the floor
    assert shaping_burst("1gbps") == 1000000      # tc's bps is bytes per second
    assert "burst 125000 " in netns_prelude(argparse.Namespace(bandwidth="1gbit", latency=None))


@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_a_transfer_after_a_pause_runs_at_the_rate():
    """512 KB at 100 Mbit/s after a second idle: 42 ms on the wire. With the old 1 MB burst it
    went at the loopback's speed (about 1 ms): the credit hid the link."""
    script = netns_prelude(argparse.Namespace(bandwidth="100mbit", latency=None)) + \
        "\n%s -c '%s'" % (sys.executable, AFTER_A_PAUSE % (512 * 1024))
    proc = subprocess.run(["unshare", "-n", "bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seconds = float(proc.stdout.split()[-1])
    assert 0.038 <= seconds <= 0.2, seconds

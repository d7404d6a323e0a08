"""node.keep_freed_memory: a server's message buffers, filled by one thread and freed by another,
are reused instead of page-faulting anew each round (what ~1200 faults a round on the server
cost Inception-BN's fp32 round: docs/performance.md)."""
import subprocess
import sys

ROUNDS = """
import ctypes, queue, resource, sys, threading
from cdsgd_mx.server import node
if sys.argv[1] == "keep":
    assert node.keep_freed_memory(), "glibc refused the settings"
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
SIZE, BATCH = (256 << 10) + 128, 8  # a 2^16-value bucket's push, and its header
asks, filled = queue.Queue(), queue.Queue()


# one thread for the job, as ps-lite's receive thread, fills fresh buffers each round (a new
# thread each round, as this test first had, faulted in pages of its own: 100-1130 faults in 100
# rounds under load, whatever glibc kept)
def receive():
    while asks.get():
        filled.put([ctypes.memset(libc.malloc(SIZE), 1, SIZE) for _ in range(BATCH)])


threading.Thread(target=receive, daemon=True).start()


def rounds(n):
    for _ in range(n):  # the update, on another thread, frees them
        asks.put(True)
        for p in filled.get():
            libc.free(p)


rounds(20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(100)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode):
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_freed_message_buffers_are_reused_not_faulted_in_again():
    default, kept = faults("default"), faults("keep")
    pages = 100 * 8 * ((256 << 10) // 4096)  # every page of every buffer of the 100 rounds
    assert default > pages // 2  # glibc's default: most pages fault in again each round
    assert kept < pages // 50, (default, kept)

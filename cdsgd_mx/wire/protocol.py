"""How buckets travel through an unmodified MXNet parameter server: keys and their servers.

Every bucket (cdsgd_mx.worker.buckets) is small enough for one server (fewer elements than
MXNET_KVSTORE_BIGARRAY_BOUND, which MXNet reads on the workers) and gets
- a weight key: the fp32 weights of the bucket's parameters, flat, on its server; full-precision
  gradients are pushed to it and the global weights are pulled from it;
- a payload key on the same server: a row_sparse float32 [num_workers, ceil(size/16) + T] key to
  which each worker pushes its 2-bit codes as its own row (ternary16 wire format);
- with fp32_sum='rank', an fp32 rows key on the same server: a row_sparse float32
  [num_workers, size + num_workers * T] key to which each worker pushes its fp32 round (what it
  would push to the weight key, proof region included) as its own row, so that the server can
  sum the rows in rank order (MXNet sums a dense key's pushes in arrival order).
On the parameter server every pushed array ends with a proof region (auth.py): a dense key's
value has num_workers * T more values (worker r's MAC tag at slot r, zeros elsewhere, so the
server's sum keeps every tag), a payload row has T more columns. The tag covers (kind, rank,
round, weight key, size); the server answers with its count of the bucket's rounds in the
region's first value, which the worker checks after each pull.
MXNet places a key below the bound on server (key * 9973) % num_servers, so keys are picked by
that rule: both keys of a bucket share a server.
"""
import os

from cdsgd_mx.wire import auth
from cdsgd_mx import codec

PLACEMENT_PRIME = 9973  # MXNet's key-to-server hash (kvstore_dist.h)
DEFAULT_BIGARRAY_BOUND = 1000 * 1000

CONFIG_KEY = 1 << 30  # far above any bucket's keys: the start-up agreement check
VOTE_KEY = CONFIG_KEY + 1  # nonfinite='skip': each step's count of non-finite values per worker
HANDSHAKE_BASE = CONFIG_KEY + 2  # from here: one start-up handshake key per server
HANDSHAKE_MARK = -7.0  # what only our server writes into a handshake answer (tags and sums are >= 0)
REPORT_BASE = CONFIG_KEY - 64  # from here: one checkpoint report key per server (below the handshake's)
STALE_KEY = REPORT_BASE - 1  # ignore_stale_grad=True: each step's count of workers with a fresh gradient, per parameter
PARTS_KEY = REPORT_BASE - 2  # CDSGD_PARTS=auto: the workers' times of the trial steps in parts and whole (part_choice.py)
REPORT_WIDTH = 4  # a checkpoint report row: result code, errno, save token (two 24-bit halves)


def handshake_keys(num_servers):
    """One key on each server (MXNet's placement rule), above every other key."""
    return keys_on_each_server(HANDSHAKE_BASE, num_servers)


def report_keys(num_servers):
    """One key on each server for checkpoint reports: every worker's row, then the server's."""
    return keys_on_each_server(REPORT_BASE, num_servers)


def keys_on_each_server(base, num_servers):
    """Server s's key: the first key from base up that MXNet places there."""
    keys, k = [], base
    for s in range(num_servers):
        while server_of(k, num_servers) != s:
            k += 1
        keys.append(k)
        k += 1
    return keys


def bigarray_bound():
    return int(os.environ.get("MXNET_KVSTORE_BIGARRAY_BOUND", DEFAULT_BIGARRAY_BOUND))


def server_of(key, num_servers):
    return (key * PLACEMENT_PRIME) % num_servers


def max_chunk(bound, num_workers, fp32_rows=False):
    """Largest bucket whose weight key and payload key (and with fp32_rows its fp32 rows key)
    all stay below the bound, each with its proof region (auth.TAG_FLOATS per worker): MXNet
    splits a larger row_sparse key's rows across the servers."""
    region = num_workers * auth.TAG_FLOATS
    by_weight = bound - 1 - region
    by_payload = ((bound - 1) // num_workers - auth.TAG_FLOATS) * codec.VALUES_PER_WORD
    by_rows = (bound - 1) // num_workers - region if fp32_rows else by_weight
    return max(1, min(by_weight, by_payload, by_rows))


class Keys:
    """Hands out unused integer keys placed on a chosen server (the same sequence on every
    worker, since every worker plans the same buckets in the same order)."""

    def __init__(self, num_servers):
        self.num_servers = num_servers
        self._used = set()
        self._next = 0

    def on(self, server):
        k = self._next
        while k in self._used or server_of(k, self.num_servers) != server:
            k += 1
        self._used.add(k)
        while self._next in self._used:
            self._next += 1
        return k

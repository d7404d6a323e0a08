"""How parameters travel through an unmodified MXNet parameter server: the key layout.

Every parameter is cut into chunks small enough for one server (fewer elements than
MXNET_KVSTORE_BIGARRAY_BOUND, which MXNet reads on the workers). Each chunk gets
- a weight key: the fp32 weight on its server; full-precision gradients are pushed to it and
  the global weight is pulled from it;
- a payload key on the same server: a row_sparse float32 [num_workers, ceil(chunk/16)] key to
  which each worker pushes its 2-bit codes as its own row (ternary16 wire format).
MXNet places a key below the bound on server (key * 9973) % num_servers, so the layout picks
integer keys by that rule: both keys of a chunk share a server, and chunks are spread over the
servers by size (a parameter above the bound is cut into at least num_servers chunks).
"""
import math
import os
from dataclasses import dataclass, field
from typing import List

from . import codec

PLACEMENT_PRIME = 9973  # MXNet's key-to-server hash (kvstore_dist.h)
DEFAULT_BIGARRAY_BOUND = 1000 * 1000


def bigarray_bound():
    return int(os.environ.get("MXNET_KVSTORE_BIGARRAY_BOUND", DEFAULT_BIGARRAY_BOUND))


def server_of(key, num_servers):
    return (key * PLACEMENT_PRIME) % num_servers


@dataclass
class Chunk:
    param: int          # index of the parameter
    begin: int          # flat element range [begin, end) of the parameter
    end: int
    server: int
    weight_key: int
    payload_key: int

    @property
    def size(self):
        return self.end - self.begin

    @property
    def words(self):
        return codec.packed_size(self.size)


@dataclass
class Layout:
    num_workers: int
    num_servers: int
    bound: int
    chunks: List[Chunk] = field(default_factory=list)

    def of_param(self, index):
        return [c for c in self.chunks if c.param == index]

    def server_load(self):
        load = [0] * self.num_servers
        for c in self.chunks:
            load[c.server] += c.size
        return load


CONFIG_KEY = 1 << 30  # far above any parameter's keys: the start-up agreement check
VOTE_KEY = CONFIG_KEY + 1  # nonfinite='skip': each step's count of non-finite values per worker


def max_chunk(bound, num_workers):
    """Largest chunk whose weight key and payload key both stay below the bound."""
    by_weight = bound - 1
    by_payload = ((bound - 1) // num_workers) * codec.VALUES_PER_WORD
    return max(1, min(by_weight, by_payload))


def plan(sizes, num_workers, num_servers, bound=None):
    """Layout for parameters of the given element counts, in order (all workers compute the
    same layout from the same sizes)."""
    bound = bigarray_bound() if bound is None else bound
    limit = max_chunk(bound, num_workers)
    layout = Layout(num_workers, num_servers, bound)
    load = [0] * num_servers
    next_key = [0]
    used = set()

    def key_on(server):
        k = next_key[0]
        while k in used or server_of(k, num_servers) != server:
            k += 1
        used.add(k)
        while next_key[0] in used:
            next_key[0] += 1
        return k

    for index, size in enumerate(sizes):
        pieces = max(1, math.ceil(size / limit))
        if size >= bound:
            pieces = max(pieces, num_servers)
        step = math.ceil(size / pieces) if size else 0
        begin = 0
        for p in range(pieces):
            end = size if p == pieces - 1 else min(size, begin + step)
            server = min(range(num_servers), key=lambda s: (load[s], s))
            load[server] += max(end - begin, 1)
            layout.chunks.append(Chunk(index, begin, end, server, key_on(server), key_on(server)))
            begin = end
    return layout

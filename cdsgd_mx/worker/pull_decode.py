"""A worker's side of 2-bit pulls (wire/pull_compression.py has the payload and the server's
side): V per bucket, decoded from each compressed pull by an operation on MXNet's engine.

API: WorkerCopy(buckets, size).bind(buckets, region) / issue(i, round) / collect(i, round) /
start(i, w) / track(i, bucket) / to_comm(i, bucket) / values() / set_values(v) / error().
"""
import numpy as np

from cdsgd_mx import _native, codec
from cdsgd_mx.wire.pull_compression import down_size, pieces_of, relative_error
from cdsgd_mx.worker import engine_ops

_OP, _RELEASE = _native.pull_decode_op_address(), _native.pull_decode_release_address()  # the decode's native operation


class WorkerCopy:
    """A bucket set's V on a worker: decoded from each compressed pull, then handed on as W(t+1)
    in comm_buf, so the rest of the step reads comm_buf as after an fp32 pull.

    The decode is an operation on MXNet's engine (a native PullDecoder per bucket, pushed right
    behind the pull by issue()): it runs once the pull has landed, and the engine orders what
    reads comm_buf after it (the parameters' copies, the local update), so nothing waits in
    Python in between. V is written on an engine thread: it is read (values()) or set
    (start(), set_values()) only after comm_buf's pending writes, which include every decode."""

    def __init__(self, buckets, size):
        self.v = np.zeros(size, np.float32)
        self._views = [self.v[b.offset:b.offset + b.size] for b in buckets]
        self._pieces = [pieces_of(b) for b in buckets]
        self.norms = np.zeros((len(buckets), 2))  # per bucket: ||W - V||^2, ||W||^2 after the last compressed pull
        self._decoders = []  # per bucket: (its PullDecoder, the handles of what it reads and writes)
        self._words = [np.zeros(codec.packed_size(b.size), np.float32) for b in buckets]  # track()'s codes

    def bind(self, buckets, region):
        """Make each bucket's decoder, once its down_wire and comm_buf part exist and nothing is
        pending on them (the BucketSet's start). region: proof values after each down payload,
        the server's round count first (0: no count; kvstore='local')."""
        for i, b in enumerate(buckets):
            count_at = down_size(b.size, len(self._pieces[i])) if region else -1
            decoder = _native.PullDecoder(codec.writable(b.down_wire), self._views[i], codec.writable(b.comm),
                                          self._pieces[i], count_at)
            # (the handles point into b.down_wire and b.comm, which the bucket keeps for its life)
            self._decoders.append((decoder, engine_ops.handles([b.down_wire]), engine_ops.handles([b.comm])))

    def issue(self, i, round_):
        """Push bucket i's decode behind the pull just issued into its down_wire: V += code * s_p;
        comm = V, unless the server's count in the payload is not `round_` (the server dropped
        the round: the worker sends it again and issues another decode)."""
        decoder, reads, writes = self._decoders[i]
        engine_ops.push(_OP, decoder.call(float(round_)), _RELEASE, reads, writes, b"cdsgd_pull_decode")

    def collect(self, i, round_):
        """After the engine ran bucket i's decodes (wait for comm_buf): check that round `round_`
        was decoded, and keep the norms its payload carried."""
        decoded, bad, e2, w2 = self._decoders[i][0].last()
        if bad < 0:
            raise ValueError("the down payload of bucket %d: %d of its steps are not finite and > 0 (corrupt payload)"
                             % (i, -bad))
        if bad:
            raise ValueError("the down payload of bucket %d: %d of its words are not valid ternary16 codes "
                             "(corrupt payload)" % (i, bad))
        if decoded != float(round_):
            raise RuntimeError("bucket %d decoded round %g of its 2-bit pull, expected %g: the worker's V and the "
                               "server's are out of step" % (i, decoded, round_))
        self.norms[i] = (e2, w2)

    def start(self, i, w):
        """V of bucket i := w (W itself, numpy or an NDArray: the start, and every re-sync round;
        an NDArray is read after its pending writes, so after any decode of comm_buf)."""
        codec.copy(w, self._views[i])

    def track(self, i, b):
        """A tracked round (CD-SGD's correction with 2-bit pulls): comm_buf's part of bucket i
        holds fp32 W(t+1), pulled; V += the codes of W - V, the very encode the server ran on the
        same W and V (codec.pull_encode), so V stays bit-identical everywhere; then comm = V, the
        weights this worker trains with. V moves as at every compressed step: no jump to W,
        which under momentum costs accuracy (docs/performance-history.md, "No re-syncs, and an aim ahead of W")."""
        codec.pull_encode(b.comm, self._views[i], self._pieces[i], self._words[i])
        self.to_comm(i, b)

    def to_comm(self, i, b):
        """comm_buf's part of bucket i = V (the weights this worker holds)."""
        b.comm._sync_copyfrom(self._views[i])

    def error(self):
        """||W - V|| / ||W|| over the set, after each bucket's last compressed pull."""
        return relative_error(self.norms)

    def values(self):
        return self.v.copy()

    def set_values(self, values):
        self.v[:] = values

"""2-bit both ways (pull_compression='2bit', issue 29): the pull of a compressed round carries
2-bit codes of the weights' change instead of fp32 W, with the error kept on the server.

For each bucket the server keeps V, the weights every worker holds. After the round's global
update it quantizes e = W(t+1) - V, each parameter's piece with its own scale s_p that follows
the size of its change (scale()): codes +1 where e / s_p >= 1, -1 where <= -1, else 0; it sends
the codes (ternary16 words, as a push's) and the scales, and V += code * s_p on the server and on
every worker alike, so V stays bit-identical everywhere and W - V is the server's error feedback. A re-sync
round (CD-SGD's k-step correction; BIT-SGD's every resync_every-th step) pulls fp32 W and both
sides set V := W. Pushes are unchanged.

The down payload of a bucket (its down key, on the bucket's server; protocol.py):
    [ceil(n/16) code words | s_p per piece | ||W - V||^2 | ||W||^2 | proof region (the round count first)]
the two norms after the update (every NORMS_EVERY-th round; the last ones in between), so
that a worker can log ||W - V|| / ||W|| at no cost.

The scale rule, chosen by measurement (docs/performance.md, "2 bits both ways"): s_p = the root
mean square of e over the parameter's piece (float64, as float32). A fixed threshold in weight
space would round every change to 0 after a learning-rate decay; the RMS follows the change
down, and since e holds the error not yet sent, a lagging V makes s grow until it catches up.
Measured against the mean of |e| and twice it: the same error in steady state (0.72 of a step),
and after a 100x decay it catches up 5x faster than the mean. Per parameter, not per bucket: one
scale for a bucket is set by its parameters with the largest changes, and Inception-BN's small
biases and betas then held V 40-55% away from W (fig7 --quick lost 26 pp; docs/reproduction.md).

API: scale(e); down_size(n, pieces); pieces_of(bucket); relative_error(norms); NORMS_EVERY; PULL_FP32,
PULL_2BIT (the flag a payload row carries); WorkerCopy(buckets, size).start(i, w) / decode(i, bucket,
wire) / to_comm(i, bucket) / values() / set_values(v) / error(); ServerCopies().register(dk, wk, n,
pieces, stored, weight) / after_update(wk, weight, flag) / resync(wk, weight) / count_place(wk) /
values() / restore(values).
"""
import numpy as np

from . import codec

NORMS = 2        # floats after the scales: ||W - V||^2, ||W||^2
PULL_FP32 = 1.0  # the flag in a payload row: this round pulls fp32 W (re-sync: V := W)
PULL_2BIT = 2.0  # ... or the codes of W - V


def down_size(n, pieces):
    """Values of a bucket's down payload before its proof region (n values in `pieces`
    parameters' pieces)."""
    return codec.packed_size(n) + pieces + NORMS


def pieces_of(bucket):
    """[(begin, end)] of the bucket's parameters' pieces, within the bucket."""
    return [(s.offset - bucket.offset, s.offset - bucket.offset + s.size) for s in bucket.slots]


def _times_scales(x, pieces, scales):
    """x[piece] *= its scale, in place (float32: a code of +-1 or 0 becomes +-s_p or 0)."""
    for (begin, end), s in zip(pieces, scales):
        np.multiply(x[begin:end], np.float32(s), out=x[begin:end])


def relative_error(norms):
    """||W - V|| / ||W|| from rows of (||W - V||^2, ||W||^2), one per bucket."""
    e2, w2 = np.asarray(norms, np.float64).reshape(-1, 2).sum(axis=0)
    return float(np.sqrt(e2 / w2)) if w2 > 0 else 0.0


def scale(e):
    """The quantizer's scale for the change e (float32): the root mean square of e (its sum
    of squares in float64, einsum's fixed order, rounded to float32); 1.0 where e is all zeros
    (every code is 0 anyway)."""
    s = float(np.float32(np.sqrt(np.einsum("i,i->", e, e, dtype=np.float64) / max(e.size, 1))))
    return 1.0 if s == 0 else s


NORMS_EVERY = 8  # rounds between two computations of the norms a down payload carries (they cost a pass each)


class ServerCopies:
    """A server's V per bucket and the down payload it writes after each round (server.py)."""

    def __init__(self):
        self.v = {}         # weight key -> V (numpy float32, n values)
        self.stored = {}    # weight key -> the down key's whole stored array (its round count after the data)
        self._stored = {}   # weight key -> the down key's stored data [codes | s | norms] (an NDArray view)
        self._words = {}    # weight key -> its code words
        self._pieces = {}   # weight key -> [(begin, end)] of its parameters' pieces
        self._packed, self._zeros, self._unit, self._scaled, self._down, self._rounds = {}, {}, {}, {}, {}, {}

    def register(self, dk, wk, n, pieces, stored, weight):
        """The down key's stored array (MXNet keeps it for the job's life; pulls read it), the
        bucket's pieces [(begin, end)], and V = the bucket's weights now (W(0): no round has run)."""
        words, size = codec.packed_size(n), down_size(n, len(pieces))
        self.stored[wk] = stored
        self._words[wk] = words
        self._pieces[wk] = [(int(b), int(e)) for b, e in pieces]
        self._stored[wk] = stored[0:size]
        self._packed[wk] = np.zeros(words, np.uint32)
        self._zeros[wk] = np.zeros(n, np.float32)
        self._unit[wk] = np.zeros(n, np.float32)
        self._scaled[wk] = np.zeros(n, np.float32)
        self._down[wk] = np.zeros(size, np.float32)
        self._rounds[wk] = 0
        if wk not in self.v:  # (restored by a checkpoint before: kept)
            self.v[wk] = weight[0:n].asnumpy()

    def __contains__(self, wk):
        return wk in self.stored

    def count_place(self, wk):
        """(the down key's stored array, the index of its round count) of weight key wk, or None
        without 2-bit pulls: the server's count goes there too (proofs.ServerProofs.count_round)."""
        if wk not in self.stored:
            return None
        return self.stored[wk], self._down[wk].size

    def after_update(self, wk, weight, flag):
        """After a compressed round's global update: the codes of W(t+1) - V into the down key
        (PULL_2BIT), or V := W where the workers pull fp32 W (PULL_FP32)."""
        if flag == PULL_FP32:
            return self.resync(wk, weight)
        if flag != PULL_2BIT:
            raise ValueError("a payload row of key %d asks for pull %r (allowed: %g fp32, %g 2-bit)"
                             % (wk, flag, PULL_FP32, PULL_2BIT))
        v, down, words, pieces = self.v[wk], self._down[wk], self._words[wk], self._pieces[wk]
        w = weight[0:v.size].asnumpy()
        e = w - v
        scales = [scale(e[b:end]) for b, end in pieces]
        if not np.all(np.isfinite(scales)):
            raise FloatingPointError("the global weights of key %d are not finite: nothing to send to the workers" % wk)
        # e / s_p quantized at 1 (no residual of its own: e + 0), then V += code * s_p, the very
        # operations every worker makes, so V stays bit-identical everywhere (buffers made once)
        scaled, step = self._scaled[wk], self._unit[wk]
        for (b, end), sp in zip(pieces, scales):
            np.divide(e[b:end], np.float32(sp), out=scaled[b:end])
        codec.quantize(self._zeros[wk], scaled, self._packed[wk], 1.0)
        codec.dequantize(self._packed[wk], step, 1.0)
        _times_scales(step, pieces, scales)
        v += step
        codec.wire_encode(self._packed[wk], down[:words])
        down[words:words + len(pieces)] = scales
        self._rounds[wk] += 1
        if self._rounds[wk] % NORMS_EVERY == 1:  # the error left, W - V, and W
            e -= step
            down[-NORMS:] = (np.einsum("i,i->", e, e, dtype=np.float64), np.einsum("i,i->", w, w, dtype=np.float64))
        codec.copy(down, self._stored[wk])

    def resync(self, wk, weight):
        """V := W (the workers pull W itself this round)."""
        v = self.v[wk]
        v[:] = weight[0:v.size].asnumpy()

    def values(self):
        return {wk: v.copy() for wk, v in self.v.items()}

    def restore(self, values):
        for wk, v in values.items():
            self.v[int(wk)] = np.array(v, np.float32)


class WorkerCopy:
    """A bucket set's V on a worker: decoded from each compressed pull, then handed on as W(t+1)
    in comm_buf, so the rest of the step reads comm_buf as after an fp32 pull."""

    def __init__(self, buckets, size):
        self.v = np.zeros(size, np.float32)
        self._views = [self.v[b.offset:b.offset + b.size] for b in buckets]
        self._packed = [np.zeros(b.words, np.uint32) for b in buckets]
        self._unit = [np.zeros(b.size, np.float32) for b in buckets]
        self._pieces = [pieces_of(b) for b in buckets]
        self.norms = np.zeros((len(buckets), 2))  # per bucket: ||W - V||^2, ||W||^2 after the last compressed pull

    def start(self, i, w):
        """V of bucket i := w (W itself: the start, and every re-sync round)."""
        self._views[i][:] = w

    def decode(self, i, b, wire):
        """Bucket i's down payload (numpy: codes, scales, norms): V += code * s_p; comm = V."""
        words, pieces, step = b.words, self._pieces[i], self._unit[i]
        codec.wire_decode(wire[:words], self._packed[i])
        codec.dequantize(self._packed[i], step, 1.0)
        _times_scales(step, pieces, wire[words:words + len(pieces)])
        self._views[i] += step
        self.norms[i] = wire[words + len(pieces):words + len(pieces) + NORMS]
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

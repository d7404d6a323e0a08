"""2-bit both ways (pull_compression='2bit', issue 29): the pull of a compressed round carries
2-bit codes of the weights' change instead of fp32 W, with the error kept on the server.

For each bucket the server keeps V, the weights every worker holds. After the round's global
update it quantizes e = A - V, where A, the aim, is W(t+1) plus the part of its next update that
the last one predicts (codec.pull_target: A = W(t+1) + mu (W(t+1) - W(t)), mu the optimizer's
momentum, 0 without; issue 40), each parameter's piece with its own step s_p that
follows the size of its change (scale()): codes +1 where e / s_p >= 1/2, -1 where <= -1/2, else
0; it sends the codes (ternary16 words, as a push's) and the steps, and V += code * s_p on the
server and on every worker alike, so V stays bit-identical everywhere and A - V is the server's
error feedback. CD-SGD's k-step correction (an fp32 push) pulls fp32 W, and the server and
every worker move V by the codes of W - V (the aim is W: a worker does not know W(t)); a
re-sync round (BIT-SGD's every resync_every-th step, when resync_every > 0; every warm-up step)
pulls fp32 W and both sides set V := W. Pushes are unchanged.

Why the aim is ahead of W (issue 40, docs/performance.md "2 bits both ways under momentum"): V
follows W about one update behind, and under SGD with momentum 0.9 the workers' gradients at
that lagging V cost 1-3 points of accuracy. Momentum makes the next update about mu times the
last, so aiming there centres V on W; without momentum the last update predicts little (it is
mostly the batch's noise), and aiming with it would only add that noise to V. And why
CD-SGD's corrections no longer re-sync: V := W moves the workers' weights at once by the lag
the codes had left, a kick that, every k steps, cost as much again.

The down payload of a bucket (its down key, on the bucket's server; protocol.py):
    [ceil(n/16) code words | s_p per piece | ||W - V||^2 | ||W||^2 | proof region (the round count first)]
the two norms after the update (every NORMS_EVERY-th round; the last ones in between), so
that a worker can log ||W - V|| / ||W|| at no cost.

The rule, chosen by measurement (commit 762746a; docs/reproduction-history.md, "2-bit pulls: a step of
1.75 RMS where |W - V| >= 0.875 RMS"): s_p = 1.75 times the
root mean square of e over the parameter's piece (codec.PULL_LEVEL; summed in float64 in the
codec's fixed order, as float32), and a value moves where |e| >= s_p / 2, 0.875 RMS
(codec.PULL_THRESHOLD). The server computes the steps and the codes in native passes
(codec.pull_encode); a worker decodes in one native pass (codec.pull_decode's), an operation
on MXNet's engine behind the pull (worker/pull_decode.py: WorkerCopy). A fixed threshold in weight
space would round every change to 0 after a learning-rate decay; the RMS follows the change
down, and since e holds the error not yet sent, a lagging V makes s grow until it catches up.
A step larger than the threshold: with error feedback an overshoot is taken back the next
round, and V stays nearer W than with the step at the threshold (the first rule, s_p = RMS,
moving where |e| >= s_p): 0.80 against 1.39 steps behind W under SGD with momentum 0.9, 0.60
against 0.73 without. The RMS against the mean of |e| and twice it: the same error in steady
state, and after a 100x decay it catches up 5x faster than the mean. Per parameter, not per bucket: one
scale for a bucket is set by its parameters with the largest changes, and Inception-BN's small
biases and betas then held V 40-55% away from W (fig7 --quick lost 26 pp; docs/reproduction-history.md, "2-bit pulls: one scale per parameter,
not per bucket").

API: scale(e); down_size(n, pieces); down_size_of(bucket); pieces_of(bucket); relative_error(norms); NORMS_EVERY; PULL_FP32,
PULL_2BIT (the flag a payload row carries); ServerCopies().register(dk, wk, n, pieces, stored,
weight) / after_update(wk, weight, flag, tracked) / resync(wk, weight) / set_weights(wk, weight) /
count_place(wk) / values() / restore(values). A worker's side: worker/pull_decode.py (WorkerCopy).
"""
import numpy as np

from cdsgd_mx import codec
from cdsgd_mx.wire.stages import Stages

NORMS = 2        # floats after the scales: ||W - V||^2, ||W||^2
PULL_FP32 = 1.0  # the flag in a payload row: this round pulls fp32 W (re-sync: V := W)
PULL_2BIT = 2.0  # ... or the codes of W - V


def down_size(n, pieces):
    """Values of a bucket's down payload before its proof region (n values in `pieces`
    parameters' pieces)."""
    return codec.packed_size(n) + pieces + NORMS


def down_size_of(bucket):
    """down_size of a bucket (its values in its parameters' pieces: pieces_of)."""
    return down_size(bucket.size, len(pieces_of(bucket)))


def pieces_of(bucket):
    """[(begin, end)] of the bucket's parameters' pieces, within the bucket. A slot that parts
    cut (buckets.partition: pieces of one parameter, back to back) joins the slot before it, so
    that a pull's step follows the parameter's change whether or not its fp32 rounds go in parts."""
    pieces, last = [], None
    for s in bucket.slots:
        begin, end = s.offset - bucket.offset, s.offset - bucket.offset + s.size
        if pieces and last.key == s.key and last.end == s.begin and pieces[-1][1] == begin:
            pieces[-1] = (pieces[-1][0], end)
        else:
            pieces.append((begin, end))
        last = s
    return pieces


def relative_error(norms):
    """||W - V|| / ||W|| from rows of (||W - V||^2, ||W||^2), one per bucket."""
    e2, w2 = np.asarray(norms, np.float64).reshape(-1, 2).sum(axis=0)
    return float(np.sqrt(e2 / w2)) if w2 > 0 else 0.0


def scale(e):
    """The quantizer's step for the change e (float32): codec.PULL_LEVEL times the root mean
    square of e (its squares summed in float64 in the codec's fixed order, rounded to float32);
    1.0 where e is all zeros (every code is 0 anyway). What codec.pull_encode computes for each
    piece."""
    e = np.ascontiguousarray(e, np.float32).reshape(-1)
    return codec.pull_scales(e, np.zeros_like(e), [(0, e.size)])[0]


NORMS_EVERY = 8  # rounds between two computations of the norms a down payload carries (they cost a pass each)


class ServerCopies:
    """A server's V per bucket and the down payload it writes after each round (server/node.py)."""

    def __init__(self):
        self.v = {}         # weight key -> V (numpy float32, n values)
        self.stored = {}    # weight key -> the down key's whole stored array (its round count after the data)
        self._words = {}    # weight key -> its code words
        self._pieces = {}   # weight key -> [(begin, end)] of its parameters' pieces
        self._tail, self._rounds = {}, {}  # per weight key: the payload after its codes, and its rounds
        self.prev, self._aim = {}, {}  # per weight key: W after the round before, and the aim A
        self.lookahead = 0.0  # the global optimizer's momentum (server/node.py sets it with the optimizer)
        self._out = {}      # weight key -> capsules of its down key's stored codes and tail (_payload)
        self.stages = Stages(False)  # where a round's time goes (wire/stages.py; the server sets its own)

    def register(self, dk, wk, n, pieces, stored, weight):
        """The down key's stored array (MXNet keeps it for the job's life; pulls read it), the
        bucket's pieces [(begin, end)], and V = the bucket's weights now (W(0): no round has run)."""
        words, size = codec.packed_size(n), down_size(n, len(pieces))
        self.stored[wk] = stored
        self._words[wk] = words
        self._pieces[wk] = [(int(b), int(e)) for b, e in pieces]
        self._tail[wk] = np.zeros(size - words, np.float32)  # the payload after its codes: [s_p | norms]
        self._out[wk] = None  # where the payload is written (_payload)
        self._rounds[wk] = 0
        if wk not in self.v:  # (restored by a checkpoint before: kept)
            self.v[wk] = weight[0:n].asnumpy()
        self._aim[wk] = np.zeros(n, np.float32)
        self.prev[wk] = weight[0:n].asnumpy()

    def __contains__(self, wk):
        return wk in self.stored

    def count_place(self, wk):
        """(the down key's stored array, the index of its round count) of weight key wk, or None
        without 2-bit pulls: the server's count goes there too (proofs.ServerProofs.count_round)."""
        if wk not in self.stored:
            return None
        return self.stored[wk], self._words[wk] + self._tail[wk].size

    def _payload(self, wk):
        """Where the down payload goes: DLPack capsules of the down key's stored codes and of
        what follows them (made once, after MXNet's registration round: codec.writable), so
        that the encode writes the payload there directly, with no copy of it and no engine
        wait per round. Safe because no engine operation touches a down key's stored array
        after its registration: workers only pull it, and MXNet's server answers a pull in its
        own thread, never while this handler runs (as count_round's writes there)."""
        if self._out.get(wk) is None:
            words, end = self._words[wk], self._words[wk] + self._tail[wk].size
            self._out[wk] = (codec.writable(self.stored[wk][0:words]), codec.writable(self.stored[wk][words:end]))
        return self._out[wk]

    def after_update(self, wk, weight, flag, tracked=False):
        """After a compressed round's global update: the codes of A - V into the down key
        (PULL_2BIT), or V := W where the workers pull fp32 W (PULL_FP32). tracked: CD-SGD's
        correction round, whose workers pull fp32 W and encode the codes of W - V themselves."""
        if flag == PULL_FP32:
            return self.resync(wk, weight)
        if flag != PULL_2BIT:
            raise ValueError("a payload row of key %d asks for pull %r (allowed: %g fp32, %g 2-bit)"
                             % (wk, flag, PULL_FP32, PULL_2BIT))
        t = self.stages.start()
        v, tail, pieces = self.v[wk], self._tail[wk], self._pieces[wk]
        codes_out, tail_out = self._payload(wk)
        w = weight[0:v.size]  # read in place through DLPack (asnumpy's copy costs 1 ms per 1M values)
        if tracked or not self.lookahead:  # the aim is W (without momentum: W + 0, the same codes and V)
            aim = w
            codec.copy(w, self.prev[wk])
        else:
            aim = self._aim[wk]
            codec.pull_target(w, self.prev[wk], aim, self.lookahead)  # A = W + mu (W - prev); prev = W
        t = self.stages.lap("aim", t)
        # the steps, the codes of (A - V) / s_p at 1/2, V += code * s_p and the wire words, in
        # native passes: the very float32 operations every worker's decode makes, so V stays
        # bit-identical everywhere
        try:
            scales = codec.pull_encode(aim, v, pieces, codes_out)
        except FloatingPointError:
            raise FloatingPointError("the global weights of key %d are not finite: nothing to send to the workers" % wk)
        tail[:len(pieces)] = scales
        t = self.stages.lap("encode pull", t)
        self._rounds[wk] += 1
        if self._rounds[wk] % NORMS_EVERY == 1:  # the error left, W - V, and W (one native pass)
            tail[-NORMS:] = codec.pull_norms(w, v)
        codec.copy(tail, tail_out)
        self.stages.lap("norms + tail", t)

    def resync(self, wk, weight):
        """V := W (the workers pull W itself this round)."""
        v = self.v[wk]
        codec.copy(weight[0:v.size], v)
        codec.copy(v, self.prev[wk])

    def set_weights(self, wk, weight):
        """W was set outside a round (a restart's assignment): the next aim's last update
        starts there."""
        codec.copy(weight[0:self.v[wk].size], self.prev[wk])

    def values(self):
        return {wk: v.copy() for wk, v in self.v.items()}

    def restore(self, values):
        for wk, v in values.items():
            self.v[int(wk)] = np.array(v, np.float32)

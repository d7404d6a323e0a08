"""Independent numpy simulation of the engine's semantics (the issue's definition, not the code):
the tests compare the engine with it, and the replay (replay.py) compares a recorded run with it.

Global update: W(t+1) = SGD-momentum(W(t), sum over workers of the pushed gradient).
Forward weights: x(t) = W(t) in warm-up and for ssgd/bitsgd; for odsgd/cdsgd, t >= n:
x(t) = W(t-1) - lr_loc * rescale * g(t-1). Pushes: fp32 in warm-up and for ssgd/odsgd, codes
for bitsgd after warm-up, for cdsgd codes unless (t - n) % k == 0.

2-bit both ways (pull={"buckets": ..., "resync_every": R}): every worker holds V, not W. After the
global update of every step after warm-up (t >= n) that is not a re-sync (cdsgd: every step, its
fp32 corrections too, unless k == 1; bitsgd: R == 0, or (t - n) % R != 0), per bucket (its parameters' pieces back to back, as the engine lays
them out): the aim A = W(t+1) + momentum * (W(t+1) - W(t)) in float32, except at cdsgd's
corrections, whose aim is W(t+1); e = A - V; per piece p, s_p = 1.75 times the RMS of e over it
(codec.pull_scales: the one operation shared with the code under test, since a float64 sum's
last bits depend on its order; tests/codec/test_codec.py checks it against an exact sum); codes of
e / s_p by the threshold rule at 1/2 (float32 division); V += code * s_p. Every other step: V = W(t+1). The worker's weights then come from V where they came
from W.
"""
import numpy as np

from cdsgd_mx import codec
from cdsgd_mx import reference as ref


def compressed(alg, t, n, k):
    if t < n or alg in ("ssgd", "odsgd"):
        return False
    return alg == "bitsgd" or (t - n) % k != 0


def delayed(alg, t, n):
    return alg in ("odsgd", "cdsgd") and t >= n - 1


def simulate(alg, workers, steps, n, k, threshold, init, grad_fn, lr, momentum, local_lr, batch, poisoned=(),
             wd=0.0, mults=None, mults_from=0, stale=None, clip_norm=None, pull=None):
    """init: list of arrays; grad_fn(x, rank, s, index) for data step s. Returns (x per rank, W)
    per parameter. poisoned: (rank, s) pairs where that worker's gradient is non-finite under
    nonfinite='skip': data step s is dropped on every worker, as if its batch never came (no
    push, no local or global update, residuals and the schedule's step counter unchanged).
    wd, mults {index: (lr_mult, wd_mult)}: the global optimizer's weight decay and gluon's
    per-parameter multipliers, in effect from data step mults_from on, for the global update and
    the local one (whose optimizer has no weight decay). stale(r, s, i): worker r's gradient of
    parameter i is stale at data step s (gluon's ignore_stale_grad=True): it contributes zero;
    a parameter stale on every worker is not in the step at all (W, momentum, residuals
    unchanged; x(t+1) = W(t) on a delayed step, W on the others). clip_norm: the summed gradients
    of all parameters scaled by min(1, clip_norm / (their global 2-norm + 1e-8)) before the
    update (gluon's clip_global_norm between allreduce_grads and update). pull: 2-bit both
    ways (see the module's docstring): {"buckets": [[(parameter index, begin, end), ...] per
    bucket, in layout order], "resync_every": R}; then (x, W, V per parameter) is returned."""
    f32 = np.float32
    rescale = f32(1.0 / batch)
    local_rescale = f32(local_lr) * rescale
    P = len(init)
    W = [np.asarray(a, f32).copy() for a in init]
    mom = [np.zeros_like(a) for a in W]
    x = [[a.copy() for a in W] for _ in range(workers)]
    res = [[np.zeros(a.size, f32) for a in W] for _ in range(workers)]
    dropped = {s for _, s in poisoned}
    held = [a.copy() for a in W]  # the weights every worker holds: V with 2-bit pulls, else W
    t = 0  # the schedule's step: counts the steps that were not dropped
    for s in range(steps):
        if s in dropped:
            continue
        comp = compressed(alg, t, n, k)
        W_before = [a.copy() for a in W]
        grads, totals = [None] * P, [None] * P  # this step's gradients and their sums, then the updates
        for i in range(P):
            grads[i] = [grad_fn(x[r][i], r, s, i) for r in range(workers)]
            if stale is not None:
                if all(stale(r, s, i) for r in range(workers)):
                    continue
                grads[i] = [np.zeros_like(g) if stale(r, s, i) else g for r, g in enumerate(grads[i])]
            total = np.zeros(W[i].size, f32)  # sums of 1/64-grid values and +-t: exact in any order
            for r in range(workers):
                g = grads[i][r].reshape(-1)
                if comp:
                    packed, res[r][i] = ref.quantize(g, res[r][i], threshold)
                    total += ref.dequantize(packed, g.size, threshold)
                else:
                    total += g
            totals[i] = total.reshape(W[i].shape)
        if clip_norm is not None:
            norm = np.sqrt(sum(float(np.dot(a.reshape(-1).astype(np.float64), a.reshape(-1))) for a in totals
                               if a is not None))
            scale = f32(min(1.0, clip_norm / (norm + 1e-8)))
            totals = [None if a is None else a * scale for a in totals]
        for i in range(P):
            if totals[i] is None:  # stale on every worker: not in the step
                for r in range(workers):
                    x[r][i] = held[i].copy()
                continue
            total = totals[i]
            W_t = W[i]
            # float32, in the order of MXNet's sgd_mom_update kernel: the multiplied rate and
            # decay reach it as float32 parameters
            lr_mult, wd_mult = (mults or {}).get(i, (1.0, 1.0)) if s >= mults_from else (1.0, 1.0)
            lr_i, wd_i = f32(lr * lr_mult), f32(wd * wd_mult)
            mom[i] = f32(momentum) * mom[i] - lr_i * wd_i * W_t - lr_i * rescale * total
            W_next = W_t + mom[i]
            for r in range(workers):
                if delayed(alg, t, n):
                    x[r][i] = held[i] - (local_rescale if lr_mult == 1.0 else f32(local_lr * lr_mult) * rescale) * \
                        grads[i][r]
            W[i] = W_next
        held = pulled(W, held, pull, pull is not None and t >= n and
                      ((alg == "cdsgd" and (comp or k > 1)) or
                       (alg == "bitsgd" and (not pull["resync_every"] or (t - n) % pull["resync_every"]))),
                      W_before if comp else None, momentum)
        for i in range(P):
            if not delayed(alg, t, n) and totals[i] is not None:
                for r in range(workers):
                    x[r][i] = held[i].copy()
        t += 1
    return (x, W) if pull is None else (x, W, held)


def pulled(W, held, pull, compressed, W_before=None, momentum=0.0):
    """What the workers hold after a round: W itself, or with a compressed pull V + the codes of
    A - V, bucket by bucket: A = W + momentum * (W - W_before) (the aim after a push of codes),
    or W (after cdsgd's fp32 correction: W_before None)."""
    if not compressed:
        return [a.copy() for a in W]
    held = [a.copy() for a in held]
    for pieces in pull["buckets"]:
        w = np.concatenate([W[i].reshape(-1)[b:e] for i, b, e in pieces])
        if W_before is not None:
            w0 = np.concatenate([W_before[i].reshape(-1)[b:e] for i, b, e in pieces])
            w = w + np.float32(momentum) * (w - w0)  # float32, each operation rounded
        v = np.concatenate([held[i].reshape(-1)[b:e] for i, b, e in pieces])
        e_ = w - v
        sizes = [e - b for _, b, e in pieces]
        ends = np.cumsum(sizes).tolist()
        scales = codec.pull_scales(w, v, [(end - size, end) for size, end in zip(sizes, ends)])
        s = np.repeat(np.array(scales, np.float32), [e - b for _, b, e in pieces])
        packed, _ = ref.quantize(e_ / s, np.zeros_like(e_), 0.5)  # codes where |e| >= s / 2
        v = v + ref.dequantize(packed, e_.size, 1.0) * s
        at = 0
        for i, b, e in pieces:
            held[i].reshape(-1)[b:e] = v[at:at + e - b]
            at += e - b
    return held

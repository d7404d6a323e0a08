"""Plain numpy reference of every codec kernel: slow, obvious, and what the tests trust.

Pure functions: inputs are not modified; results are returned.
"""
import numpy as np

VALUES_PER_WORD = 16
WIRE_BIAS = 0x3F800000
WIRE_LIMIT = 3 ** 16
_J = np.arange(VALUES_PER_WORD, dtype=np.uint32)
SHIFTS = (8 * (_J >> 2) + 6 - 2 * (_J & 3)).astype(np.uint32)  # low bit of value j's code
POWERS = (3 ** _J.astype(np.uint64)).astype(np.uint64)


def _codes_of(words):
    """[w] uint32 words -> [w*16] codes 0..3 in value order."""
    words = np.asarray(words).view(np.uint32).reshape(-1)
    return ((words[:, None] >> SHIFTS[None, :]) & 3).reshape(-1)


def _words_of(codes):
    """codes in value order (padded here with 0 to a multiple of 16) -> uint32 words."""
    codes = np.asarray(codes, dtype=np.uint32)
    pad = (-len(codes)) % VALUES_PER_WORD
    codes = np.concatenate([codes, np.zeros(pad, np.uint32)]).reshape(-1, VALUES_PER_WORD)
    return np.bitwise_or.reduce(codes << SHIFTS[None, :], axis=1).astype(np.uint32)


def quantize(grad, residual, threshold):
    """Returns (packed uint32 words, new residual float32) by MXNet's 2-bit rule."""
    t = np.float32(threshold)
    x = np.asarray(residual, np.float32).reshape(-1) + np.asarray(grad, np.float32).reshape(-1)
    with np.errstate(invalid="ignore"):
        pos = x >= t
        neg = ~pos & (x <= -t)
        new_res = np.where(pos, x - t, np.where(neg, x - (-t), x)).astype(np.float32)
    codes = np.where(pos, 3, np.where(neg, 2, 0))
    return _words_of(codes), new_res


def dequantize(packed, n, threshold):
    """First n decoded values (float32): 11 -> +t, 10 -> -t, otherwise 0."""
    t = np.float32(threshold)
    c = _codes_of(packed)[:n]
    return np.where(c == 3, t, np.where(c == 2, -t, np.float32(0))).astype(np.float32)


def wire_encode(packed):
    """Packed words -> wire float32 values (bit pattern 1.0f + sum d_j 3^j)."""
    c = _codes_of(packed).reshape(-1, VALUES_PER_WORD)
    d = np.where(c == 3, 1, np.where(c == 2, 2, 0)).astype(np.uint64)
    v = (d * POWERS[None, :]).sum(axis=1)
    return (v + WIRE_BIAS).astype(np.uint32).view(np.float32)


def wire_decode(wire):
    """Wire floats -> (packed uint32 words, number of invalid wire words decoded as 0)."""
    v = np.asarray(wire, np.float32).reshape(-1).view(np.uint32).astype(np.int64) - WIRE_BIAS
    bad = (v < 0) | (v >= WIRE_LIMIT)
    v = np.where(bad, 0, v)
    digits = (v[:, None] // POWERS[None, :].astype(np.int64)) % 3
    codes = np.where(digits == 1, 3, np.where(digits == 2, 2, 0))
    return _words_of(codes.reshape(-1)), int(bad.sum())

"""The codec against its numpy reference, MXNet's own kernel, and hand-worked cases."""
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from cdsgd_mx import codec
from cdsgd_mx import reference as ref

T = 0.5
# sizes around every block size of the kernels: word (16), chunk (4096), thread grain (2^18)
SIZES = [0, 1, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 3 * 4096 + 5, (1 << 18) + 4096 + 17,
         3 * (1 << 18) + 2 * 4096 + 7]


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def run_quantize(grad, residual, threshold=T, threads=None):
    residual = residual.copy()
    packed = np.zeros(codec.packed_size(grad.size), np.uint32)
    nonfinite = codec.quantize(grad, residual, packed, threshold, threads=threads)
    return packed, residual, nonfinite


def test_layout_matches_mxnet_documented_word():
    g = np.zeros(16, np.float32)
    g[:6] = [0.6, -0.7, 0.2, 1.3, 0, -3]
    g[12], g[15] = -1.0, 2.0
    packed, residual, _ = run_quantize(g, np.zeros(16, np.float32))
    assert packed.tolist() == [0x830020E3]
    f = np.float32
    want = [f(0.6) - f(0.5), f(-0.7) + f(0.5), f(0.2), f(1.3) - f(0.5), f(0), f(-3) + f(0.5)]
    np.testing.assert_array_equal(bits(residual[:6]), bits(want))


@pytest.mark.parametrize("n", SIZES)
def test_quantize_bit_exact_with_reference(n):
    rng = np.random.default_rng(n)
    g = rng.normal(0, 0.6, n).astype(np.float32)
    r0 = rng.normal(0, 0.3, n).astype(np.float32)
    packed, residual, nonfinite = run_quantize(g, r0, threads=2)
    want_packed, want_res = ref.quantize(g, r0, T)
    assert packed.shape == (codec.packed_size(n),)
    np.testing.assert_array_equal(packed, want_packed)
    np.testing.assert_array_equal(bits(residual), bits(want_res))
    assert nonfinite == 0


def test_codes_to_gets_the_codes_in_the_same_call():
    rng = np.random.default_rng(4)
    g = rng.normal(0, 0.6, 1000).astype(np.float32)
    r = np.zeros(1000, np.float32)
    p, host = np.zeros(63, np.uint32), np.full(63, 7, np.uint32)
    codec.quantize(g, r, p, T, codes_to=host)
    np.testing.assert_array_equal(host, ref.quantize(g, np.zeros(1000, np.float32), T)[0])
    np.testing.assert_array_equal(host, p)
    with pytest.raises(ValueError, match=r"codes_to has 62 elements .*same as packed"):
        codec.quantize(g, r, p, T, codes_to=host[:62])
    with pytest.raises(ValueError, match="packed and codes_to must not share memory"):
        codec.quantize(g, r, p, T, codes_to=p)


@pytest.mark.parametrize("n", SIZES)
def test_dequantize_and_accumulate_match_reference(n):
    rng = np.random.default_rng(100 + n)
    words = rng.integers(0, 2 ** 32, codec.packed_size(n), dtype=np.uint64).astype(np.uint32)
    out = np.full(n, np.nan, np.float32)
    codec.dequantize(words, out, T, threads=2)
    np.testing.assert_array_equal(bits(out), bits(ref.dequantize(words, n, T)))
    base = rng.normal(size=n).astype(np.float32)
    acc = base.copy()
    codec.dequantize(words, acc, T, accumulate=True, threads=2)
    np.testing.assert_array_equal(bits(acc), bits(base + ref.dequantize(words, n, T)))


def test_edge_values_around_threshold():
    t = np.float32(T)
    above, below = np.nextafter(t, np.float32(1)), np.nextafter(t, np.float32(0))
    g = np.array([t, -t, above, -above, below, -below, 0.0, -0.0, t, -t, 1e-45, -1e-45, 3 * t, -3 * t, 2 * t, t],
                 np.float32)
    packed, residual, _ = run_quantize(g, np.zeros(16, np.float32))
    codes = ref._codes_of(packed)
    # >= t is +, <= -t is -, anything strictly inside is 0
    assert codes.tolist() == [3, 2, 3, 2, 0, 0, 0, 0, 3, 2, 0, 0, 3, 2, 3, 3]
    np.testing.assert_array_equal(bits(residual), bits(ref.quantize(g, np.zeros(16, np.float32), T)[1]))
    # the residual keeps -0.0 exactly as MXNet does (0 + -0 = +0 in IEEE, and -0 + -0 = -0)
    packed2, residual2, _ = run_quantize(np.float32([-0.0]), np.float32([-0.0]))
    assert bits(residual2)[0] == 0x80000000 and packed2[0] == 0


def test_non_finite_policy_matches_mxnet_and_is_reported():
    g = np.array([np.nan, np.inf, -np.inf, 1.0, 0.1], np.float32)
    packed, residual, nonfinite = run_quantize(g, np.zeros(5, np.float32))
    assert ref._codes_of(packed)[:5].tolist() == [0, 3, 2, 3, 0]
    assert np.isnan(residual[0]) and residual[1] == np.inf and residual[2] == -np.inf
    assert nonfinite == 3
    want_packed, want_res = ref.quantize(g, np.zeros(5, np.float32), T)
    np.testing.assert_array_equal(packed, want_packed)
    np.testing.assert_array_equal(bits(residual), bits(want_res))


def test_residual_carries_over_many_steps():
    rng = np.random.default_rng(7)
    n, steps = 1000, 200
    residual = np.zeros(n, np.float32)
    sent = np.zeros(n, np.float64)
    total = np.zeros(n, np.float64)
    packed = np.zeros(codec.packed_size(n), np.uint32)
    out = np.zeros(n, np.float32)
    for _ in range(steps):
        g = rng.normal(0, 0.2, n).astype(np.float32)
        total += g
        codec.quantize(g, residual, packed, T)
        codec.dequantize(packed, out, T)
        sent += out
    # nothing is lost: what was sent plus what is still held equals what came in
    np.testing.assert_allclose(sent + residual, total, atol=1e-4)
    assert np.abs(residual).max() < T + 0.2 * 6  # bounded, not drifting


def test_one_and_two_threads_give_identical_bits():
    n = 3 * (1 << 18) + 12345
    rng = np.random.default_rng(3)
    g = rng.normal(size=n).astype(np.float32)
    r = rng.normal(size=n).astype(np.float32)
    p1, r1, _ = run_quantize(g, r, threads=1)
    p2, r2, _ = run_quantize(g, r, threads=2)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(bits(r1), bits(r2))
    w1, w2 = np.zeros(len(p1), np.float32), np.zeros(len(p1), np.float32)
    codec.wire_encode(p1, w1, threads=1)
    codec.wire_encode(p1, w2, threads=2)
    np.testing.assert_array_equal(bits(w1), bits(w2))


@pytest.mark.parametrize("nwords", [0, 1, 15, 16, 17, 4097, (1 << 18) + 3])
def test_wire_round_trip_and_reference(nwords):
    rng = np.random.default_rng(nwords)
    codes = rng.choice(np.array([0, 2, 3], np.uint32), size=nwords * 16)
    packed = ref._words_of(codes)
    wire = np.zeros(nwords, np.float32)
    codec.wire_encode(packed, wire, threads=2)
    np.testing.assert_array_equal(bits(wire), bits(ref.wire_encode(packed)))
    # every wire value is a finite normal float in [1, 73): the server's x + 0 keeps it exact
    assert np.all(np.isfinite(wire)) and np.all(wire >= 1.0) and np.all(wire < 73.0)
    np.testing.assert_array_equal(bits(wire + np.float32(0)), bits(wire))
    back = np.zeros(nwords, np.uint32)
    codec.wire_decode(wire, back, threads=2)
    np.testing.assert_array_equal(back, packed)


def test_wire_extremes_and_unused_code():
    all_plus = ref._words_of([3] * 16)
    all_minus = ref._words_of([2] * 16)
    unused = ref._words_of([1] * 16)  # 01 never written; it reads as 0 like MXNet's dequantize
    packed = np.concatenate([all_plus, all_minus, unused, np.zeros(1, np.uint32)])
    wire = np.zeros(4, np.float32)
    codec.wire_encode(packed, wire)
    assert bits(wire).tolist() == [0x3F800000 + (3 ** 16 - 1) // 2, 0x3F800000 + 3 ** 16 - 1, 0x3F800000, 0x3F800000]
    back = np.zeros(4, np.uint32)
    codec.wire_decode(wire, back)
    assert back.tolist() == [all_plus[0], all_minus[0], 0, 0]


@pytest.mark.parametrize("bad", [np.nan, 0.5, -1.0, 0.0, np.inf])
def test_wire_decode_rejects_corrupt_payload(bad):
    wire = np.array([1.0, bad, 2.0], np.float32)
    with pytest.raises(ValueError, match="wire: 1 of its words"):
        codec.wire_decode(wire, np.zeros(3, np.uint32))
    assert ref.wire_decode(wire)[1] == 1


def test_wire_decode_rejects_first_value_past_limit():
    wire = np.array([0x3F800000 + 3 ** 16 - 1, 0x3F800000 + 3 ** 16], np.uint32).view(np.float32)
    with pytest.raises(ValueError, match="1 of its words"):
        codec.wire_decode(wire, np.zeros(2, np.uint32))


def test_quantize_dequantize_wire_compose_on_mxnet_ndarrays():
    mx = pytest.importorskip("mxnet")
    n = 10007
    g = mx.nd.random.normal(shape=(n,), scale=0.7)  # still being written by the engine
    r = mx.nd.zeros((n,))
    packed = mx.nd.zeros((codec.packed_size(n),))
    codec.quantize(g, r, packed, T)
    want_packed, want_res = ref.quantize(g.asnumpy(), np.zeros(n, np.float32), T)
    np.testing.assert_array_equal(packed.asnumpy().view(np.uint32), want_packed)
    # an engine op queued after the kernel sees the kernel's writes
    np.testing.assert_array_equal(bits((r * 1).asnumpy()), bits(want_res))
    wire = mx.nd.zeros((codec.wire_size(n),))
    codec.wire_encode(packed, wire)
    back = mx.nd.zeros((codec.packed_size(n),), dtype="int32")
    codec.wire_decode(wire, back)
    out = mx.nd.ones((n,))
    codec.dequantize(back, out, T, accumulate=True)
    np.testing.assert_array_equal(bits(out.asnumpy()), bits(1 + ref.dequantize(want_packed, n, T)))


def test_zero_copy_writes_into_ndarray_memory():
    mx = pytest.importorskip("mxnet")
    out = mx.nd.zeros((32,))
    codec.dequantize(np.full(2, 0xFFFFFFFF, np.uint32), out, T)
    assert out.asnumpy().tolist() == [T] * 32


def test_bit_exact_with_mxnet_own_kernel(mxnet_2bit):
    mx = pytest.importorskip("mxnet")
    q = mxnet_2bit.MXNet2Bit(threshold=T)
    rng = np.random.default_rng(11)
    for n in [1, 15, 16, 17, 4097, 100003]:
        g = rng.normal(0, 0.6, n).astype(np.float32)
        g[: min(n, 4)] = [T, -T, 0.0, -0.0][: min(n, 4)]
        mres, mpacked = mx.nd.zeros(n), mx.nd.zeros(q.compressed_size(n))
        ours_res, ours_packed = np.zeros(n, np.float32), np.zeros(codec.packed_size(n), np.uint32)
        for _ in range(3):  # residual carried across steps
            q.quantize(mx.nd.array(g), mpacked, mres)
            codec.quantize(g, ours_res, ours_packed, T)
            np.testing.assert_array_equal(ours_packed, mpacked.asnumpy().view(np.uint32))
            np.testing.assert_array_equal(bits(ours_res), bits(mres.asnumpy()))
        mout, ours_out = mx.nd.zeros(n), np.zeros(n, np.float32)
        q.dequantize(mpacked, mout)
        codec.dequantize(ours_packed, ours_out, T)
        np.testing.assert_array_equal(bits(ours_out), bits(mout.asnumpy()))


def test_kernels_release_the_gil():
    n = 1 << 25
    g = np.ones(n, np.float32)
    r = np.zeros(n, np.float32)
    p = np.zeros(codec.packed_size(n), np.uint32)
    done = threading.Event()
    ticks = 0

    def work():
        for _ in range(3):
            codec.quantize(g, r, p, T, threads=1)
        done.set()

    th = threading.Thread(target=work)
    th.start()
    time.sleep(0.005)
    while not done.is_set():
        ticks += 1
    th.join()
    # holding the GIL for each ~30 ms kernel would leave this loop a handful of turns at most
    assert ticks > 1000


# ---- bad input: one clear error naming the argument --------------------------------------

def _args(n=32):
    return np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(codec.packed_size(n), np.uint32)


def test_wrong_dtype_names_the_argument():
    g, r, p = _args()
    with pytest.raises(TypeError, match="grad must be float32"):
        codec.quantize(g.astype(np.float64), r, p, T)
    with pytest.raises(TypeError, match="residual must be float32"):
        codec.quantize(g, r.astype(np.float16), p, T)
    with pytest.raises(TypeError, match="packed must be a 4-byte array"):
        codec.quantize(g, r, p.astype(np.uint16), T)
    with pytest.raises(TypeError, match="out must be float32"):
        codec.dequantize(p, np.zeros(32, np.int32), T)
    with pytest.raises(TypeError, match="grad must be an MXNet NDArray, a numpy array"):
        codec.quantize([0.0] * 32, r, p, T)


def test_wrong_size_names_the_argument():
    g, r, p = _args()
    with pytest.raises(ValueError, match=r"residual has 31 elements \(31,\), expected 32"):
        codec.quantize(g, r[:31], p, T)
    with pytest.raises(ValueError, match=r"packed has 3 elements .*expected 2 \(ceil\(grad.size / 16\)\)"):
        codec.quantize(g, r, np.zeros(3, np.uint32), T)
    with pytest.raises(ValueError, match="packed has 1 elements"):
        codec.dequantize(p[:1], np.zeros(32, np.float32), T)
    with pytest.raises(ValueError, match="wire has 3 elements"):
        codec.wire_encode(p, np.zeros(3, np.float32))


def test_wrong_shape_layout_and_aliasing_are_refused():
    g = np.zeros((8, 8), np.float32)
    with pytest.raises(ValueError, match="grad must be contiguous"):
        codec.quantize(g[:, ::2], np.zeros(32, np.float32), np.zeros(2, np.uint32), T)
    r = np.zeros(32, np.float32)
    with pytest.raises(ValueError, match="grad and residual must not share memory"):
        codec.quantize(r, r, np.zeros(2, np.uint32), T)
    ro = np.zeros(32, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="residual must be a writable buffer"):
        codec.quantize(np.zeros(32, np.float32), ro, np.zeros(2, np.uint32), T)
    # any shape with the right number of elements is fine: kernels see flat memory
    packed, _, _ = run_quantize(np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32))
    assert packed.shape == (2,)


@pytest.mark.parametrize("threshold", [0.0, -0.5, float("nan"), float("inf")])
def test_bad_threshold(threshold):
    g, r, p = _args()
    with pytest.raises(ValueError, match="threshold must be a finite number > 0"):
        codec.quantize(g, r, p, threshold)


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_bad_threads(threads):
    g, r, p = _args()
    with pytest.raises(ValueError, match="threads must be an integer >= 1 or None"):
        codec.quantize(g, r, p, T, threads=threads)


def test_default_thread_count_is_settable():
    before = codec.get_num_threads()
    try:
        codec.set_num_threads(2)
        assert codec.get_num_threads() == 2
    finally:
        codec.set_num_threads(before)


def test_ndarray_sparse_is_refused():
    mx = pytest.importorskip("mxnet")
    rs = mx.nd.zeros((4, 8), stype="row_sparse")
    with pytest.raises(TypeError, match="only dense NDArrays"):
        codec.quantize(rs, mx.nd.zeros(32), mx.nd.zeros(2), T)


@pytest.mark.parametrize("n", [0, 1, 17, 4097, (1 << 18) * 2 + 5])
def test_count_nonfinite(n):
    x = np.random.default_rng(n).normal(size=n).astype(np.float32)
    bad = np.random.default_rng(n + 1).choice(n, size=min(n, 7), replace=False) if n else []
    for j, i in enumerate(bad):
        x[i] = [np.nan, np.inf, -np.inf][j % 3]
    assert codec.count_nonfinite(x, threads=2) == len(bad)
    with pytest.raises(TypeError, match="x must be float32"):
        codec.count_nonfinite(x.astype(np.float64))


@pytest.mark.parametrize("n", [1, 16, 17, 4095, 4096, 4097, 70001])
@pytest.mark.parametrize("rows", [0, 1, 3])
def test_decode_sum_is_the_sum_of_every_rows_decoded_codes(n, rows):
    """The server's one call per bucket: wire rows of N workers -> the sum of their codes."""
    rng = np.random.RandomState(n + rows)
    wires, want = [], np.zeros(n, np.float32)
    for _ in range(rows):
        packed, _ = ref.quantize(rng.normal(0, 1, n).astype(np.float32), np.zeros(n, np.float32), 0.5)
        wires.append(ref.wire_encode(packed))
        want += ref.dequantize(packed, n, 0.5)
    wire = np.stack(wires) if rows else np.zeros((0, codec.packed_size(n)), np.float32)
    for threads in (1, 2):
        out = np.full(n, 9.0, np.float32)  # stale values are overwritten, not added to
        codec.decode_sum(wire, out, 0.5, threads=threads)
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))  # bits: +0, never -0
    # rows as the server receives them: each followed by its proof tag (skipped, not decoded)
    tagged = np.concatenate([wire, np.full((rows, 8), np.nan, np.float32)], axis=1)
    out = np.full(n, 9.0, np.float32)
    codec.decode_sum(tagged, out, 0.5, threads=2)
    np.testing.assert_array_equal(out, want)


def test_decode_sum_rejects_a_corrupt_row_and_a_wrong_size():
    n = 100
    wire = np.stack([ref.wire_encode(ref.quantize(np.ones(n, np.float32), np.zeros(n, np.float32), 0.5)[0])] * 2)
    wire[1, 3] = np.nan
    with pytest.raises(ValueError, match="1 of its words are not valid ternary16 codes"):
        codec.decode_sum(wire, np.zeros(n, np.float32), 0.5)
    with pytest.raises(ValueError, match="stride must be >= ceil.out.size / 16. = 8, got 7"):
        codec.decode_sum(wire, np.zeros(n + 16, np.float32), 0.5)
    with pytest.raises(ValueError, match="wire has 7 elements"):
        codec.decode_sum(wire[0], np.zeros(n + 16, np.float32), 0.5)


def test_tags_match_reads_every_tag_of_a_round():
    """The servers' proof check (auth.tag as floats, one call per round)."""
    from cdsgd_mx.wire import auth
    secret = b"k" * 32
    macs = [auth._raw(secret, "fp32", r, 4, 0, 10) for r in range(3)]
    x = np.zeros(10 + 3 * 8, np.float32)
    for r in range(3):
        x[10 + 8 * r:18 + 8 * r] = auth.tag(secret, "fp32", r, 4, 0, 10)
    starts = [10, 18, 26]
    assert codec.tags_match(x, starts, b"".join(macs))
    assert not codec.tags_match(x, starts, b"".join([macs[0], macs[2], macs[1]]))  # another rank's tag
    for i in range(10, 34):  # any one value off
        y = x.copy()
        y[i] += 1
        assert not codec.tags_match(y, starts, b"".join(macs)), i
    with pytest.raises(ValueError, match="does not fit x of 34 elements"):
        codec.tags_match(x, [27], macs[0])
    with pytest.raises(ValueError, match="macs must hold 16 bytes per start"):
        codec.tags_match(x, starts, macs[0])


def test_set_value_writes_into_an_ndarray_through_one_capsule_many_times():
    """The servers write each round's count through one capsule of the stored array."""
    mx = pytest.importorskip("mxnet")
    stored = mx.nd.arange(6)
    where = codec.writable(stored)
    codec.set_value(where, 4, 9.0)
    assert stored.asnumpy().tolist() == [0, 1, 2, 3, 9, 5]
    stored += 1  # an engine op in between, waited for
    stored.wait_to_read()
    codec.set_value(where, 0, -2.0)
    assert stored.asnumpy().tolist() == [-2, 2, 3, 4, 10, 6]
    x = np.zeros(3, np.float32)
    codec.set_value(codec.writable(x), 2, 1.5)
    assert x.tolist() == [0, 0, 1.5]
    with pytest.raises(ValueError, match="index 3 is outside x of 3 elements"):
        codec.set_value(x, 3, 1.0)


@pytest.mark.parametrize("threshold", [3.4000000535564126e+38, 1e39, 0.0])
def test_a_bad_threshold_with_an_ndarray_is_a_value_error(threshold):
    """Checked before MXNet's DLPack capsule exists: raised from the native call while holding
    it, the error came out as 'SystemError: error return without exception set'."""
    mx = pytest.importorskip("mxnet")
    grad = mx.nd.ones((8,))[0:8]
    if threshold == 3.4000000535564126e+38:  # finite as float32: accepted, codes all zero
        packed = np.zeros(1, np.uint32)
        assert codec.quantize(grad, np.zeros(8, np.float32), packed, threshold) == 0 and packed[0] == 0
        return
    with pytest.raises(ValueError, match="threshold must be a finite number > 0"):
        codec.quantize(grad, np.zeros(8, np.float32), np.zeros(1, np.uint32), threshold)
    with pytest.raises(ValueError, match="threshold must be a finite number > 0"):
        codec.dequantize(np.zeros(1, np.uint32), mx.nd.zeros((8,)), threshold)


def test_wire_decode_of_every_possible_word():
    """All 3^16 valid wire values: decode (hi/lo halves through a table) then encode (Horner
    over the digits, a separate algorithm) gives each value back; a sample against the
    reference's digit-by-digit decode."""
    v = np.arange(3 ** 16, dtype=np.uint32)
    wire = (v + np.uint32(0x3F800000)).view(np.float32)
    packed = np.zeros(v.size, np.uint32)
    codec.wire_decode(wire, packed, threads=2)
    back = np.zeros(v.size, np.float32)
    codec.wire_encode(packed, back, threads=2)
    np.testing.assert_array_equal(bits(back), bits(wire))
    sample = np.random.RandomState(0).randint(0, 3 ** 16, 100000)
    want, invalid = ref.wire_decode(wire[sample])
    assert invalid == 0
    np.testing.assert_array_equal(packed[sample], want)


def runs_with_a_gap(rng, n, cuts):
    """SGD runs [(begin, end, lr, wd)] between the cuts of [0, n), each with its own rates; the
    second starts 3 values late, leaving a gap no run covers."""
    bounds = [0] + cuts + [n]
    return [(b + (3 if i == 1 else 0), e, float(rng.choice([0.01, 0.1, 0.37])), float(rng.choice([0.0, 1e-4, 5e-4])))
            for i, (b, e) in enumerate(zip(bounds[:-1], bounds[1:]))]


def assert_the_gap_kept(runs, w, w0):
    if len(runs) > 1:  # the gap before the second run kept its values
        b = runs[1][0]
        np.testing.assert_array_equal(bits(w[b - 3:b]), bits(w0[b - 3:b]))


def assert_same_step(w, m, want_w, want_m):
    np.testing.assert_array_equal(bits(w), bits(want_w))
    if m is not None:
        np.testing.assert_array_equal(bits(m), bits(want_m))


def mxnet_sgd(g, w, mom, runs, momentum, rescale, clip):
    """MXNet's own kernels, run by run: what codec.sgd must give."""
    mx = pytest.importorskip("mxnet")
    W, G = mx.nd.array(w), mx.nd.array(g)
    M = mx.nd.array(mom) if mom is not None else None
    for b, e, lr, wd in runs:
        kw = dict(lr=lr, wd=wd, rescale_grad=rescale)
        if clip is not None:
            kw["clip_gradient"] = clip
        if M is not None:
            mx.nd.sgd_mom_update(W[b:e], G[b:e], M[b:e], out=W[b:e], momentum=momentum, **kw)
        else:
            mx.nd.sgd_update(W[b:e], G[b:e], out=W[b:e], **kw)
    return W.asnumpy(), (M.asnumpy() if M is not None else None)


def mxnet_sgd_after_decode_sum(wire, w, mom, n, runs, momentum, rescale, clip):
    """The reference of decode_sgd: decode_sum, then MXNet's own kernels run by run."""
    g = np.zeros(n, np.float32)
    codec.decode_sum(wire, g, T)
    W, M = mxnet_sgd(np.concatenate([g, np.zeros(w.size - n, np.float32)]), w, mom, runs, momentum, rescale, clip)
    return W, M


@pytest.mark.parametrize("n,cuts", [(17, []), (4097, [100, 4096]), (70001, [3, 4095, 4097, 40000, 69990]),
                                    ((1 << 18) + 4096 + 17, [5000, (1 << 18) - 1, (1 << 18) + 1])])
@pytest.mark.parametrize("momentum,clip", [(0.9, None), (0.9, 0.02), (0.0, None), (0.0, 0.05)])
def test_decode_sgd_is_decode_sum_then_mxnet_sgd_bit_for_bit(n, cuts, momentum, clip):
    """The server's fused payload update: runs with their own rates (one with a gap before it,
    left alone), rows followed by proof tags, values after n (the proof region) untouched."""
    rng = np.random.RandomState(n + len(cuts))
    rows, words = 3, codec.packed_size(n)
    wire = np.full((rows, words + 8), np.nan, np.float32)  # tags after the codes: skipped
    for r in range(rows):
        packed, _ = ref.quantize(rng.normal(0, 1, n).astype(np.float32), np.zeros(n, np.float32), T)
        wire[r, :words] = ref.wire_encode(packed)
    runs = runs_with_a_gap(rng, n, cuts)
    w0 = rng.normal(0, 1, n + 8).astype(np.float32)
    m0 = rng.normal(0, 0.1, n + 8).astype(np.float32) if momentum else None
    want_w, want_m = mxnet_sgd_after_decode_sum(wire, w0, m0, n, runs, momentum, 1 / 32, clip)
    for threads in (1, 2):
        w, m = w0.copy(), (m0.copy() if m0 is not None else None)
        codec.decode_sgd(wire, w, m, n, T, runs, momentum, 1 / 32, clip, threads=threads)
        assert_same_step(w, m, want_w, want_m)
        np.testing.assert_array_equal(bits(w[n:]), bits(w0[n:]))
    assert_the_gap_kept(runs, w, w0)


def test_decode_sgd_on_ndarrays_writes_their_memory():
    mx = pytest.importorskip("mxnet")
    n = 5000
    packed, _ = ref.quantize(np.linspace(-2, 2, n).astype(np.float32), np.zeros(n, np.float32), T)
    wire = ref.wire_encode(packed)[None, :]
    w0, m0 = np.linspace(1, 2, n).astype(np.float32), np.zeros(n, np.float32)
    want_w, want_m = mxnet_sgd_after_decode_sum(wire, w0, m0, n, [(0, n, 0.1, 1e-4)], 0.9, 1.0, None)
    W, M = mx.nd.array(w0), mx.nd.array(m0)
    codec.decode_sgd(wire, W, M, n, T, [(0, n, 0.1, 1e-4)], 0.9, 1.0)
    np.testing.assert_array_equal(bits(W.asnumpy()), bits(want_w))
    np.testing.assert_array_equal(bits(M.asnumpy()), bits(want_m))


def test_decode_sgd_refuses_a_corrupt_payload_before_changing_anything():
    n = 100
    wire = np.stack([ref.wire_encode(ref.quantize(np.ones(n, np.float32), np.zeros(n, np.float32), T)[0])] * 2)
    wire[1, 6] = np.float32(80.0)  # past 3^16 above the bias
    w, m = np.ones(n, np.float32), np.ones(n, np.float32)
    with pytest.raises(ValueError, match="1 of its words are not valid ternary16 codes"):
        codec.decode_sgd(wire, w, m, n, T, [(0, n, 0.1, 0.0)], 0.9, 1.0)
    np.testing.assert_array_equal(w, np.ones(n, np.float32))
    np.testing.assert_array_equal(m, np.ones(n, np.float32))
    with pytest.raises(ValueError, match="runs must be sorted, disjoint ranges"):
        codec.decode_sgd(wire[:1], w, m, n, T, [(50, n, 0.1, 0.0), (0, 50, 0.1, 0.0)], 0.9, 1.0)
    with pytest.raises(ValueError, match="mom has 10 elements, fewer than n = 100"):
        codec.decode_sgd(wire[:1], w, m[:10], n, T, [(0, n, 0.1, 0.0)], 0.9, 1.0)


@pytest.mark.parametrize("n,cuts", [(17, []), (70001, [3, 4095, 4097, 40000, 69990]),
                                    ((1 << 18) + 4096 + 17, [5000, (1 << 18) - 1, (1 << 18) + 1])])
@pytest.mark.parametrize("momentum,clip", [(0.9, None), (0.9, 0.02), (0.0, None), (0.0, 0.05)])
def test_sgd_is_mxnets_sgd_bit_for_bit(n, cuts, momentum, clip):
    """The server's fp32 step: runs with their own rates (one with a gap before it, left alone),
    on one and two threads, equal to MXNet's sgd_mom_update / sgd_update bit for bit."""
    rng = np.random.RandomState(n + len(cuts))
    runs = runs_with_a_gap(rng, n, cuts)
    g = rng.normal(0, 1, n).astype(np.float32)
    w0 = rng.normal(0, 1, n).astype(np.float32)
    m0 = rng.normal(0, 0.1, n).astype(np.float32) if momentum else None
    want_w, want_m = mxnet_sgd(g, w0, m0, runs, momentum, 1 / 32, clip)
    for threads in (1, 2):
        w, m = w0.copy(), (m0.copy() if m0 is not None else None)
        codec.sgd(g, w, m, runs, momentum, 1 / 32, clip, threads=threads)
        assert_same_step(w, m, want_w, want_m)
    assert_the_gap_kept(runs, w, w0)


def test_sgd_on_ndarray_views_writes_their_memory_and_refuses_bad_input():
    """The server hands it views of a bucket's arrays (the data before the proof region)."""
    mx = pytest.importorskip("mxnet")
    n = 5000
    g0, w0, m0 = np.linspace(-2, 2, n + 7).astype(np.float32), np.linspace(1, 2, n + 7).astype(np.float32), \
        np.zeros(n, np.float32)
    want_w, want_m = mxnet_sgd(g0[:n], w0[:n], m0, [(0, n, 0.1, 1e-4)], 0.9, 1.0, None)
    G, W, M = mx.nd.array(g0), mx.nd.array(w0), mx.nd.array(m0)
    codec.sgd(G[0:n], W[0:n], M, [(0, n, 0.1, 1e-4)], 0.9, 1.0)
    np.testing.assert_array_equal(bits(W.asnumpy()[:n]), bits(want_w))
    np.testing.assert_array_equal(bits(W.asnumpy()[n:]), bits(w0[n:]))  # past the view: untouched
    np.testing.assert_array_equal(bits(M.asnumpy()), bits(want_m))
    w, m = np.ones(n, np.float32), np.ones(n, np.float32)
    with pytest.raises(ValueError, match="runs must be sorted, disjoint ranges"):
        codec.sgd(g0[:n], w, m, [(50, n, 0.1, 0.0), (0, 50, 0.1, 0.0)], 0.9, 1.0)
    with pytest.raises(ValueError, match="mom"):
        codec.sgd(g0[:n], w, m[:10], [(0, n, 0.1, 0.0)], 0.9, 1.0)
    with pytest.raises(ValueError, match="grad has 5007 values"):  # an NDArray: a ValueError still
        codec.sgd(G, W[0:n], M, [(0, n, 0.1, 0.0)], 0.9, 1.0)
    np.testing.assert_array_equal(w, np.ones(n, np.float32))  # refused before anything changed
    # a bucket's momentum runs on over the proof region: only its first weight.size values move
    M2 = mx.nd.array(np.zeros(n + 7, np.float32))
    W2 = mx.nd.array(w0)
    codec.sgd(G[0:n], W2[0:n], M2, [(0, n, 0.1, 1e-4)], 0.9, 1.0)
    np.testing.assert_array_equal(bits(M2.asnumpy()[:n]), bits(want_m))
    assert not M2.asnumpy()[n:].any()


# 2-bit pulls (pull_compression.py): the fused server encode and worker decode against the
# unfused operations they replace (reference quantize at 1/2 of (w - v) / s, dequantize at 1,
# * s, +).
def unfused_pull(w, v, pieces, scales):
    e = w - v
    x = np.zeros_like(e)
    s = np.zeros_like(e)
    for (b, end), sp in zip(pieces, scales):
        x[b:end] = e[b:end] / np.float32(sp)
        s[b:end] = sp
    packed, _ = ref.quantize(np.zeros_like(e), x, 0.5)
    step = ref.dequantize(packed, e.size, 1.0)
    inside = s > 0
    step[inside] = step[inside] * s[inside]
    return packed, v + step


def exact_step(d):
    """float32 of 1.75 sqrt(exact sum of squares / n), the float64 squares summed without rounding."""
    import math
    assert codec.PULL_LEVEL == 1.75 and codec.PULL_THRESHOLD == 0.5
    return float(np.float32(1.75 * math.sqrt(math.fsum(float(x) * float(x) for x in d.astype(np.float64)) / max(d.size, 1))))


@pytest.mark.parametrize("n,threads", [(1, 1), (17, 1), (4099, 1), ((1 << 20) + 37, 2)])
def test_pull_encode_and_decode_equal_the_unfused_steps(n, threads):
    rng = np.random.default_rng(n)
    w = rng.normal(0, 1, n).astype(np.float32)
    v = (w + rng.normal(0, 0.05, n)).astype(np.float32)
    v[: min(n, 8)] = -0.0  # -0 + 0 is +0: the add must be the same add
    cuts = sorted(set(rng.integers(0, n + 1, 6).tolist()) | {0, n})
    pieces = [(b, e) for b, e in zip(cuts, cuts[1:]) if b < e]
    if len(pieces) > 2:  # a gap: values outside every piece get code 0
        pieces.pop(1)
    scales = codec.pull_scales(w, v, pieces)
    for (b, end), sp in zip(pieces, scales):
        assert sp == pytest.approx(exact_step(w[b:end] - v[b:end]), rel=2 ** -23)
    b0, e0 = pieces[0]
    v[b0:e0][:2] = w[b0:e0][:2] - np.float32(scales[0] / 2) * np.array([1, -1], np.float32)[: e0 - b0]  # near ties
    scales = codec.pull_scales(w, v, pieces)
    want_packed, want_v = unfused_pull(w, v, pieces, scales)
    got_v, wire = v.copy(), np.zeros(codec.packed_size(n), np.float32)
    assert codec.pull_encode(w, got_v, pieces, wire, threads=threads) == scales
    np.testing.assert_array_equal(got_v.view(np.uint32), want_v.view(np.uint32))
    np.testing.assert_array_equal(wire.view(np.uint32), ref.wire_encode(want_packed).view(np.uint32))
    assert (want_v != v).any()

    worker_v, out = v.copy(), np.full(n, 7.0, np.float32)
    codec.pull_decode(wire, worker_v, pieces, scales, out=out, threads=threads)
    np.testing.assert_array_equal(worker_v.view(np.uint32), want_v.view(np.uint32))
    np.testing.assert_array_equal(out.view(np.uint32), want_v.view(np.uint32))


def test_pull_encode_compares_with_half_the_step_exactly_where_the_rule_divides():
    """The encode tests e >= s/2 instead of e / s >= 1/2 (csrc/codec_cpu.cc): the same codes at an
    exact tie, one float below it and one above; and where s/2 is rounded it must divide. That is
    s below 2^-125: s = S units of 2^-149 with S = 4j + 1 has s/2 rounded to 2j units, and
    e = 2j units is a tie for the compare but below 1/2 for the division. Two such pieces: s in
    [2^-126, 2^-125) (normal, s/2 not) and s below 2^-126 (denormal)."""
    unit = np.float32(2.0 ** -149)
    rng = np.random.default_rng(11)
    n, cuts = 4096, [0, 2048, 3072, 4096]
    pieces = list(zip(cuts, cuts[1:]))
    noise = rng.normal(0, 1, n).astype(np.float32)
    w, v = noise.copy(), np.zeros(n, np.float32)

    def probe(p, s):  # values at and around +-s/2 in piece p, for its step s
        b = cuts[p]
        if p == 0:
            half = np.float32(s / 2)
            for k, x in enumerate([half, np.nextafter(half, np.float32(0)), np.nextafter(half, np.float32(1))]):
                w[b + 6 * k:b + 6 * k + 3], w[b + 6 * k + 3:b + 6 * k + 6] = x, -x
        else:
            k = int(np.float32(s) / unit) // 2  # floor(S / 2): 2j where S = 4j + 1
            w[b:b + 2], w[b + 2:b + 4], w[b + 4:b + 6] = k * unit, (k + 1) * unit, -k * unit

    def settle(p):  # probe until the piece's step no longer moves; its step
        s = codec.pull_scales(w, v, pieces)[p]
        for _ in range(20):
            probe(p, s)
            s, before = codec.pull_scales(w, v, pieces)[p], s
            if s == before:
                return s
        return None

    settle(0)
    for p, sizes in ((1, np.linspace(7e-39, 1.3e-38, 400)), (2, np.linspace(1e-39, 2e-39, 400))):
        for size in sizes:
            w[cuts[p]:cuts[p + 1]] = (noise[cuts[p]:cuts[p + 1]] * size).astype(np.float32)
            s = settle(p)
            if s is not None and int(np.float32(s) / unit) % 4 == 1:
                break
        else:
            pytest.fail("no step of 4j + 1 units found for piece %d" % p)
    s = codec.pull_scales(w, v, pieces)
    assert 2.0 ** -126 <= s[1] < 2.0 ** -125 and s[2] < 2.0 ** -126
    want_packed, want_v = unfused_pull(w, v, pieces, s)
    got_v, wire = v.copy(), np.zeros(codec.packed_size(n), np.float32)
    codec.pull_encode(w, got_v, pieces, wire)
    np.testing.assert_array_equal(wire.view(np.uint32), ref.wire_encode(want_packed).view(np.uint32))
    np.testing.assert_array_equal(got_v.view(np.uint32), want_v.view(np.uint32))
    moved = got_v != 0
    assert moved[0:6].all() and not moved[6:12].any() and moved[12:18].all()  # tie, below, above
    for b in cuts[1:3]:  # 2j units: 0 (a compare would say +-1); 2j + 1 units: +1
        assert not moved[b:b + 2].any() and moved[b + 2:b + 4].all() and not moved[b + 4:b + 6].any()


def test_pull_scales_are_the_rms_in_a_fixed_order_whatever_the_threads():
    rng = np.random.default_rng(5)
    n = (1 << 20) + 3
    w, v = rng.normal(0, 1, n).astype(np.float32), rng.normal(0, 1, n).astype(np.float32)
    pieces = [(0, 5), (5, 5), (5, 600000), (600000, n)]
    got = codec.pull_scales(w, v, pieces)
    assert got[1] == 1.0  # an empty piece: all zeros
    for (b, e), s in zip(pieces, got):
        if e > b:
            assert s == pytest.approx(exact_step(w[b:e] - v[b:e]), rel=2 ** -23)
    codec.set_num_threads(2)
    try:
        assert codec.pull_scales(w, v, pieces) == got
    finally:
        codec.set_num_threads(1)


def lane_sum(x):
    """The codec's fixed order for a float64 sum: value i into lane i % 8, each lane in turn,
    then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))."""
    lanes = np.zeros(8)
    for i in range(0, x.size, 8):
        lanes[:min(8, x.size - i)] += x[i:i + 8]
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))


@pytest.mark.parametrize("n", [1, 9, 1003, 20011])
def test_pull_norms_sum_in_the_fixed_order(n):
    """The norms a down payload carries: sum (w - v)^2 (the float32 difference) and sum w^2, in
    float64 in the codec's lane order, bit for bit."""
    rng = np.random.default_rng(n)
    w, v = rng.normal(0, 1, n).astype(np.float32), rng.normal(0, 1, n).astype(np.float32)
    d = (w - v).astype(np.float64)
    assert codec.pull_norms(w, v) == (lane_sum(d * d), lane_sum(w.astype(np.float64) ** 2))


def test_pull_encode_refuses_non_finite_weights_and_changes_nothing():
    w, v = np.ones(40, np.float32), np.zeros(40, np.float32)
    w[30] = np.inf
    wire = np.full(codec.packed_size(40), 5.0, np.float32)
    with pytest.raises(FloatingPointError, match="1 of 2 pieces"):
        codec.pull_encode(w, v, [(0, 20), (20, 40)], wire)
    assert not v.any() and (wire == 5.0).all()


def test_pull_decode_refuses_a_corrupt_payload_and_leaves_v_as_it_was():
    n = 100
    v = np.arange(n, dtype=np.float32)
    wire = np.zeros(codec.packed_size(n), np.float32)
    scales = codec.pull_encode(v + 1, v.copy(), [(0, n)], wire)
    wire[3] = np.float32(-2.0)
    before = v.copy()
    with pytest.raises(ValueError, match="1 of its words are not valid"):
        codec.pull_decode(wire, v, [(0, n)], scales)
    np.testing.assert_array_equal(v, before)


@pytest.mark.parametrize("pieces,scales,msg", [([(0, 5), (4, 8)], [0.5, 0.5], "sorted, disjoint"),
                                               ([(0, 11)], [0.5], "sorted, disjoint"),
                                               ([(0, 5)], [0.0], "finite number > 0"),
                                               ([(0, 5)], [float("nan")], "finite number > 0"),
                                               ([(0, 5)], [0.5, 0.5], "2 values for 1 pieces")])
def test_pull_pieces_are_checked(pieces, scales, msg):
    with pytest.raises(ValueError, match=msg):
        codec.pull_decode(np.ones(1, np.float32), np.zeros(10, np.float32), pieces, scales)
    if len(scales) == 1 and scales[0] == 0.5:
        with pytest.raises(ValueError, match=msg):
            codec.pull_encode(np.ones(10, np.float32), np.zeros(10, np.float32), pieces, np.zeros(1, np.float32))


def test_the_codec_benchmark_times_every_op_beside_a_copy(tmp_path):
    """python -m cdsgd_mx.bench.codec: one row per op and size, the server's and a 2-bit pull's
    ops included, each with its share of the copy's bandwidth."""
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.codec", "--sizes", "5000,70000", "--min-time", "0.01",
                           "--json", "--mxnet-baseline", str(tmp_path / "none")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert list(rows[0]) == ["provenance"]  # first, once: how these figures were made
    rows = rows[1:]
    ops = ["copy", "quantize", "dequantize", "wire_encode", "wire_decode", "decode_sgd", "pull_encode", "pull_decode"]
    assert [(r["op"], r["n"]) for r in rows] == [(op, n) for n in (5000, 70000) for op in ops]
    for r in rows:
        assert r["melem_per_s"] > 0 and r["fraction_of_copy"] == pytest.approx(
            r["gb_per_s"] / next(c["gb_per_s"] for c in rows if c["op"] == "copy" and c["n"] == r["n"]))

"""CUDA kernels against the CPU reference, bit for bit. Needs a GPU, a CUDA build of cdsgd_mx,
and a framework that holds GPU arrays (MXNet with CUDA, else PyTorch or CuPy through DLPack)."""
import threading

import numpy as np
import pytest

from cdsgd_mx import codec
from cdsgd_mx import reference as ref
from cdsgd_mx.bench import gpu

if codec.cuda_device_count() == 0:
    pytest.skip("no CUDA GPU here (or cdsgd_mx built without CUDA): CUDA kernels not run",
                allow_module_level=True)
B, why = gpu.backend()
if B is None:
    pytest.skip(why, allow_module_level=True)

T = 0.5


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def words(a):
    return np.asarray(a).view(np.uint32)


def quantize_on_gpu(g, r0, threshold=T):
    m = codec.packed_size(g.size)
    gr, rr, pr = B.array(g), B.array(r0), B.zeros(m, "int32")
    bad = codec.quantize(B.arg(gr), B.arg(rr), B.arg(pr), threshold)
    return words(B.host(pr)), B.host(rr), bad


# 3_000_017 > 132 SMs x 32 blocks x 256 threads: the wire kernels' grid-stride loops go round
# more than once; 511-1031: a warp's chunk of 512 values, full, partial and both (the last
# chunk's words)
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 33, 511, 512, 513, 1024, 1031, 4097, (1 << 20) + 13,
                               3_000_017])
def test_quantize_dequantize_wire_match_cpu(n):
    rng = np.random.default_rng(n)
    g = rng.normal(0, 0.6, n).astype(np.float32)
    if n >= 4:
        g[:4] = [np.nan, np.inf, -np.inf, T]
    r0 = rng.normal(0, 0.3, n).astype(np.float32)
    m = codec.packed_size(n)
    packed, residual, bad = quantize_on_gpu(g, r0)
    want_p, want_r = ref.quantize(g, r0, T)
    np.testing.assert_array_equal(packed, want_p)
    np.testing.assert_array_equal(bits(residual), bits(want_r))
    assert bad == int((~np.isfinite(want_r)).sum())

    pr = B.array(want_p)
    for accumulate, base in ((True, np.ones(n, np.float32)), (False, np.full(n, 7.0, np.float32))):
        out = B.array(base)
        codec.dequantize(B.arg(pr), B.arg(out), T, accumulate=accumulate)
        want = ref.dequantize(want_p, n, T) + (base if accumulate else 0)
        np.testing.assert_array_equal(bits(B.host(out)), bits(want))

    wire = B.zeros(m, "float32")
    codec.wire_encode(B.arg(pr), B.arg(wire))
    np.testing.assert_array_equal(bits(B.host(wire)), bits(ref.wire_encode(want_p)))
    back = B.zeros(m, "int32")
    codec.wire_decode(B.arg(wire), B.arg(back))  # raises on a corrupt payload
    np.testing.assert_array_equal(words(B.host(back)), want_p)


@pytest.mark.parametrize("offset", [1, 2, 3])
@pytest.mark.parametrize("n", [7, 600, 100_003, 3_000_017])  # the last: their loops go round
def test_views_off_16_byte_alignment_match_cpu(n, offset):
    # a view `offset` floats into its buffer is not 16-byte aligned: the one-value-per-thread
    # kernels take it, and must give the same bits as the aligned ones and the CPU
    rng = np.random.default_rng(n + offset)
    g = rng.normal(0, 0.6, n).astype(np.float32)
    r0 = rng.normal(0, 0.3, n).astype(np.float32)
    pad = np.zeros(offset, np.float32)
    gb, rb = B.array(np.concatenate([pad, g])), B.array(np.concatenate([pad, r0]))
    pr = B.zeros(codec.packed_size(n), "int32")
    codec.quantize(B.arg(gb[offset:]), B.arg(rb[offset:]), B.arg(pr), T)
    want_p, want_r = ref.quantize(g, r0, T)
    np.testing.assert_array_equal(words(B.host(pr)), want_p)
    np.testing.assert_array_equal(bits(B.host(rb)[offset:]), bits(want_r))
    np.testing.assert_array_equal(bits(B.host(rb)[:offset]), bits(pad))  # nothing before the view
    base = rng.normal(0, 1, n).astype(np.float32)
    for accumulate in (False, True):
        ob = B.array(np.concatenate([pad, base]))
        codec.dequantize(B.arg(B.array(want_p)), B.arg(ob[offset:]), T, accumulate=accumulate)
        want = ref.dequantize(want_p, n, T) + (base if accumulate else 0)
        np.testing.assert_array_equal(bits(B.host(ob)[offset:]), bits(want))


def test_codes_to_host_in_the_same_call():
    n = 100_003
    rng = np.random.default_rng(11)
    g = rng.normal(0, 0.6, n).astype(np.float32)
    r0 = np.zeros(n, np.float32)
    gr, rr, pr = B.array(g), B.array(r0), B.zeros(codec.packed_size(n), "int32")
    for host in (codec.host_buffer(codec.packed_size(n), np.uint32),  # page-locked
                 np.full(codec.packed_size(n), 7, np.uint32)):        # ordinary memory
        rr = B.array(r0)
        codec.quantize(B.arg(gr), B.arg(rr), B.arg(pr), T, codes_to=host)
        want_p, _ = ref.quantize(g, r0, T)
        np.testing.assert_array_equal(host, want_p)
        np.testing.assert_array_equal(words(B.host(pr)), want_p)
    with pytest.raises(ValueError, match="codes_to must be host memory"):
        codec.quantize(B.arg(gr), B.arg(rr), B.arg(pr), T, codes_to=B.arg(B.zeros(codec.packed_size(n), "int32")))


def test_threshold_and_ties_match_cpu():
    # values exactly at +-threshold, just inside it, denormals, zeros of both signs
    t = 0.25
    edge = np.array([t, -t, np.nextafter(t, 0), -np.nextafter(t, 0), 1e-40, -0.0, 0.0, 3 * t] * 9, np.float32)
    r0 = np.zeros_like(edge)
    packed, residual, bad = quantize_on_gpu(edge, r0, t)
    want_p, want_r = ref.quantize(edge, r0, t)
    np.testing.assert_array_equal(packed, want_p)
    np.testing.assert_array_equal(bits(residual), bits(want_r))
    assert bad == 0


def test_count_nonfinite_on_gpu():
    rng = np.random.default_rng(3)
    x = rng.normal(size=2_500_003).astype(np.float32)
    where = rng.choice(x.size, 101, replace=False)
    x[where] = np.where(np.arange(101) % 3 == 0, np.nan, np.where(np.arange(101) % 3 == 1, np.inf, -np.inf))
    assert codec.count_nonfinite(B.arg(B.array(x))) == 101


def test_error_feedback_over_many_steps_matches_cpu():
    # the residual carries rounding over 50 steps: any drift from the CPU kernel would compound
    rng = np.random.default_rng(5)
    n = 70_001
    res_gpu, res_cpu = B.zeros(n, "float32"), np.zeros(n, np.float32)
    packed = B.zeros(codec.packed_size(n), "int32")
    cpu_packed = np.zeros(codec.packed_size(n), np.uint32)
    for _ in range(50):
        g = rng.normal(0, 0.2, n).astype(np.float32)
        gg = B.array(g)
        codec.quantize(B.arg(gg), B.arg(res_gpu), B.arg(packed), T)
        codec.quantize(g, res_cpu, cpu_packed, T)
        np.testing.assert_array_equal(words(B.host(packed)), cpu_packed)
    np.testing.assert_array_equal(bits(B.host(res_gpu)), bits(res_cpu))


def test_concurrent_callers_get_their_own_counts():
    # the kernels release the GIL and share one counter per device behind a lock
    n = 400_000
    rng = np.random.default_rng(9)
    cases = []
    for i in range(6):
        g = rng.normal(0, 0.6, n).astype(np.float32)
        g[: i * 7] = np.nan
        cases.append(g)
    inputs = [(B.array(g), B.zeros(n, "float32"), B.zeros(codec.packed_size(n), "int32")) for g in cases]
    args = [tuple(B.arg(a) for a in triple) for triple in inputs]
    seen = [[] for _ in cases]
    errors = []
    start = threading.Barrier(len(cases))

    def work(i):
        try:
            start.wait()
            for _ in range(20):
                seen[i].append(codec.count_nonfinite(args[i][0]))
            seen[i].append(codec.quantize(*args[i], T))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert seen == [[i * 7] * 21 for i in range(len(cases))]
    for (g, (_, rr, pr)) in zip(cases, inputs):
        want_p, want_r = ref.quantize(g, np.zeros(n, np.float32), T)
        np.testing.assert_array_equal(words(B.host(pr)), want_p)
        np.testing.assert_array_equal(bits(B.host(rr)), bits(want_r))


def test_corrupt_wire_is_reported_on_gpu():
    wire = B.array(np.array([1.0, np.nan, 0.5], np.float32))
    with pytest.raises(ValueError, match="2 of its words"):
        codec.wire_decode(B.arg(wire), B.arg(B.zeros(3, "int32")))


def test_mixed_devices_are_refused():
    with pytest.raises(ValueError, match="different device"):
        codec.quantize(B.arg(B.zeros(16, "float32")), np.zeros(16, np.float32), B.arg(B.zeros(1, "int32")), T)

"""CUDA kernels against the CPU kernels, bit for bit. Needs a GPU and a CUDA build of MXNet."""
import numpy as np
import pytest

from cdsgd_mx import codec
from cdsgd_mx import reference as ref

if codec.cuda_device_count() == 0:
    pytest.skip("no CUDA GPU here (or cdsgd_mx built without CUDA): CUDA kernels not run",
                allow_module_level=True)
mx = pytest.importorskip("mxnet")
try:
    mx.nd.zeros((1,), ctx=mx.gpu(0)).wait_to_read()
except mx.base.MXNetError:
    pytest.skip("this MXNet has no GPU support (install cdsgd-mx[gpu])", allow_module_level=True)

T = 0.5
GPU = mx.gpu(0)


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 33, 4097, (1 << 20) + 13])
def test_quantize_dequantize_wire_match_cpu(n):
    rng = np.random.default_rng(n)
    g = rng.normal(0, 0.6, n).astype(np.float32)
    if n >= 4:
        g[:4] = [np.nan, np.inf, -np.inf, T]
    r0 = rng.normal(0, 0.3, n).astype(np.float32)
    m = codec.packed_size(n)
    gr, rr, pr = mx.nd.array(g, ctx=GPU), mx.nd.array(r0, ctx=GPU), mx.nd.zeros((m,), ctx=GPU, dtype="int32")
    bad = codec.quantize(gr, rr, pr, T)
    want_p, want_r = ref.quantize(g, r0, T)
    np.testing.assert_array_equal(pr.asnumpy().view(np.uint32), want_p)
    np.testing.assert_array_equal(bits(rr.asnumpy()), bits(want_r))
    assert bad == int((~np.isfinite(want_r)).sum())
    out = mx.nd.ones((n,), ctx=GPU)
    codec.dequantize(pr, out, T, accumulate=True)
    np.testing.assert_array_equal(bits(out.asnumpy()), bits(1 + ref.dequantize(want_p, n, T)))
    wire = mx.nd.zeros((m,), ctx=GPU)
    codec.wire_encode(pr, wire)
    np.testing.assert_array_equal(bits(wire.asnumpy()), bits(ref.wire_encode(want_p)))
    back = mx.nd.zeros((m,), ctx=GPU, dtype="int32")
    codec.wire_decode(wire, back)
    np.testing.assert_array_equal(back.asnumpy().view(np.uint32), want_p)


def test_corrupt_wire_is_reported_on_gpu():
    wire = mx.nd.array(np.array([1.0, np.nan, 0.5], np.float32), ctx=GPU)
    with pytest.raises(ValueError, match="2 of its words"):
        codec.wire_decode(wire, mx.nd.zeros((3,), ctx=GPU, dtype="int32"))


def test_mixed_devices_are_refused():
    with pytest.raises(ValueError, match="different device"):
        codec.quantize(mx.nd.zeros((16,), ctx=GPU), mx.nd.zeros((16,)), mx.nd.zeros((1,), ctx=GPU), T)

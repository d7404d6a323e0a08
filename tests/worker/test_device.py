"""The device layer of a compressed round (cdsgd_mx/device.py, issue 12): compress on the device,
codes to the host, weights back. Over many steps with residuals it must equal the CPU path (the
reference quantizer) bit for bit: on a CPU "device" (numpy, MXNet NDArrays) here, and on a GPU
(PyTorch or CuPy through DLPack, or MXNet with CUDA) where one is present. The lent GPU
machine has no MXNet: this module must run there too (the MXNet case then skips)."""
import importlib.util

import numpy as np
import pytest

from cdsgd_mx import codec
from cdsgd_mx import reference as ref
from cdsgd_mx.bench import gpu
from cdsgd_mx.worker.device import DeviceBucket

T = 0.5
STEPS = 12


def bits(a):
    return np.asarray(a).view(np.uint32)


class MXNetCPU:
    name = "mxnet-cpu"

    def __init__(self):
        if importlib.util.find_spec("mxnet") is None:
            pytest.skip("MXNet is not installed here (the GPU machine has none): its CPU arrays not run")
        global mx
        import mxnet as mx

    def zeros(self, n, dtype):
        return mx.nd.zeros((n,), ctx=mx.cpu(1), dtype=dtype)

    def array(self, a):
        return mx.nd.array(a, ctx=mx.cpu(1), dtype=a.dtype)

    def host(self, x):
        return x.asnumpy()


class GPUDevice:
    """A GPU through bench.gpu's adapters; every call hands finished data (synchronized)."""

    def __init__(self):
        if codec.cuda_device_count() == 0:
            pytest.skip("no CUDA GPU here (or cdsgd_mx built without CUDA): the device layer's GPU path not run")
        self.B, why = gpu.backend()
        if self.B is None:
            pytest.skip(why)
        self.name = "gpu-" + self.B.name

    def zeros(self, n, dtype):
        return self.B.zeros(n, dtype)

    def array(self, a):
        return self.B.array(a)

    def host(self, x):
        return self.B.host(x)


DEVICES = {"numpy": gpu.HostArrays, "mxnet-cpu": MXNetCPU, "gpu": GPUDevice}


def gradients(n, steps, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 0.4, n).astype(np.float32) for _ in range(steps)]


@pytest.mark.parametrize("where", list(DEVICES))
@pytest.mark.parametrize("n", [1, 17, 4099, (1 << 20) + 5])
def test_compress_equals_the_cpu_path_over_many_steps(where, n):
    dev = DEVICES[where]()
    bucket = DeviceBucket(n, T, dev.zeros)
    residual = np.zeros(n, np.float32)
    for t, g in enumerate(gradients(n, STEPS, n)):
        want_codes, residual = ref.quantize(g, residual, T)
        assert bucket.compress(dev.array(g)) == 0
        np.testing.assert_array_equal(bits(bucket.host_codes), bits(want_codes), err_msg="codes, step %d" % t)
        # what the host sends: the same wire as the plugin's CPU path
        wire, want_wire = np.empty(bucket.words, np.float32), np.empty(bucket.words, np.float32)
        codec.wire_encode(bucket.host_codes, wire)
        codec.wire_encode(want_codes, want_wire)
        np.testing.assert_array_equal(bits(wire), bits(want_wire))
    np.testing.assert_array_equal(bits(bucket.residual_to_host()), bits(residual))
    assert np.abs(residual).max() > 0  # the residual carried something from step to step


@pytest.mark.parametrize("where", list(DEVICES))
def test_weights_and_correction_rounds_cross_unchanged(where):
    dev = DEVICES[where]()
    n = 1027
    rng = np.random.default_rng(3)
    g = rng.normal(0, 1, n).astype(np.float32)
    g[:3] = [np.nan, -0.0, np.inf]  # bits, not values, are copied
    host = codec.host_buffer(n)
    DeviceBucket.to_host(dev.array(g), host)
    np.testing.assert_array_equal(bits(host), bits(g))
    out = dev.zeros(n, "float32")
    DeviceBucket.to_device(host, out)
    np.testing.assert_array_equal(bits(dev.host(out)), bits(g))


@pytest.mark.parametrize("where", list(DEVICES))
def test_a_non_finite_gradient_is_counted_and_a_checkpointed_residual_restores(where):
    dev = DEVICES[where]()
    n = 40
    g = gradients(n, 2, 7)
    a = DeviceBucket(n, T, dev.zeros)
    a.compress(dev.array(g[0]))
    saved = a.residual_to_host()
    b = DeviceBucket(n, T, dev.zeros)
    b.residual_from_host(saved)
    a.compress(dev.array(g[1]))
    b.compress(dev.array(g[1]))
    np.testing.assert_array_equal(bits(a.host_codes), bits(b.host_codes))
    bad = g[1].copy()
    bad[[3, 9]] = np.nan
    assert a.compress(dev.array(bad)) == 2


def test_host_buffers_and_copy_refuse_what_they_cannot_do():
    buf = codec.host_buffer(8)
    assert buf.dtype == np.float32 and buf.shape == (8,) and not buf.any()
    assert codec.is_pinned(buf) == (codec.cuda_device_count() > 0)
    assert codec.host_buffer(0).shape == (0,)
    with pytest.raises(TypeError, match="float32 or uint32"):
        codec.host_buffer(4, np.float64)
    with pytest.raises(ValueError, match="dst has 7 elements"):
        codec.copy(np.zeros(8, np.float32), np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="must not share memory"):
        codec.copy(buf[:4], buf[2:6])
    with pytest.raises(TypeError, match="float32, int32 or uint32"):
        codec.copy(np.zeros(8, np.float64), buf)


def test_the_device_benchmark_runs_and_says_when_there_is_no_gpu(tmp_path):
    import json
    import subprocess
    import sys
    out = tmp_path / "d.json"
    cmd = [sys.executable, "-m", "cdsgd_mx.bench.device", "--values", "5000", "--repeats", "2", "--threads", "1"]
    proc = subprocess.run(cmd + ["--device", "cpu", "--json", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "host path / device part" in proc.stdout
    row = json.loads(out.read_text())
    assert row["values"] == 5000 and row["device_part_ms"] > 0 and row["host_path_ms_1threads"] > 0
    if codec.cuda_device_count() == 0:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines() == [
            "bench.device: no CUDA GPU here (or cdsgd_mx built without CUDA); --device cpu runs the steps on host arrays"]

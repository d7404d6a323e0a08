"""GPU arrays for the codec's CUDA tests and benchmark, from whichever framework is present.

The codec takes MXNet NDArrays directly; arrays of other frameworks (PyTorch, CuPy) go in as
DLPack capsules. The kernels run on the codec's own CUDA stream and do not wait for another
framework's streams: an input must hold finished data (codec.md). So every adapter call that
writes device memory (array, zeros, copy) returns only when the write is done, and `arg`
synchronizes the device before it hands out a capsule.
"""
import numpy as np


class MXNetGPU:
    name = "mxnet"

    def __init__(self):
        import mxnet as mx
        self.mx, self.ctx = mx, mx.gpu(0)
        mx.nd.zeros((1,), ctx=self.ctx).wait_to_read()  # raises without a CUDA build of MXNet

    def array(self, a):
        return self.mx.nd.array(a, ctx=self.ctx, dtype=a.dtype)

    def zeros(self, n, dtype):
        return self.mx.nd.zeros((n,), ctx=self.ctx, dtype=dtype)

    def arg(self, x):
        return x

    def host(self, x):
        return x.asnumpy()

    def copy(self, src, dst):
        src.copyto(dst)
        dst.wait_to_read()


class TorchGPU:
    name = "torch"
    DTYPES = {"float32": "float32", "int32": "int32", "uint32": "int32"}  # words: bits, not values

    def __init__(self):
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        self.torch = torch

    def array(self, a):
        a = np.ascontiguousarray(a)
        if a.dtype == np.uint32:
            a = a.view(np.int32)
        x = self.torch.from_numpy(a).cuda()
        self.torch.cuda.synchronize()  # a pageable upload may still be in flight on return
        return x

    def zeros(self, n, dtype):
        x = self.torch.zeros(n, dtype=getattr(self.torch, self.DTYPES[np.dtype(dtype).name]), device="cuda")
        self.torch.cuda.synchronize()
        return x

    def arg(self, x):
        self.torch.cuda.synchronize()
        return x.__dlpack__()

    def host(self, x):
        return x.cpu().numpy()

    def copy(self, src, dst):
        dst.copy_(src)
        self.torch.cuda.synchronize()


class CuPyGPU:
    name = "cupy"

    def __init__(self):
        import cupy
        cupy.zeros(1).sum()  # raises without a usable device
        self.cupy = cupy

    def array(self, a):
        x = self.cupy.asarray(np.ascontiguousarray(a))
        self.cupy.cuda.Device().synchronize()
        return x

    def zeros(self, n, dtype):
        x = self.cupy.zeros(n, dtype=dtype)
        self.cupy.cuda.Device().synchronize()
        return x

    def arg(self, x):
        self.cupy.cuda.Device().synchronize()
        return x.toDlpack()

    def host(self, x):
        return self.cupy.asnumpy(x)

    def copy(self, src, dst):
        dst[...] = src
        self.cupy.cuda.Device().synchronize()


class HostArrays:
    """numpy arrays standing in for device memory: the device layer's steps on the CPU."""
    name = "numpy (no GPU)"

    def zeros(self, n, dtype):
        return np.zeros(n, dtype)

    def array(self, a):
        return np.array(a)

    def arg(self, x):
        return x

    def host(self, x):
        return np.array(x)


def backend():
    """(adapter, None) for the first framework that can hold arrays on GPU 0, else (None, why)."""
    reasons = []
    for cls in (MXNetGPU, TorchGPU, CuPyGPU):
        try:
            return cls(), None
        except Exception as e:  # ImportError, no device, CPU-only build: try the next one
            reasons.append("%s: %s" % (cls.name, str(e).strip().splitlines()[0][:80] if str(e).strip() else type(e).__name__))
    return None, "no framework with a usable CUDA device (" + "; ".join(reasons) + ")"

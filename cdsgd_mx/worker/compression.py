"""A bucket set's compressor and its error-feedback memory: 2-bit threshold quantization of
g(t) + residual (Algorithm 1's compression, MXNet's rule and packed layout), the residual kept
for the next compressed step. On the host (numpy codes, one native pass per bucket) or, for
device-resident buckets, on the gradients' device (a device.DeviceBucket per bucket, which
hands back only the codes).

API: Compressor(buckets, size, threshold, device=None).compress(i, g) -> (codes, bad) /
residual_values() / set_residual(values) / keep(spans) -> restore.
"""
import mxnet as mx
import numpy as np

from cdsgd_mx import codec
from cdsgd_mx.worker.device import DeviceBucket


class Compressor:
    def __init__(self, buckets, size, threshold, device=None):
        self.threshold, self.device = threshold, device
        self._offsets = [(b.offset, b.size) for b in buckets]
        if device:  # residual and codes on the device; codes cross to a reused host buffer
            self.residual = None
            self._devices = [DeviceBucket(b.size, threshold, lambda n, dtype: mx.nd.zeros((n,), ctx=device, dtype=dtype))
                             for b in buckets]
        else:
            self.residual = np.zeros(size, np.float32)  # one flat array; each bucket has its view
            self._residuals = [self.residual[b.offset:b.offset + b.size] for b in buckets]
            self._codes = [np.zeros(b.words, np.uint32) for b in buckets]  # the paper's sml_buf, per bucket

    def compress(self, i, g):
        """Bucket i's codes of g + residual, residual -= their value. g: the array holding the
        bucket's g(t) (grad_buf's or comm_buf's part; dev_comm on a device). Returns (the codes
        in host memory, the count of non-finite residuals)."""
        if self.device:
            bad = self._devices[i].compress(g)
            return self._devices[i].host_codes, bad
        return self._codes[i], codec.quantize(g, self._residuals[i], self._codes[i], self.threshold)

    def residual_values(self):
        """The residual, a numpy copy (checkpoints)."""
        if self.device:
            return np.concatenate([d.residual_to_host() for d in self._devices])
        return self.residual.copy()

    def set_residual(self, values):
        if self.device:
            for d, (offset, size) in zip(self._devices, self._offsets):
                d.residual_from_host(values[offset:offset + size])
        else:
            self.residual[:] = values

    def keep(self, spans):
        """The residual of [begin, end) spans as it is now, and a function that puts it back
        after this round's compression: a parameter skipped everywhere (no fresh gradient) is
        not in the step, its error-feedback memory included."""
        before = self.residual_values()

        def restore():
            now = self.residual_values()
            for begin, end in spans:
                now[begin:end] = before[begin:end]
            self.set_residual(now)
        return restore

"""The device part of a bucket's round (issue 12; docs/design.md, "Devices").

When a worker's gradients live on a GPU, copying the whole fp32 gradient to the host and
quantizing it there costs more than the round it compresses (docs/performance.md, "The device part
of a compressed round": ResNet-50's 25.6 M values on an H200 host, 4.6 ms with 16 CPU threads, 23.6 ms with one). A DeviceBucket keeps what Algorithm 1's
compression touches on the gradients' device instead:
- residual: the quantizer's error-feedback memory;
- codes: sml_buf, the 2-bit codes of g(t) + residual (MXNet's packed layout);
and only what the parameter server must carry crosses to the host, into buffers made once:
- host_codes: the codes (0.25 B/value), page-locked where CUDA can give it, which the host side
  encodes for the wire (codec.wire_encode);
- an fp32 correction round (every k-th step) copies g(t) itself (to_host), and the new weights
  come back once per bucket (to_device).

Arrays are anything the codec takes: MXNet NDArrays (their DLPack views wait for MXNet's engine),
PyTorch or CuPy tensors (through __dlpack__), numpy arrays for a CPU "device". A framework other
than MXNet must hand finished data: the kernels and copies run on the codec's own CUDA stream and
each call returns with its writes done (docs/codec.md). The layer takes no MXNet, so the lent
GPU machine (PyTorch, CuPy, no MXNet CUDA build) tests it bit for bit against the CPU path.
"""
import numpy as np

from cdsgd_mx import codec


class DeviceBucket:
    """One bucket of `size` values: its residual and codes on the device, its codes' host copy.

    zeros(n, dtype) makes a zeroed device array of n float32 or int32 values (the device the
    bucket's gradients live on)."""

    def __init__(self, size, threshold, zeros):
        self.size = int(size)
        self.threshold = float(threshold)
        self.words = codec.packed_size(self.size)
        self.residual = zeros(self.size, "float32")
        self.codes = zeros(self.words, "int32")  # 32-bit words: the codec reads bits, not values
        self.host_codes = codec.host_buffer(self.words, np.uint32)

    def compress(self, g):
        """Algorithm 1's compression of g(t) on the device: residual += g; codes = the 2-bit
        codes of it; residual -= what they decode to. Then the codes to host_codes. Returns the
        number of non-finite residual values (nothing is to be pushed when it is not 0). One call,
        one wait: per bucket and step, a GPU's launch-and-wait latency is paid once."""
        return codec.quantize(g, self.residual, self.codes, self.threshold, codes_to=self.host_codes)

    @staticmethod
    def to_host(g, host):
        """host = g(t) in fp32: the correction round's payload (every k-th step)."""
        codec.copy(g, host)

    @staticmethod
    def to_device(host, out):
        """out = the weights pulled to the host (W(t+1)), once per bucket."""
        codec.copy(host, out)

    def residual_to_host(self):
        """The residual as a numpy array (checkpoints, tests)."""
        out = np.empty(self.size, np.float32)
        codec.copy(self.residual, out)
        return out

    def residual_from_host(self, values):
        codec.copy(np.ascontiguousarray(values, np.float32).reshape(-1), self.residual)

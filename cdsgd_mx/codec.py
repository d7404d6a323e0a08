"""Threshold 2-bit quantization with error feedback, and its wire format.

Arrays are MXNet NDArrays (passed zero-copy through DLPack), numpy arrays, or DLPack capsules;
all arrays of a call live on one device. Kernels run with the GIL released.

    residual += grad
    code = +threshold if residual >= threshold, -threshold if residual <= -threshold, else 0
    residual -= code                                           (MXNet's rule, bit for bit)

`packed` holds MXNet's own 2-bit layout: ceil(n/16) 32-bit words (float32, int32 or uint32 array).
`wire` holds the same codes as float32 values that survive MXNet's parameter server bit-exactly
("ternary16": 16 base-3 digits per float32, 0.25 bytes per value; see docs/wire-format.md).

Non-finite input follows MXNet: a NaN residual emits 0 and stays NaN, +-Inf emits +-threshold
and stays +-Inf. `quantize` returns how many residual entries are non-finite afterwards, so a
caller can refuse to push a poisoned gradient without a second pass over the data.
"""
import numbers

import numpy as np

from cdsgd_mx import _native

VALUES_PER_WORD = 16
WIRE_BYTES_PER_VALUE = 4 / VALUES_PER_WORD  # 0.25, like MXNet's own 2-bit wire


def packed_size(n):
    """Number of 32-bit words that hold n packed values."""
    return (int(n) + VALUES_PER_WORD - 1) // VALUES_PER_WORD


wire_size = packed_size  # one wire float per packed word


def _threads(threads):
    if threads is None:
        return 0  # the module default, see set_num_threads
    if type(threads) is int and threads >= 1:  # fast path: these checks run on every call
        return threads
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise ValueError("threads must be an integer >= 1 or None, got %r" % (threads,))
    return int(threads)


def _threshold(threshold):
    """Checked here, before any NDArray becomes a DLPack capsule: an error raised by the native
    call while it holds one of MXNet's capsules surfaces as a SystemError, not the ValueError."""
    if type(threshold) is float and 0.0 < threshold < 3.4e38:  # fast path: every step
        return threshold
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError("threshold must be a number, got %r" % (threshold,))
    if not (float(threshold) > 0 and np.isfinite(np.float32(threshold))):
        raise ValueError("threshold must be a finite number > 0 (as float32), got %r" % (threshold,))
    return float(threshold)


def _array(x, write):
    """NDArrays become DLPack capsules (zero-copy, after the engine's pending writes, and for
    an output after pending reads too); numpy arrays and capsules pass through."""
    if type(x) is np.ndarray:
        return x
    if hasattr(x, "to_dlpack_for_write"):
        if getattr(x, "stype", "default") != "default":
            raise TypeError("only dense NDArrays are supported, got stype %r" % x.stype)
        return x.to_dlpack_for_write() if write else x.to_dlpack_for_read()
    if hasattr(x, "__dlpack__"):  # PyTorch, CuPy: the caller hands finished data (codec.md)
        return x.__dlpack__()
    return x


def quantize(grad, residual, packed, threshold, threads=None, codes_to=None):
    """residual += grad; write codes into packed; residual -= decoded codes. With codes_to (host
    memory of packed's size), the codes are copied there too, in the same wait on a GPU.

    Returns the number of non-finite residual entries after the update (0 on healthy input)."""
    t = _threshold(threshold)
    return _native.quantize_2bit(_array(grad, False), _array(residual, True), _array(packed, True), t,
                                 _threads(threads), None if codes_to is None else _array(codes_to, True))


def dequantize(packed, out, threshold, accumulate=False, threads=None):
    """out = decoded codes (+-threshold or 0), or out += decoded codes with accumulate=True."""
    t = _threshold(threshold)
    _native.dequantize_2bit(_array(packed, False), _array(out, True), t, bool(accumulate), _threads(threads))


def wire_encode(packed, wire, threads=None):
    """Packed words -> wire floats (same count)."""
    _native.wire_encode(_array(packed, False), _array(wire, True), _threads(threads))


def wire_decode(wire, packed, threads=None):
    """Wire floats -> packed words. Raises ValueError on a corrupt payload."""
    bad = _native.wire_decode(_array(wire, False), _array(packed, True), _threads(threads))
    if bad:
        raise ValueError("wire: %d of its words are not valid ternary16 codes (corrupt payload)" % bad)


def decode_sum(wire, out, threshold, threads=None):
    """The server's decode of a bucket: out = sum over the rows of wire ([rows, m] floats, one
    row per worker, each starting with its ceil(n/16) codes; any values after them, such as a
    proof tag, are skipped) of their decoded codes, in one call. Raises ValueError on a
    corrupt payload. CPU only."""
    t = _threshold(threshold)
    rows, stride = (wire.shape[0], wire.shape[1]) if wire.ndim == 2 else (1, 0)
    bad = _native.decode_sum(_array(wire, False), rows, _array(out, True), t, _threads(threads), stride)
    if bad:
        raise ValueError("wire: %d of its words are not valid ternary16 codes (corrupt payload)" % bad)


def _sgd_hyper(runs, n, momentum, rescale_grad, clip_gradient):
    """An SGD step's runs and hyper-parameters as MXNet's kernels receive them (float32; clip
    -1: none), the runs checked to be sorted and disjoint inside [0, n): before any NDArray
    becomes a capsule (see _threshold)."""
    f32 = lambda v: float(np.float32(v))
    runs = [(int(b), int(e), f32(lr), f32(wd)) for b, e, lr, wd in runs]
    last = 0
    for b, e, _, _ in runs:
        if not last <= b <= e <= n:
            raise ValueError("runs must be sorted, disjoint ranges inside [0, n = %d), got [%d, %d)" % (n, b, e))
        last = e
    clip = -1.0 if clip_gradient is None else f32(clip_gradient)
    return runs, f32(momentum), f32(rescale_grad), clip


def decode_sgd(wire, weight, mom, n, threshold, runs, momentum, rescale_grad, clip_gradient=None, threads=None):
    """The server's fused decode and SGD step of a bucket (one pass, the gradient never stored):
    g = what decode_sum(wire, g, threshold) would hold for the first n values; then, for each
    run (begin, end, lr, wd) of parameters, MXNet's sgd_mom_update(weight, g, mom, momentum,
    lr, wd, rescale_grad, clip_gradient) in place, or sgd_update when mom is None. Bit for bit
    what decode_sum followed by MXNet's own kernels gives, with lr, wd, momentum, rescale_grad
    and clip_gradient rounded to float32 as MXNet's kernels receive them. Values outside every
    run are left as they are. Raises ValueError on a corrupt payload, before anything changes.
    CPU only."""
    t = _threshold(threshold)
    rows, stride = (wire.shape[0], wire.shape[1]) if wire.ndim == 2 else (1, 0)
    runs, momentum, rescale_grad, clip = _sgd_hyper(runs, int(n), momentum, rescale_grad, clip_gradient)
    bad = _native.decode_sgd(_array(wire, False), rows, stride, _array(weight, True),
                             None if mom is None else _array(mom, True), int(n), t, runs, momentum,
                             rescale_grad, clip, _threads(threads))
    if bad:
        raise ValueError("wire: %d of its words are not valid ternary16 codes (corrupt payload)" % bad)


def sgd(grad, weight, mom, runs, momentum, rescale_grad, clip_gradient=None, threads=None):
    """The server's SGD step of an fp32 round, in place: for each run (begin, end, lr, wd) of
    parameters, MXNet's sgd_mom_update(weight, grad, mom, momentum, lr, wd, rescale_grad,
    clip_gradient), or sgd_update when mom is None; bit for bit MXNet's own kernels, with the
    hyper-parameters rounded to float32 as they receive them, and none of their per-call cost
    (an engine operation, its wait). grad, weight and mom: float32 arrays of one size. Values
    outside every run are left as they are; mom may be longer than weight (its first
    weight.size values are the state). CPU only."""
    # checked before any NDArray becomes a capsule (see _threshold)
    if grad.size != weight.size or (mom is not None and mom.size < weight.size):
        raise ValueError("sgd: grad has %d values and mom %s for weight's %d (grad: as many, mom: at least as many)"
                         % (grad.size, "none" if mom is None else mom.size, weight.size))
    runs, momentum, rescale_grad, clip = _sgd_hyper(runs, weight.size, momentum, rescale_grad, clip_gradient)
    _native.sgd(_array(grad, False), _array(weight, True), None if mom is None else _array(mom, True), runs,
                momentum, rescale_grad, clip, _threads(threads))


PULL_LEVEL = _native.PULL_LEVEL          # a 2-bit pull's step: this many times the RMS change
PULL_THRESHOLD = _native.PULL_THRESHOLD  # a value moves where |w - v| >= this many steps


def pull_scales(w, v, pieces):
    """The step s of each piece (begin, end) of a 2-bit pull: PULL_LEVEL times the root mean
    square of w - v over it (the float32 differences squared and summed in float64, in a fixed
    order whatever the thread count, times PULL_LEVEL in float64), as a float32 value; 1.0 where
    it is 0. CPU only."""
    return _native.pull_scales(_array(w, False), _array(v, False), pieces)


def pull_norms(w, v):
    """(sum of (w - v)^2, sum of w^2): the float32 differences and w, squared and summed in float64
    in a fixed order, in one pass (the norms a down payload carries). CPU only."""
    return _native.pull_norms(_array(w, False), _array(v, False))


def pull_target(w, prev, target, lookahead, threads=None):
    """Where a compressed pull aims: target = w + lookahead * (w - prev) in float32 (each
    operation rounded, as numpy's), then prev = w, in one pass. CPU only."""
    _native.pull_target(_array(w, False), _array(prev, True), _array(target, True), np.float32(lookahead),
                        _threads(threads))


def pull_encode(w, v, pieces, wire, threads=None):
    """The server's encode of a 2-bit pull (pull_compression.py), in two passes: the steps s
    of the pieces [(begin, end)] (pull_scales), then for each value of a piece code = +1 where
    (w - v) / s >= PULL_THRESHOLD, -1 where <= -PULL_THRESHOLD, else 0; v += code * s; the
    codes written into wire (ceil(v.size/16) ternary16 words). A value outside every piece gets
    code 0. Bit for bit what quantize (at PULL_THRESHOLD, of (w - v) / s with a zero gradient),
    dequantize at 1, a multiply by s and an add give. Returns the scales; raises FloatingPointError, with v and wire unchanged,
    where w - v is not finite. CPU only."""
    scales = _native.pull_encode(_array(w, False), _array(v, True), pieces, _array(wire, True), _threads(threads))
    if not all(np.isfinite(scales)):
        raise FloatingPointError("w - v is not finite in %d of %d pieces: nothing encoded"
                                 % (int((~np.isfinite(scales)).sum()), len(scales)))
    return scales


def pull_decode(wire, v, pieces, scales, out=None, threads=None):
    """A worker's decode of a 2-bit pull, in one pass: v += code * s for each piece (begin,
    end) and its scale s, then out = v (when given). Raises ValueError on a corrupt payload,
    before v changes. CPU only."""
    bad = _native.pull_decode(_array(wire, False), _array(v, True), None if out is None else _array(out, True),
                              pieces, scales, _threads(threads))
    if bad:
        raise ValueError("wire: %d of its words are not valid ternary16 codes (corrupt payload)" % bad)


def tags_match(x, starts, macs):
    """Whether x (float32) holds at each of `starts` the proof tag (auth.tag) of the matching
    16-byte MAC in macs (bytes, the MACs back to back): one call for a round's tags."""
    return _native.tags_match(_array(x, False), starts, macs)


def writable(x):
    """What set_value can write through for the life of x: a DLPack capsule of an NDArray (made
    after the engine's pending reads and writes of x; not consumed by the calls), or x itself
    (numpy). Whoever writes through it must order the writes against MXNet's engine itself
    (wait for x first): the engine does not see them."""
    return _array(x, True)


def set_value(x, index, value):
    """x[index] = value, in place (x: numpy, or what writable() returned)."""
    _native.set_value(x, int(index), float(value))


def count_nonfinite(x, threads=None):
    """Number of NaN/Inf values in x (float32): the Trainer's check before a push."""
    return _native.count_nonfinite(_array(x, False), _threads(threads))


def copy(src, dst):
    """dst = src (4-byte elements, same count; the bits are copied) between any two of host and
    device memory: numpy, NDArrays, DLPack capsules or objects with __dlpack__. Returns when
    the copy is done."""
    _native.copy(_array(src, False), _array(dst, True))


def host_buffer(n, dtype=np.float32):
    """A numpy array of n float32 or uint32 values in host memory made for copies to and from a
    device: page-locked where a CUDA device is usable, ordinary memory otherwise (is_pinned)."""
    dtype = np.dtype(dtype)
    formats = {np.dtype(np.float32): "f", np.dtype(np.uint32): "I"}
    if dtype not in formats:
        raise TypeError("host_buffer holds float32 or uint32, got %s" % dtype.name)
    return np.frombuffer(_native.HostBuffer(int(n), formats[dtype]), dtype=dtype, count=int(n))


def is_pinned(x):
    """Whether x is (a view of) a page-locked host_buffer."""
    while isinstance(x, (np.ndarray, memoryview)):
        x = x.base if isinstance(x, np.ndarray) else x.obj  # numpy 2 puts a memoryview between
    return isinstance(x, _native.HostBuffer) and x.pinned


def set_num_threads(threads):
    """Threads the CPU kernels use when a call passes threads=None (default 1)."""
    _native.set_num_threads(_threads(threads))


def get_num_threads():
    return _native.get_num_threads()


def built_with_cuda():
    return bool(_native.built_with_cuda)


def cuda_device_count():
    """GPUs the CUDA kernels can use here (0 without CUDA build, driver or GPU)."""
    return _native.cuda_device_count()

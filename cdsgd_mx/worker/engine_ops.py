"""Operations of our own on MXNet's engine: native functions (the _native module, no Python on
the engine's threads) pushed through MXNet's MXEnginePushSyncND with the arrays they read and
write, so the engine orders them among its own operations like any other.

API: push(function, param, deleter, reads, writes, name); order(reads, writes);
stamp(reads, writes, seconds).
"""
import ctypes

_CPU = (ctypes.c_int32 * 2)(1, 0)  # mxnet::Context{kCPU, 0}: the operation runs on a CPU worker thread
# mxnet::FnProperty::kCPUPrioritized: the engine's CPU priority workers run the operation once
# it is ready, as MXNet's own kvstore reductions, instead of queueing it first in, first out
# behind forward/backward's operations on the normal CPU worker (one thread by default)
_PRIORITIZED = ctypes.c_int(3)


def handles(arrays):
    """A C array of the NDArrays' handles (make once where an operation is pushed every round)."""
    from mxnet.base import NDArrayHandle
    return (NDArrayHandle * len(arrays))(*[a.handle for a in arrays])


def push(function, param, deleter, reads, writes, name):
    """Push function(run context, param) (native addresses; deleter(param) once it is done, or
    None), reading `reads` and writing `writes` (NDArrays, or what handles() made of them): it
    runs after every earlier operation that writes `reads` or touches `writes`, and before every
    later one that touches what it writes; on a CPU priority worker (keep it short)."""
    from mxnet.base import _LIB, check_call
    reads = reads if isinstance(reads, ctypes.Array) else handles(reads)
    writes = writes if isinstance(writes, ctypes.Array) else handles(writes)
    check_call(_LIB.MXEnginePushSyncND(ctypes.c_void_p(function), ctypes.c_void_p(param),
                                       ctypes.c_void_p(deleter) if deleter else None, _CPU,
                                       reads, len(reads), writes, len(writes), ctypes.byref(_PRIORITIZED), 0,
                                       ctypes.c_char_p(name)))


def order(reads, writes):
    """Push an operation that does nothing, reading `reads` and writing `writes` (NDArrays): MXNet
    then runs every later operation on `writes` after every earlier one on both."""
    from cdsgd_mx import _native
    push(_native.engine_noop_address(), None, None, reads, writes, b"cdsgd_order")


def stamp(reads, writes, seconds):
    """Push an operation that sets `seconds` (a ctypes.c_double, kept alive by the caller until
    `writes` are written) to time.perf_counter()'s clock once every earlier write of `reads`
    is done; it writes `writes` (NDArrays) so that a waiter can wait for it alone."""
    from cdsgd_mx import _native
    push(_native.engine_stamp_address(), ctypes.addressof(seconds), None, reads, writes, b"cdsgd_stamp")

"""A fixed list of engine copies (src -> dst), issued through MXNet's C API.

Each step copies the new weights from comm_buf (or loc_buf) into every parameter's array: one
engine copy per parameter. `NDArray.copyto` costs about 50 us of Python per call in MXNet 1.9.1
(its imperative wrapper parses arguments and wraps outputs in new NDArray objects), 3.3-4 ms
for ResNet-20's 65 arrays on a 2-core machine. The same `_copyto` operator invoked with the
handles prepared once costs about 10 us per copy (docs/performance-history.md, "The parameters' copies through MXNet's C API"
two cuts"). It is the same operator with the same inputs and outputs: the engine orders each copy
after what writes its source and before what reads its destination, exactly as copyto's.

API: EngineCopies(pairs).run().
"""
import ctypes


class EngineCopies:
    """pairs: [(src NDArray, dst NDArray)], kept alive here (the handles point into them)."""

    def __init__(self, pairs):
        from mxnet.base import _LIB, NDArrayHandle, OpHandle, c_str, check_call
        self.pairs = list(pairs)
        self._invoke, self._check = _LIB.MXImperativeInvoke, check_call
        self._op = OpHandle()
        check_call(_LIB.NNGetOpHandle(c_str("_copyto"), ctypes.byref(self._op)))
        self._args = []
        for src, dst in self.pairs:
            ins = (NDArrayHandle * 1)(src.handle)
            outs = (NDArrayHandle * 1)(dst.handle)
            out_ptr = ctypes.cast(outs, ctypes.POINTER(NDArrayHandle))
            count = ctypes.c_int(1)
            self._args.append((ins, outs, out_ptr, count))

    def run(self):
        """Issue every copy (asynchronous: engine operations, in list order)."""
        for ins, _, out_ptr, count in self._args:
            count.value = 1  # MXNet writes the count of outputs back
            self._check(self._invoke(self._op, 1, ins, ctypes.byref(count), ctypes.byref(out_ptr), 0, None, None))

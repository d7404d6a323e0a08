"""ServerState, the servers' updater, in process: every kind of update waits for MXNet's
asynchronous merge of the workers' pushes before it returns (MXNet frees the received buffers
right after; a registration round that never read the merge crashed a server)."""
import numpy as np
import pytest

mx = pytest.importorskip("mxnet")

from cdsgd_mx import codec  # noqa: E402
from cdsgd_mx.server.node import ServerState  # noqa: E402


@pytest.fixture
def waited(monkeypatch):
    """Handles of the NDArrays whose wait_to_read was called."""
    seen = set()
    original = mx.nd.NDArray.wait_to_read

    def wait_to_read(self):
        seen.add(self.handle.value)
        return original(self)
    monkeypatch.setattr(mx.nd.NDArray, "wait_to_read", wait_to_read)
    return seen


def server():
    s = ServerState()
    s.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
    return s


def test_registration_round_waits_for_the_merge_and_keeps_the_weight(waited):
    s = server()
    s.command('{"op": "register", "payloads": {}, "weights": [3]}')
    weight, grad = mx.nd.ones((8,)), mx.nd.full((8,), 2.0)
    s(3, grad, weight)
    assert grad.handle.value in waited
    np.testing.assert_array_equal(weight.asnumpy(), np.ones(8))  # recorded, not updated
    assert s.weights[3] is weight


@pytest.mark.parametrize("op", ["assign", "tally"])
def test_assign_and_tally_store_the_sum_after_waiting(waited, op):
    s = server()
    s.command('{"op": "%s", "keys": [5]}' % op)
    weight, grad = mx.nd.zeros((4,)), mx.nd.array([1, 2, 3, 4])
    s(5, grad, weight)
    assert grad.handle.value in waited
    np.testing.assert_array_equal(weight.asnumpy(), [1, 2, 3, 4])


def test_gradient_update_waits_and_applies_the_optimizer(waited):
    s = server()
    weight, grad = mx.nd.ones((4,)), mx.nd.full((4,), 2.0)
    s(7, grad, weight)
    assert grad.handle.value in waited
    np.testing.assert_allclose(weight.asnumpy(), 1 - 0.5 * 2.0)


def test_payload_update_waits_and_applies_the_decoded_sum(waited):
    s = server()
    n, t = 20, 0.25
    s.command('{"op": "register", "payloads": {"9": [1, %d, %r]}, "weights": [1]}' % (n, t))
    weight = mx.nd.ones((n,))
    s(1, mx.nd.zeros((n,)), weight)  # registration round
    m = codec.packed_size(n)
    rows = []
    for sign in (1.0, 1.0):  # both workers push +t everywhere
        packed, residual = np.zeros(m, np.uint32), np.zeros(n, np.float32)
        codec.quantize(np.full(n, sign * t, np.float32), residual, packed, t)
        wire = np.zeros(m, np.float32)
        codec.wire_encode(packed, wire)
        rows.append(wire)
    grad = mx.nd.sparse.row_sparse_array((np.stack(rows), [0, 1]), shape=(2, m))
    s(9, grad, mx.nd.zeros((2, m)))
    assert grad.handle.value in waited
    np.testing.assert_allclose(weight.asnumpy(), 1 - 0.5 * 2 * t)


def test_fp32_rows_are_summed_in_rank_order_whatever_order_they_came_in(waited):
    """fp32_sum='rank': a round of a rows key is the paired weight key's fp32 round on the sum
    of the workers' rows, added in rank order in float32 (here the rows come as 2, 0, 1)."""
    s = server()
    n = 1000
    s.command('{"op": "register", "payloads": {}, "rows": {"12": 3}, "weights": [3]}')
    weight = mx.nd.ones((n,))
    s(3, mx.nd.zeros((n,)), weight)  # registration round: a dense round trip, as at start-up
    g = np.random.RandomState(0).normal(0, 1, (3, n)).astype(np.float32)
    in_rank_order = (g[0] + g[1]) + g[2]
    assert (in_rank_order != (g[2] + g[0]) + g[1]).any()  # the order shows in the last bits
    grad = mx.nd.sparse.row_sparse_array((g[[2, 0, 1]], [2, 0, 1]), shape=(3, n))
    s(12, grad, mx.nd.zeros((3, n)))
    assert grad.handle.value in waited
    np.testing.assert_array_equal(weight.asnumpy(), 1 - np.float32(0.5) * in_rank_order)


def test_first_momentum_update_is_exact_with_recycled_memory():
    """The first SGD-with-momentum update of a bucket creates its flat momentum. Reading an
    array's data pointer before the engine has allocated it (MXNDArrayGetData, as a removed
    view cache did) races with the allocation: the momentum then sat in recycled memory
    (NaN here, stale values in general), a rare non-finite or wrong W(1). Memory is recycled
    from NaN-filled arrays so that such a race shows as NaN; 300 fresh servers, exact (the
    race is narrow: this catches it only sometimes; the next test keeps its cause out)."""
    rng = np.random.RandomState(0)
    n = 742
    w0, g0 = rng.rand(n).astype(np.float32), rng.rand(n).astype(np.float32)
    expected = w0 - np.float32(0.5) * g0  # momentum 0.9 on a zero state: the plain SGD step
    for trial in range(300):
        junk = [mx.nd.full((n,), np.nan) for _ in range(3)]
        mx.nd.waitall()
        del junk
        s = ServerState()
        s.set_optimizer(mx.optimizer.SGD(learning_rate=0.5, momentum=0.9))
        s.command('{"op": "register", "payloads": {}, "weights": [], '
                  '"slots": {"9": [[0, 0, 300, 1.0, 1.0], [1, 300, %d, 1.0, 1.0]]}}' % n)
        weight, grad = mx.nd.array(w0), mx.nd.array(g0)
        s(9, grad, weight)
        np.testing.assert_allclose(weight.asnumpy(), expected, rtol=1e-6, err_msg="trial %d" % trial)


def test_no_code_reads_a_data_pointer_behind_the_engine():
    """MXNDArrayGetData calls NDArray::data(), which allocates a delay-allocated array on the
    calling thread while the engine thread may be allocating it too (no lock in MXNet 1.9.1's
    Chunk::CheckAndAlloc): the op's output then lands in memory the array no longer owns.
    Native code gets arrays through DLPack after wait_to_read / wait_to_write (codec._array)."""
    from pathlib import Path
    import cdsgd_mx
    root = Path(cdsgd_mx.__file__).parent
    offenders = [str(f.relative_to(root)) for f in sorted(root.rglob("*.py")) if "MXNDArrayGetData" in f.read_text()]
    assert offenders == [], offenders

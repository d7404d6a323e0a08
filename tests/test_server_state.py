"""ServerState, the servers' updater, in process: every kind of update waits for MXNet's
asynchronous merge of the workers' pushes before it returns (MXNet frees the received buffers
right after; a registration round that never read the merge crashed a server)."""
import numpy as np
import pytest

mx = pytest.importorskip("mxnet")

from cdsgd_mx import codec  # noqa: E402
from cdsgd_mx.server import ServerState  # noqa: E402


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

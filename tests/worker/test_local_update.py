"""local_update.py in process, in milliseconds: eq. 11 on a bucket set's runs, the rate it
takes, and how it follows the global optimizer."""
import mxnet as mx
import numpy as np

from cdsgd_mx.worker.local_update import LocalUpdate


class Slot:
    def __init__(self, state_id, lr_mult=1.0, wd_mult=1.0):
        self.state_id, self.lr_mult, self.wd_mult = state_id, lr_mult, wd_mult


class FakeSet:
    """Two runs over one loc_buf / grad_buf: [0, 3) and [3, 5)."""

    def __init__(self):
        self.grad = mx.nd.array([1, 2, 3, 4, 5])
        self.loc = mx.nd.array([10, 10, 10, 10, 10])
        self.slots = [Slot(7), Slot(8, lr_mult=0.0)]
        self.runs = [(7, self.grad[0:3], self.loc[0:3]), (8, self.grad[3:5], self.loc[3:5])]


def test_eq11_with_the_global_rate_rescale_and_multipliers():
    glob = mx.optimizer.create("sgd", learning_rate=0.5, rescale_grad=0.25)
    local = LocalUpdate()
    local.bind(glob)
    assert local.learning_rate == 0.5 and local.optimizer.rescale_grad == 0.25
    bset = FakeSet()
    local.set_multipliers(bset)
    local.step(bset)
    # x = W(t) - lr * rescale * g on the first run; the second is frozen (lr_mult 0)
    np.testing.assert_allclose(bset.loc.asnumpy(), [10 - 0.125, 10 - 0.25, 10 - 0.375, 10, 10])
    assert not local.stateful()


def test_a_given_rate_and_the_global_schedule_and_batch_size_are_followed():
    sched = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.2)
    glob = mx.optimizer.create("sgd", learning_rate=0.2, lr_scheduler=sched)
    local = LocalUpdate("sgd", {"learning_rate": 0.8})
    local.bind(glob)
    assert local.learning_rate == 0.8
    glob.rescale_grad = 1 / 16
    rates = []
    for updates in range(6):
        local.follow(glob, updates)
        rates.append(local.learning_rate)
    assert local.optimizer.rescale_grad == 1 / 16
    fresh = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.2)  # (a scheduler keeps state)
    np.testing.assert_allclose(rates, [0.8 * fresh(u + 1) / 0.2 for u in range(6)])
    assert rates[0] > rates[-1]  # the schedule fell, and the local rate with it


def test_a_stateful_local_optimizer_says_so_and_its_states_round_trip():
    local = LocalUpdate("sgd", {"momentum": 0.9})
    local.bind(mx.optimizer.create("sgd", learning_rate=0.1))
    bset = FakeSet()
    local.set_multipliers(bset)
    local.step(bset)
    assert local.stateful()
    blob = local.get_states()
    again = LocalUpdate("sgd", {"momentum": 0.9})
    again.bind(mx.optimizer.create("sgd", learning_rate=0.1))
    again.set_states(blob)
    np.testing.assert_array_equal(again.updater.states[7].asnumpy(), local.updater.states[7].asnumpy())
    assert LocalUpdate().get_states() is None and LocalUpdate().learning_rate is None


def test_plain_sgd_runs_natively_bit_for_bit_as_the_updater_and_the_rest_through_it():
    """The default local optimizer (SGD, no momentum, no weight decay) steps each run in one
    native pass (codec.sgd): the same bits, states and update counts as MXNet's Updater, with
    lr_mult and clipping; weight decay or momentum go through the Updater."""
    from unittest import mock
    from cdsgd_mx import codec
    rng = np.random.default_rng(4)
    n = 1003
    grad, w0 = rng.normal(0, 3, n).astype(np.float32), rng.normal(0, 1, n).astype(np.float32)
    for params, native in (({}, True), ({"clip_gradient": 0.5}, True), ({"wd": 1e-4}, False),
                           ({"momentum": 0.9}, False)):
        runs = lambda loc, g: [(3, g[0:400], loc[0:400]), (4, g[400:n], loc[400:n])]
        glob = mx.optimizer.create("sgd", learning_rate=0.1, rescale_grad=1 / 32)
        ours, theirs = LocalUpdate("sgd", params), LocalUpdate("sgd", params)
        for local in (ours, theirs):
            local.bind(glob)
            local.optimizer.lr_mult[4] = 0.5
        mine, g = mx.nd.array(w0), mx.nd.array(grad)
        with mock.patch.object(codec, "sgd", wraps=codec.sgd) as native_sgd:
            for _ in range(2):
                ours.step(type("Set", (), {"runs": runs(mine, g)}))
        assert native_sgd.called == native, params
        want = mx.nd.array(w0)
        for _ in range(2):
            for index, gr, loc in runs(want, g):
                theirs.updater(index, gr, loc)
        np.testing.assert_array_equal(mine.asnumpy().view(np.uint32), want.asnumpy().view(np.uint32))
        assert sorted(ours.updater.states) == sorted(theirs.updater.states) == [3, 4]
        assert ours.optimizer._index_update_count == theirs.optimizer._index_update_count

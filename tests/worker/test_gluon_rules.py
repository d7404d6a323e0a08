"""gluon_rules.py against a fake backend, in process and in milliseconds: what the servers are
told (and when) for late multipliers and stale gradients, and where a rule stops loudly.
tests/test_gluon_idioms.py checks the same idioms end to end against stock gluon."""
import mxnet as mx
import numpy as np
import pytest

from cdsgd_mx.worker import buckets as bucketing
from cdsgd_mx.wire import protocol
from cdsgd_mx.worker.config import ConfigError
from cdsgd_mx.worker.gluon_rules import GluonRules
from cdsgd_mx.worker.local_update import LocalUpdate

SIZES = {0: 3, 1: 5, 2: 2}


class FakeBackend:
    """Records commands; the stale count is this worker's row plus `others` (the other workers')."""

    def __init__(self, num_workers=2, others=None):
        self.num_workers, self.others, self.log = num_workers, others, []

    def command(self, msg):
        self.log.append(msg)

    def follow_rescale(self, rescale_grad):
        self.log.append({"op": "rescale", "value": rescale_grad})

    def open_tally(self, key, width):
        self.log.append({"op": "open", "key": key, "width": width})

    def tally(self, key, value):
        return value + (self.others if self.others is not None else 0)


def setup(local="sgd", local_params=None, delayed=True, **backend):
    opt = mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9, rescale_grad=0.5)
    plan = bucketing.plan(list(SIZES.items()), 1 << 20, 1, 1, protocol.Keys(1))
    bset = bucketing.BucketSet(plan, {k: (n,) for k, n in SIZES.items()},
                               {k: [mx.nd.zeros((n,))] for k, n in SIZES.items()}, delayed)
    waits = []
    upd = LocalUpdate(local, local_params)
    upd.bind(opt)
    rules = GluonRules(FakeBackend(**backend), upd, lambda keys: ",".join("p%d" % k for k in keys), delayed,
                       lambda: waits.append(len(rules.backend.log)))
    rules.bind(opt)
    rules.set_multipliers(bset, 0)
    return rules, opt, bset, waits


def test_unchanged_settings_send_nothing_but_the_rescale():
    rules, opt, bset, waits = setup()
    rules.follow([bset], 3, 3)
    assert rules.backend.log == [{"op": "rescale", "value": 0.5}] and waits == []


def test_a_late_lr_mult_is_sent_after_the_rounds_in_flight_and_reaches_the_local_runs():
    rules, opt, bset, waits = setup()
    opt.set_lr_mult({1: 0.0})
    rules.follow([bset], 4, 4)
    sent = [m for m in rules.backend.log if m["op"] == "multipliers"]
    assert len(sent) == 1 and waits == [1]  # waited (after the rescale), then sent
    mults = {i: (lr, wd) for i, lr, wd in sent[0]["slots"]}
    assert mults[[s.state_id for s in bset.slots if s.key == 1][0]] == (0.0, 1.0)
    assert sorted(lr for lr, _ in mults.values()) == [0.0, 1.0, 1.0]
    assert len(bset.runs) == 3  # the changed parameter is its own run of the local step now
    rules.follow([bset], 5, 5)
    assert len([m for m in rules.backend.log if m["op"] == "multipliers"]) == 1  # once


def test_a_changed_setting_other_than_the_rate_stops_in_one_line():
    rules, opt, bset, _ = setup()
    opt.wd = 0.01
    with pytest.raises(ConfigError, match=r"optimizer's wd changed during training \(0.0 -> 0.01\)"):
        rules.follow([bset], 2, 2)


def test_a_stateful_local_optimizer_refuses_a_late_multiplier_that_regroups_its_runs():
    rules, opt, bset, _ = setup("sgd", {"momentum": 0.9})
    rules.local.step(bset)  # its states exist now
    opt.set_lr_mult({1: 0.5})
    with pytest.raises(ConfigError, match="parameter p1: lr_mult/wd_mult changed at step 7"):
        rules.follow([bset], 7, 7)
    assert {s.key: s.lr_mult for s in bset.slots}[1] == 1.0  # put back as it was


def test_a_parameter_stale_on_every_worker_is_held_and_skipped_on_the_servers():
    rules, opt, bset, waits = setup(others=np.array([1, 0, 1], np.float32))  # by registration order
    order = list(bset.keys)
    stale = {order[1], order[2]}  # stale here; the other worker has order[2] fresh
    held = rules.held([bset], [bset], stale, 9)
    assert held == {bset: {order[1]}}
    skip = rules.backend.log[-1]
    assert skip["op"] == "skip" and skip["ids"] == [s.state_id for s in bset.slots if s.key == order[1]]
    assert waits and rules.backend.log[0] == {"op": "open", "key": protocol.STALE_KEY, "width": 3}


def test_nothing_is_held_where_another_worker_has_a_fresh_gradient():
    rules, opt, bset, waits = setup(others=np.ones(3, np.float32))
    assert rules.held([bset], [bset], set(bset.keys), 1) == {} and waits == []
    assert [m["op"] for m in rules.backend.log] == ["open"]


def test_a_held_parameter_with_a_stateful_delayed_local_optimizer_stops():
    rules, opt, bset, _ = setup("sgd", {"momentum": 0.9}, others=np.zeros(3, np.float32))
    rules.local.step(bset)
    with pytest.raises(ConfigError, match="no worker has a fresh gradient at step 4"):
        rules.held([bset], [bset], {bset.keys[0]}, 4)

"""The global optimizer travels as plain data (optimizer_spec) and comes back as pickle would
bring it; what cannot travel is refused in one line."""
import pickle

import mxnet as mx
import numpy as np
import pytest

from cdsgd_mx.wire import optimizer_spec


def same_state(a, b):
    assert type(a) is type(b)
    da, db = vars(a), vars(b)
    assert sorted(da) == sorted(db)
    for k in da:
        if k == "lr_scheduler":
            assert (da[k] is None) == (db[k] is None)
            if da[k] is not None:
                assert type(da[k]) is type(db[k]) and vars(da[k]) == vars(db[k])
        else:
            assert da[k] == db[k], k


@pytest.mark.parametrize("name,kw", [
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4, "rescale_grad": 0.5, "clip_gradient": 1.0}),
    ("nag", {"learning_rate": 0.05, "momentum": 0.8}),
    ("adam", {"learning_rate": 1e-3, "beta1": 0.8, "epsilon": 1e-7}),
    ("rmsprop", {"learning_rate": 1e-3, "gamma1": 0.95, "centered": True}),
    ("sgd", {"learning_rate": 0.1, "lr_scheduler": mx.lr_scheduler.FactorScheduler(step=10, factor=0.5)}),
    ("sgd", {"learning_rate": 0.1, "multi_precision": True, "param_idx2name": {0: "w", 1: "b"}}),
])
def test_a_round_trip_gives_what_pickle_gives(name, kw):
    opt = mx.optimizer.create(name, **kw)
    opt.set_lr_mult({"w": 2.0})
    opt.set_wd_mult({"b": 0.0})
    rebuilt = optimizer_spec.build(optimizer_spec.describe(opt))
    same_state(rebuilt, pickle.loads(pickle.dumps(opt)))
    # and it updates as the original does
    w1, w2, g = mx.nd.ones((5,)), mx.nd.ones((5,)), mx.nd.array(np.arange(5, dtype=np.float32))
    for o, w in ((opt, w1), (rebuilt, w2)):
        u = mx.optimizer.get_updater(o)
        for _ in range(3):
            u(0, g, w)
    np.testing.assert_array_equal(w1.asnumpy(), w2.asnumpy())


class Unregistered(mx.optimizer.SGD):
    pass


def test_what_cannot_travel_is_refused_naming_it():
    with pytest.raises(optimizer_spec.SpecError, match="Unregistered is not registered"):
        optimizer_spec.describe(Unregistered(learning_rate=0.1))
    opt = mx.optimizer.create("sgd", learning_rate=0.1)
    opt.extra = object()
    with pytest.raises(optimizer_spec.SpecError, match="attribute optimizer.*holds a object"):
        optimizer_spec.describe(opt)


def test_a_name_registered_by_another_module_on_the_server_is_refused():
    spec = optimizer_spec.describe(mx.optimizer.create("sgd", learning_rate=0.1))
    spec["module"] = "json"  # the workers' sgd would come from elsewhere
    with pytest.raises(optimizer_spec.SpecError, match="'sgd' is mxnet.optimizer.optimizer.SGD on this server, "
                                                       "json.SGD on the workers"):
        optimizer_spec.build(spec)

"""cdsgd_mx.Trainer in one process (kvstore='local'/None) and its argument checks."""
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cdsgd_mx.experiments.simulation import simulate  # noqa: E402
from workers.engine_worker import SHAPES, grad_fn, init_value  # noqa: E402

import cdsgd_mx  # noqa: E402
from cdsgd_mx.worker.kvstore import ConfigError  # noqa: E402
from cdsgd_mx.bench import mark_fresh  # noqa: E402


def make_params(dtype="float32", stype="default"):
    params = gluon.ParameterDict()
    plist = [params.get("p%d" % i, shape=s, dtype=dtype, stype=stype,
                        init=mx.init.Constant(init_value(i, s).tolist())) for i, s in enumerate(SHAPES)]
    params.initialize(ctx=mx.cpu())
    return params, plist


@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
@pytest.mark.parametrize("kvstore", ["local", None])
def test_single_process_matches_simulation(alg, kvstore):
    params, plist = make_params()
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.25, "momentum": 0.5}, kvstore=kvstore,
                          algorithm=alg, k=3, warmup_steps=2, threshold=0.5,
                          local_optimizer_params={"learning_rate": 0.5})
    for t in range(9):
        for i, p in enumerate(plist):
            p.grad()[:] = grad_fn(p.data().asnumpy(), 0, t, i)
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(4)
    tr.wait_all()
    xs, W = simulate(alg, 1, 9, 2, 3, 0.5, [init_value(i, s) for i, s in enumerate(SHAPES)], grad_fn,
                     0.25, 0.5, 0.5, 4)
    for i, p in enumerate(plist):
        np.testing.assert_allclose(p.data().asnumpy(), xs[0][i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(tr.kvstore.global_weights(i).asnumpy(), W[i], rtol=1e-5, atol=1e-5)


def test_lenet_like_training_reduces_loss_with_cdsgd():
    rng = np.random.RandomState(0)
    X = rng.randn(256, 20).astype(np.float32)
    Y = (X[:, :5].sum(axis=1) > 0).astype(np.float32)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(32, activation="relu"), gluon.nn.Dense(2))
    net.initialize(mx.init.Xavier())
    tr = cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                          kvstore="local", algorithm="cdsgd", k=4, warmup_steps=5, threshold=0.5)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    for epoch in range(15):
        total = 0.0
        for b in range(0, 256, 32):
            x, y = mx.nd.array(X[b:b + 32]), mx.nd.array(Y[b:b + 32])
            with mx.autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            tr.step(32)
            total += loss.mean().asscalar()
        losses.append(total / 8)
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("clip", [None, 0.05])
def test_a_clip_on_the_local_step_bounds_each_value_of_it(clip):
    """local_optimizer_params={'clip_gradient': c} (train.py's local_clip): x(t+1) = W(t) -
    lr_loc * clip(g(t) / batch, -c, c)."""
    params, plist = make_params()
    local = {"learning_rate": 0.8} if clip is None else {"learning_rate": 0.8, "clip_gradient": clip}
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.2}, kvstore="local", algorithm="odsgd",
                          warmup_steps=0, local_optimizer_params=local)
    w0 = [p.data().asnumpy() for p in plist]
    grads = [np.linspace(-1, 1, p.data().size, dtype=np.float32).reshape(p.shape) for p in plist]
    for p, g in zip(plist, grads):
        p.grad()[:] = g
    mark_fresh(tr)
    tr.step(4)
    tr.wait_all()
    for p, w, g in zip(plist, w0, grads):
        step = g / np.float32(4) if clip is None else np.clip(g / np.float32(4), -clip, clip)
        np.testing.assert_allclose(p.data().asnumpy(), w - np.float32(0.8) * step, rtol=0, atol=1e-6)
    assert np.abs(grads[0] / 4).max() > 0.2  # the clip bit on these values


def test_learning_rates_schedule_together():
    params, plist = make_params()
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.2}, kvstore="local", algorithm="odsgd",
                          warmup_steps=0, local_optimizer_params={"learning_rate": 0.8})
    for i, p in enumerate(plist):
        p.grad()[:] = 0
    mark_fresh(tr)  # the gradients were written by hand
    tr.step(1)
    tr.set_learning_rate(0.1)
    assert tr.learning_rate == pytest.approx(0.1)
    assert tr.local_learning_rate == pytest.approx(0.4)  # same factor
    tr.set_learning_rate(0.05, local_lr=0.3)
    assert tr.local_learning_rate == pytest.approx(0.3)
    assert tr.kvstore.backend.server.optimizer.learning_rate == pytest.approx(0.05)


@pytest.mark.parametrize("kwargs,message", [
    ({"algorithm": "adam"}, "algorithm must be one of ssgd, bitsgd, odsgd, cdsgd, got 'adam'"),
    ({"k": 0}, "k must be an integer >= 1, got 0"),
    ({"k": 2.5}, "k must be an integer >= 1, got 2.5"),
    ({"threshold": 0}, "threshold must be a finite number > 0 (as float32), got 0"),
    ({"threshold": -0.5}, "threshold must be a finite number > 0 (as float32), got -0.5"),
    ({"threshold": float("nan")}, "threshold must be a finite number > 0 (as float32), got nan"),
    ({"threshold": 1e39}, "threshold must be a finite number > 0 (as float32), got 1e+39"),
    ({"warmup_steps": -1}, "warmup_steps must be an integer >= 0, got -1"),
    ({"kvstore": "dist_async"}, "kvstore must be one of dist, dist_sync, dist_sync_device, dist_device_sync, local, None or an existing mx.kv.create('dist') store of one of those types, got 'dist_async'"),
    ({"kvstore": "nccl"}, "kvstore must be one of dist, dist_sync, dist_sync_device, dist_device_sync, local, None or an existing mx.kv.create('dist') store of one of those types, got 'nccl'"),
    ({"kvstore": "LOCALSTORE"}, "kvstore must be one of dist, dist_sync, dist_sync_device, dist_device_sync, local, None or an existing mx.kv.create('dist') store of one of those types, got a KVStore store of type 'local'"),
    ({"compression_params": {"type": "2bit"}}, "compression_params: use algorithm="),
    ({"update_on_kvstore": False}, "the workers cannot update (update_on_kvstore=False, allreduce_grads()/update()) "
                                   "with algorithm='cdsgd': its local update of step t runs before"),
    ({"update_on_kvstore": False, "algorithm": "odsgd"}, "the workers cannot update (update_on_kvstore=False, "
                                                         "allreduce_grads()/update()) with algorithm='odsgd'"),
])
def test_bad_arguments_give_one_clear_error(kwargs, message):
    params, _ = make_params()
    args = dict(kvstore="local")
    args.update(kwargs)
    if args["kvstore"] == "LOCALSTORE":  # an existing store that is not dist_sync
        args["kvstore"] = mx.kv.create("local")
    with pytest.raises(ConfigError) as err:
        cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, **args)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_float16_parameters_are_refused():
    params, _ = make_params(dtype="float16")
    with pytest.raises(ConfigError, match="dtype must be float32, got float16"):
        cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local")


def test_row_sparse_parameters_are_refused():
    params = gluon.ParameterDict()
    params.get("emb", shape=(10, 4), stype="row_sparse", grad_stype="row_sparse")
    params.initialize()
    with pytest.raises(ConfigError, match="row_sparse parameters and gradients are not supported"):
        cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local")


def test_non_finite_gradient_stops_with_the_parameter_and_step():
    params, plist = make_params()
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local", algorithm="bitsgd",
                          warmup_steps=0)
    for p in plist:
        p.grad()[:] = 0.1
    plist[2].grad()[:] = np.nan
    with pytest.raises(FloatingPointError, match="non-finite gradient in parameter p2 at step 0"):
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(1)


def test_a_non_finite_gradient_is_named_by_its_own_parameter_in_a_gluon_net():
    """gluon's Trainer orders a ParameterDict by name (dense0_bias before dense0_weight), not as
    collect_params lists it: the message must name the parameter whose gradient is non-finite."""
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    tr = cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="local", algorithm="bitsgd",
                          warmup_steps=0)
    net.bias.grad()[:] = 0.1
    net.weight.grad()[:] = 0.1
    net.weight.grad()[1, 2] = np.inf
    with pytest.raises(FloatingPointError, match=r"non-finite gradient in parameter %s at step 0 \(1 values\)"
                       % net.weight.name):
        mark_fresh(tr)
        tr.step(1)


@pytest.mark.parametrize("alg", ["bitsgd", "cdsgd"])
def test_non_finite_skip_in_one_process_leaves_weights_and_schedule_alone(alg):
    params, plist = make_params()
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local", algorithm=alg,
                          warmup_steps=1, k=2, nonfinite="skip")
    for p in plist:
        p.grad()[:] = 0.1
    mark_fresh(tr)  # the gradients were written by hand
    tr.step(1)
    tr.wait_all()
    before = [p.data().asnumpy().copy() for p in plist]
    plist[2].grad()[:] = np.nan
    mark_fresh(tr)  # the gradients were written by hand
    tr.step(1)
    tr.wait_all()
    for p, b in zip(plist, before):
        np.testing.assert_array_equal(p.data().asnumpy(), b)
    assert tr.kvstore.skipped_steps == [1]
    assert sorted(tr.kvstore.bytes_by_step) == [0]
    for p in plist:
        p.grad()[:] = 1.0  # above the threshold: the compressed step moves the weights
    mark_fresh(tr)  # the gradients were written by hand
    tr.step(1)
    tr.wait_all()
    assert sorted(tr.kvstore.bytes_by_step) == [0, 1]  # the schedule's step 1 is the third call
    assert all(np.all(np.isfinite(p.data().asnumpy())) for p in plist)
    assert not np.array_equal(plist[0].data().asnumpy(), before[0])


@pytest.mark.parametrize("opt_params,local_params,message", [
    ({"learning_rate": float("nan")}, None, "optimizer_params['learning_rate'] must be a finite number >= 0, got nan"),
    ({"learning_rate": -0.1}, None, "optimizer_params['learning_rate'] must be a finite number >= 0, got -0.1"),
    ({"learning_rate": 0.1}, {"learning_rate": float("inf")}, "local_optimizer_params['learning_rate'] must be a finite"),
])
def test_bad_learning_rates_are_refused_when_the_trainer_is_built(opt_params, local_params, message):
    params, _ = make_params()
    with pytest.raises(ConfigError) as err:
        cdsgd_mx.Trainer(params, "sgd", opt_params, kvstore="local", local_optimizer_params=local_params)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_optimizer_object_with_a_nan_rate_and_set_learning_rate_are_checked():
    params, _ = make_params()
    with pytest.raises(ConfigError, match="the optimizer's learning_rate must be a finite number >= 0, got nan"):
        cdsgd_mx.Trainer(params, mx.optimizer.SGD(learning_rate=float("nan")), kvstore="local")
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local")
    with pytest.raises(ConfigError, match="local_lr must be a finite number >= 0, got nan"):
        tr.set_learning_rate(0.2, local_lr=float("nan"))
    assert tr.learning_rate == 0.1  # nothing changed


@pytest.mark.parametrize("bound", ["0", "-5", "lots"])
def test_a_bad_bigarray_bound_is_refused(monkeypatch, bound):
    monkeypatch.setenv("MXNET_KVSTORE_BIGARRAY_BOUND", bound)
    params, _ = make_params()
    with pytest.raises(ConfigError, match="MXNET_KVSTORE_BIGARRAY_BOUND must be an integer > 0 .elements., got '%s'" % bound):
        cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local")


def test_the_local_step_benchmark_times_the_same_update_with_and_without_the_clip(capsys):
    """python -m cdsgd_mx.bench.local_step: one line per size, both times and their ratio; the
    clipped call is the update the clip test above checks (sgd_update with clip_gradient)."""
    from cdsgd_mx.bench import local_step
    local_step.main(["--sizes", "200000,300000", "--repeats", "3"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert [l.split(" values")[0] for l in lines] == ["200000", "300000"]
    for line in lines:
        a, b, ratio = (float(x) for x in
                       __import__("re").match(r".*local step ([\d.]+) ms, with clip_gradient=0.1 ([\d.]+) ms: ([\d.]+)x$",
                                              line).groups())
        assert a > 0 and b > 0 and abs(ratio - b / a) < 0.02 + 0.02 * ratio  # (times printed to 1 us)

"""Workers with several devices (issue 12): every parameter on cpu(0) and cpu(1), each device
with its own gradient (another share of the batch). A worker pushes the sum of its devices'
gradients, once per bucket (as MXNet's kvstore reduces locally: a sum, with gluon's
rescale_grad = 1 / the worker's whole batch), and every device holds the same weights after
every step."""
import json
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cdsgd_mx.experiments.simulation import simulate  # noqa: E402
from test_engine import CFG, K, STEPS, T, WARMUP, finish, start  # noqa: E402
from workers.engine_worker import SHAPES, device_grad, init_value, summed_grad  # noqa: E402

import cdsgd_mx  # noqa: E402
from cdsgd_mx.bench import mark_fresh  # noqa: E402

DEVICES = [mx.cpu(0), mx.cpu(1)]
ALGORITHMS = ["ssgd", "bitsgd", "odsgd", "cdsgd"]
MIXED = [2, 1]  # devices of rank 0 and rank 1
INIT = [init_value(i, s) for i, s in enumerate(SHAPES)]


def sim(alg, workers, grad=summed_grad(len(DEVICES))):
    return simulate(alg, workers, STEPS, WARMUP, K, T, INIT, grad, CFG["lr"], CFG["momentum"], CFG["local_lr"],
                    CFG["batch"])


def test_the_simulation_tells_a_sum_from_a_mean_and_a_dropped_device():
    """What the tests below compare with would catch a worker that averages its devices'
    gradients or drops one of them."""
    for alg in ALGORITHMS:
        _, W = sim(alg, 2)
        for wrong in (summed_grad(1), lambda *a: summed_grad(2)(*a) / np.float32(2)):
            _, W_wrong = sim(alg, 2, wrong)
            assert not np.allclose(W[0], W_wrong[0], atol=1e-3), alg


# ---- real processes: 2 workers with 2 devices each, 1 server ---------------------------------
@pytest.fixture(scope="module")
def two_device_jobs(tmp_path_factory):
    """One job per algorithm, one of stock gluon.Trainer on dist_sync with the same contexts
    (update_on_kvstore=False: the workers update, as issue 7 compares) and one whose workers
    have different numbers of devices, side by side."""
    tmp = tmp_path_factory.mktemp("multidev")
    args = ["--steps", str(STEPS), "--warmup", str(WARMUP), "--k", str(K), "--threshold", str(T)]
    two = ["--config", json.dumps(dict(CFG, devices=len(DEVICES)))]
    jobs = {alg: start(tmp / alg, 2, 1, "--algorithm", alg, *args, *two) for alg in ALGORITHMS}
    jobs["stock"] = start(tmp / "stock", 2, 1, "--mode", "stock_local", *args, *two, stock_server=True)
    jobs["mixed"] = start(tmp / "mixed", 2, 1, "--algorithm", "cdsgd", *args,
                          "--config", json.dumps(dict(CFG, devices=MIXED)))
    try:
        return {name: finish(job) for name, job in jobs.items()}
    finally:
        for proc, *_ in jobs.values():
            if proc.poll() is None:  # a job failed: the others' launchers stop their nodes
                proc.terminate()
                proc.wait()


def assert_devices_agree(run):
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(run[r]["x%d_dev1" % i], run[r]["x%d" % i],
                                          err_msg="device 1 of rank %d, param %d" % (r, i))


@pytest.mark.slow
def test_ssgd_with_two_devices_equals_stock_gluon(two_device_jobs):
    ours, stock = two_device_jobs["ssgd"], two_device_jobs["stock"]
    assert_devices_agree(stock)
    assert_devices_agree(ours)
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(ours[r]["w%d" % i], stock[r]["w%d" % i], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(ours[r]["x%d" % i], stock[r]["x%d" % i], rtol=1e-6, atol=1e-6)
            assert not np.allclose(stock[r]["w%d" % i], INIT[i])  # it trained


@pytest.mark.slow
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_two_devices_match_the_simulation_of_summed_gradients(two_device_jobs, alg):
    got = two_device_jobs[alg]
    assert_devices_agree(got)
    xs, W = sim(alg, 2)
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got[r]["w%d" % i], W[i], rtol=1e-5, atol=1e-5,
                                       err_msg="global W, param %d, rank %d" % (i, r))
            np.testing.assert_allclose(got[r]["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5,
                                       err_msg="forward weights x, param %d, rank %d" % (i, r))


@pytest.mark.slow
def test_workers_with_different_numbers_of_devices_train_together(two_device_jobs):
    """The start-up check does not compare device counts (stock MXNet does not): rank 0 with
    two devices and rank 1 with one push one summed gradient each."""
    got = two_device_jobs["mixed"]
    xs, W = sim("cdsgd", 2, lambda x, r, t, i: summed_grad(MIXED[r])(x, r, t, i))
    np.testing.assert_array_equal(got[0]["x0_dev1"], got[0]["x0"])
    assert "x0_dev1" not in got[1]
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got[r]["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[r]["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)


# ---- one process (kvstore='local') --------------------------------------------------------
def two_device_trainer(alg, **kw):
    params = gluon.ParameterDict()
    plist = [params.get("p%d" % i, shape=s, init=mx.init.Constant(INIT[i].tolist())) for i, s in enumerate(SHAPES)]
    params.initialize(ctx=DEVICES)
    args = dict(kvstore="local", algorithm=alg, k=K, warmup_steps=WARMUP, threshold=T,
                local_optimizer_params={"learning_rate": CFG["local_lr"]})
    args.update(kw)
    return plist, cdsgd_mx.Trainer(params, "sgd", {"learning_rate": CFG["lr"], "momentum": CFG["momentum"]}, **args)


def train(plist, tr, steps):
    """Each device's gradient from its own weights, as engine_worker gives them."""
    for t in steps:
        for i, p in enumerate(plist):
            for d, ctx in enumerate(DEVICES):
                p.grad(ctx)[:] = device_grad(p.data(ctx).asnumpy(), 0, t, i, d)
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(CFG["batch"])
    tr.wait_all()


def device_weights(plist):
    return [[p.data(ctx).asnumpy() for ctx in DEVICES] for p in plist]


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_one_process_with_two_devices_matches_the_simulation(alg):
    plist, tr = two_device_trainer(alg)
    train(plist, tr, range(STEPS))
    xs, W = sim(alg, 1)
    for i, on_devices in enumerate(device_weights(plist)):
        for x in on_devices:
            np.testing.assert_allclose(x, xs[0][i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(tr.kvstore.global_weights(i).asnumpy(), W[i], rtol=1e-5, atol=1e-5)


def test_backward_on_two_devices_equals_stock_gluon():
    """A real forward/backward on each device's half of the batch (the first device's
    gradients bound to the buckets, the other's added in): ssgd equals gluon.Trainer with the
    same contexts (kvstore='local', update_on_kvstore=False), and the devices agree; so does
    the plugin under gluon's own Trainer (one pushpull per parameter with its device lists)."""
    rng = np.random.RandomState(3)
    X, Y = rng.randn(64, 10).astype(np.float32), rng.randint(0, 3, 64).astype(np.float32)

    def run(make_trainer):
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(3))
        net.initialize(ctx=DEVICES)
        net(mx.nd.array(X[:2], ctx=DEVICES[0]))  # shapes known: fixed weights below
        params = net.collect_params()
        for j, p in enumerate(params.values()):
            p.set_data(mx.nd.array(np.random.RandomState(j).uniform(-0.5, 0.5, p.shape)))
        trainer = make_trainer(params)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        for b in range(0, 64, 16):
            xs = gluon.utils.split_and_load(X[b:b + 16], DEVICES)
            ys = gluon.utils.split_and_load(Y[b:b + 16], DEVICES)
            with autograd.record():
                losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
            autograd.backward(losses)
            trainer.step(16)
        mx.nd.waitall()
        return [[p.data(ctx).asnumpy() for ctx in DEVICES] for p in params.values()]

    opt = {"learning_rate": 0.2, "momentum": 0.9}
    ours = run(lambda params: cdsgd_mx.Trainer(params, "sgd", opt, kvstore="local", algorithm="ssgd",
                                               warmup_steps=0))
    plugin = run(lambda params: gluon.Trainer(params, "sgd", opt, kvstore=cdsgd_mx.CDSGD(algorithm="ssgd",
                                                                                        kvstore="local")))
    stock = run(lambda params: gluon.Trainer(params, "sgd", opt, kvstore="local", update_on_kvstore=False))
    for j, theirs in enumerate(stock):
        for mine in (ours[j], plugin[j]):  # the drop-in, and the plugin under gluon's own Trainer
            np.testing.assert_array_equal(mine[1], mine[0])
            np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-5, atol=1e-6, err_msg="parameter %d" % j)
        assert not np.allclose(theirs[0], np.random.RandomState(j).uniform(-0.5, 0.5, theirs[0].shape))


def test_checkpoint_round_trip_with_two_devices(tmp_path):
    """Saved after 3 steps of cdsgd (x differs from W), loaded into a fresh trainer whose
    second device holds other weights: every device gets x back, and the next steps equal
    those of the run that went on."""
    path = str(tmp_path / "two.states")
    plist, tr = two_device_trainer("cdsgd", warmup_steps=1, k=2)
    train(plist, tr, range(3))
    tr.save_states(path)
    saved = device_weights(plist)
    train(plist, tr, range(3, 6))
    want, want_W = device_weights(plist), [tr.kvstore.global_weights(i).asnumpy() for i in range(len(plist))]

    plist2, tr2 = two_device_trainer("cdsgd", warmup_steps=1, k=2)
    for p in plist2:
        p.data(DEVICES[1])[:] = 7.0
    tr2.load_states(path)
    mx.nd.waitall()
    for i, on_devices in enumerate(device_weights(plist2)):
        for d, x in enumerate(on_devices):
            np.testing.assert_array_equal(x, saved[i][0], err_msg="param %d, device %d after load" % (i, d))
    train(plist2, tr2, range(3, 6))
    for i, on_devices in enumerate(device_weights(plist2)):
        for d, x in enumerate(on_devices):
            np.testing.assert_array_equal(x, want[i][d], err_msg="param %d, device %d" % (i, d))
        np.testing.assert_array_equal(tr2.kvstore.global_weights(i).asnumpy(), want_W[i])


def test_a_non_finite_gradient_on_another_device_is_caught():
    """The check reads the worker's summed gradient: a NaN on the second device only stops the
    step before anything is pushed, naming the parameter."""
    plist, tr = two_device_trainer("bitsgd", warmup_steps=0)
    for p in plist:
        for ctx in DEVICES:
            p.grad(ctx)[:] = 0.1
    plist[2].grad(DEVICES[1])[:] = np.nan
    with pytest.raises(FloatingPointError, match="non-finite gradient in parameter p2 at step 0"):
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(1)


def test_the_second_devices_gradients_go_through_a_buffer_made_once():
    """gather copies another context's gradient into a staging buffer made at the first step
    and reused (no allocation per parameter and step), then adds it: the stage holds that
    device's last gradient, and the training still equals the simulation."""
    plist, tr = two_device_trainer("cdsgd")
    train(plist, tr, range(2))
    bset = tr.kvstore.bucket_sets[0]
    first = {key: id(v) for key, v in bset._staging(0).items()}
    handles = {key: v.handle.value for key, v in bset._staging(0).items()}
    train(plist, tr, range(2, STEPS))
    assert {key: id(v) for key, v in bset._stages[0].items()} == first and list(bset._stages) == [0]
    assert {key: v.handle.value for key, v in bset._stages[0].items()} == handles
    for i, p in enumerate(plist):
        np.testing.assert_array_equal(bset._stages[0][i].asnumpy(), p.grad(DEVICES[1]).asnumpy())
    xs, W = sim("cdsgd", 1)
    for i, p in enumerate(plist):
        np.testing.assert_allclose(p.data(DEVICES[1]).asnumpy(), xs[0][i], rtol=1e-5, atol=1e-5)

"""What gluon scripts do mid-training, through cdsgd_mx.Trainer and through stock gluon.Trainer
(workers update: kvstore=None), on the same parameters, gradients and steps (issue 26).

Gradients come from a real backward (so gluon's stale-gradient bookkeeping is what a script
sees): loss = sum_i <p_i, c_i(t)> + 0.5 * a_i * |p_i|^2, a gradient that depends on the
weights in use."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import cdsgd_mx

SHAPES = [(6, 4), (4,), (9,), (3,)]
OPT = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}


def make_params():
    params = gluon.ParameterDict()
    plist = [params.get("p%d" % i, shape=s, init=mx.init.Constant(
        np.random.RandomState(i).uniform(-1, 1, s).astype(np.float32).tolist())) for i, s in enumerate(SHAPES)]
    params.initialize(ctx=mx.cpu())
    return params, plist


def backward(plist, t, used=None):
    """One backward through the parameters in `used` (all by default): the others' gradients
    are left stale, as a branch not taken at this step leaves them."""
    used = range(len(plist)) if used is None else used
    with autograd.record():
        loss = 0
        for i in used:
            c = mx.nd.array(np.random.RandomState(100 * t + i).normal(0, 1, SHAPES[i]).astype(np.float32))
            w = plist[i].data()
            loss = loss + (w * c).sum() + 0.5 * (0.3 + 0.1 * i) * (w * w).sum()
    loss.backward()


def stock_trainer(params):
    return gluon.Trainer(params, "sgd", dict(OPT), kvstore=None)


def our_trainer(params, alg="ssgd", **kw):
    kw.setdefault("warmup_steps", 0)
    return cdsgd_mx.Trainer(params, "sgd", dict(OPT), kvstore="local", algorithm=alg, **kw)


def weights(plist):
    return [p.data().asnumpy().copy() for p in plist]


def run(make_trainer, steps, before_step=lambda t, plist: None):
    params, plist = make_params()
    tr = make_trainer(params)
    history = []
    for t in range(steps):
        before_step(t, plist)
        backward(plist, t)
        tr.step(2)
        history.append(weights(plist))
    return history


def late_multipliers(t, plist):
    """Freeze p0 at step 3 and unfreeze it at step 6; raise p2's wd_mult at step 4."""
    if t == 3:
        plist[0].lr_mult = 0.0
    if t == 4:
        plist[2].wd_mult = 30.0
    if t == 6:
        plist[0].lr_mult = 1.0


def test_late_lr_mult_and_wd_mult_match_stock_gluon():
    ours = run(our_trainer, 9, late_multipliers)
    stock = run(stock_trainer, 9, late_multipliers)
    for t in range(9):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(ours[t][i], stock[t][i], rtol=1e-6, atol=1e-7, err_msg="step %d p%d" % (t, i))
    plain = run(stock_trainer, 9)
    assert not np.allclose(plain[-1][0], stock[-1][0], atol=1e-4)  # the changes changed the result
    assert not np.allclose(plain[-1][2], stock[-1][2], atol=1e-4)


@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_freezing_mid_training_freezes_from_the_next_step(alg):
    """Without momentum: once lr_mult is 0 neither the servers' W nor the weights trained with
    move (a delayed algorithm's x(t+1) = W(t) with no local step); lr_mult back to 1 trains again."""
    params, plist = make_params()
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local", algorithm=alg,
                          warmup_steps=1, k=2, threshold=0.05)
    seen = []
    for t in range(10):
        plist[1].lr_mult = 0.0 if 4 <= t < 8 else 1.0
        backward(plist, t)
        tr.step(1)
        tr.wait_all()
        seen.append((plist[1].data().asnumpy().copy(), tr.kvstore.global_weights(1).asnumpy()))
    frozen_x, frozen_w = seen[4]
    for t in range(5, 8):
        np.testing.assert_array_equal(seen[t][1], frozen_w)  # W: no update at steps 4..7
        np.testing.assert_array_equal(seen[t][0], frozen_x)
    assert not np.allclose(seen[9][1], frozen_w)  # unfrozen at step 8: trains again
    assert not np.allclose(seen[3][1], seen[2][1])  # and trained before


def test_a_late_change_a_stateful_local_optimizer_cannot_follow_stops_naming_the_parameter():
    params, plist = make_params()
    tr = our_trainer(params, "cdsgd", k=2, local_optimizer_params={"momentum": 0.9})
    for t in range(3):
        backward(plist, t)
        tr.step(1)
    plist[2].lr_mult = 0.5
    backward(plist, 3)
    with pytest.raises(cdsgd_mx.worker.kvstore.ConfigError, match=r"^parameter p2: lr_mult/wd_mult changed at step 3, but "
                                                           r"the local optimizer 'sgd' keeps state"):
        tr.step(1)


def test_a_stale_gradient_raises_before_anything_is_pushed():
    """ignore_stale_grad=False (gluon's default): a parameter backward did not reach since the
    last step raises gluon's UserWarning, and the step changes nothing (it used to raise after
    the servers had applied the old gradient again, and only for a parameter never reached)."""
    params, plist = make_params()
    tr = our_trainer(params, "cdsgd", k=2)
    for t in range(2):
        backward(plist, t)
        tr.step(1)
    tr.wait_all()
    before = (weights(plist), [tr.kvstore.global_weights(i).asnumpy() for i in range(len(plist))])
    backward(plist, 2, used=[0, 1, 3])  # p2's branch not taken
    with pytest.raises(UserWarning, match=r"Parameter `p2` on context cpu\(0\) has not been updated by backward"):
        tr.step(1)
    tr.wait_all()
    after = (weights(plist), [tr.kvstore.global_weights(i).asnumpy() for i in range(len(plist))])
    for a, b in zip(before[0] + before[1], after[0] + after[1]):
        np.testing.assert_array_equal(a, b)
    sparams, splist = make_params()  # stock gluon raises the same way
    stock = stock_trainer(sparams)
    backward(splist, 0)
    stock.step(1)
    backward(splist, 1, used=[0, 1, 3])
    with pytest.raises(UserWarning, match=r"Parameter `p2` on context cpu\(0\) has not been updated by backward"):
        stock.step(1)


def test_allreduce_grads_without_update_on_kvstore_false_says_what_to_pass():
    """Not a circle (gluon's own assertion said to set update_on_kvstore=False, which we then
    refused): one line naming update_on_kvstore=False and the algorithms that take it."""
    params, plist = make_params()
    tr = our_trainer(params)
    backward(plist, 0)
    for call in (tr.allreduce_grads, lambda: tr.update(1)):
        with pytest.raises(cdsgd_mx.worker.kvstore.ConfigError) as e:
            call()
        assert str(e.value).startswith("allreduce_grads() then update() needs update_on_kvstore=False (the workers "
                                       "update; algorithm 'ssgd' or 'bitsgd')")
        assert "\n" not in str(e.value)


def test_clip_gradient_matches_stock_gluon():
    """The alternative the refusal names: MXNet's clip_gradient, run on the servers, gives
    stock gluon's weights (the sum of one worker's gradient, rescaled, clipped per value)."""
    opt = dict(OPT, clip_gradient=0.3)
    ours = run(lambda p: cdsgd_mx.Trainer(p, "sgd", dict(opt), kvstore="local", algorithm="ssgd", warmup_steps=0), 6)
    stock = run(lambda p: gluon.Trainer(p, "sgd", dict(opt), kvstore=None), 6)
    plain = run(stock_trainer, 6)
    for i in range(len(SHAPES)):
        np.testing.assert_allclose(ours[-1][i], stock[-1][i], rtol=1e-6, atol=1e-7)
    assert not np.allclose(plain[-1][0], stock[-1][0], atol=1e-4)  # clipping changed something


@pytest.mark.parametrize("alg", ["ssgd", "cdsgd"])
def test_multipliers_hold_after_load_states(tmp_path, alg):
    """kvstore='local' once lost them after load_states: gluon set param_dict (by parameter
    index) on the server's own optimizer, which looks multipliers up by state id."""
    def trainer(params):
        return cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local", algorithm=alg,
                                warmup_steps=1, k=2)
    params, plist = make_params()
    plist[1].lr_mult = 0.0
    tr = trainer(params)
    for t in range(3):
        backward(plist, t)
        tr.step(1)
    tr.save_states(str(tmp_path / "c.states"))
    frozen = plist[1].data().asnumpy().copy()
    params, plist = make_params()
    plist[1].lr_mult = 0.0
    tr = trainer(params)
    tr.load_states(str(tmp_path / "c.states"))
    for t in range(3, 6):
        backward(plist, t)
        tr.step(1)
    tr.wait_all()
    np.testing.assert_array_equal(plist[1].data().asnumpy(), frozen)
    np.testing.assert_array_equal(tr.kvstore.global_weights(1).asnumpy(), frozen)
    assert not np.allclose(plist[0].data().asnumpy(), make_params()[1][0].data().asnumpy())


def test_ignore_stale_grad_skips_a_branch_not_taken_as_stock_gluon_does():
    """A branch (p2) used only on even steps, step(bs, ignore_stale_grad=True): p2 gets no
    update on odd steps (no momentum, no weight decay), the others train; the weights equal
    stock gluon's at every step (they once differed by up to 14x)."""
    def steps(make_trainer):
        params, plist = make_params()
        tr = make_trainer(params)
        history = []
        for t in range(8):
            backward(plist, t, used=[0, 1, 2, 3] if t % 2 == 0 else [0, 1, 3])
            tr.step(2, ignore_stale_grad=True)
            history.append(weights(plist))
        return history
    ours, stock = steps(our_trainer), steps(stock_trainer)
    for t in range(8):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(ours[t][i], stock[t][i], rtol=1e-6, atol=1e-7, err_msg="step %d p%d" % (t, i))
    np.testing.assert_array_equal(stock[3][2], stock[2][2])  # an odd step: p2 did not move, momentum or not
    assert not np.array_equal(stock[4][2], stock[3][2])


def test_a_skip_a_stateful_local_optimizer_cannot_follow_stops_naming_the_parameter():
    params, plist = make_params()
    tr = our_trainer(params, "cdsgd", k=2, local_optimizer_params={"momentum": 0.9})
    for t in range(3):
        backward(plist, t)
        tr.step(1, ignore_stale_grad=True)
    backward(plist, 3, used=[0, 1, 3])
    with pytest.raises(cdsgd_mx.worker.kvstore.ConfigError, match=r"^parameter p2: no worker has a fresh gradient at step 3 "
                                                           r"\(ignore_stale_grad=True\), and the local optimizer 'sgd'"):
        tr.step(1, ignore_stale_grad=True)


def clipped_run(make_trainer, steps=6, max_norm=1.0):
    """allreduce_grads(); clip_global_norm(the summed gradients); update(): gluon-nlp's way."""
    params, plist = make_params()
    tr = make_trainer(params)
    history = []
    for t in range(steps):
        backward(plist, t)
        tr.allreduce_grads()
        gluon.utils.clip_global_norm([p.grad() for p in plist], max_norm)
        tr.update(2)
        history.append(weights(plist))
    return history


def test_allreduce_clip_update_matches_stock_gluon():
    ours = clipped_run(lambda p: our_trainer(p, "ssgd", update_on_kvstore=False))
    stock = clipped_run(lambda p: gluon.Trainer(p, "sgd", dict(OPT), kvstore="local", update_on_kvstore=False))
    for t in range(6):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(ours[t][i], stock[t][i], rtol=1e-6, atol=1e-7, err_msg="step %d p%d" % (t, i))
    unclipped = run(stock_trainer, 6)
    assert not np.allclose(unclipped[-1][0], stock[-1][0], atol=1e-4)  # the clip changed something


def test_bitsgd_with_workers_updating_equals_bitsgd_on_the_servers_without_clipping():
    """update_on_kvstore=False with BIT-SGD: the servers hand back the decoded sum of the codes
    and the workers' SGD applies it: without clipping, the same weights as BIT-SGD's servers."""
    def workers_update(params):
        return our_trainer(params, "bitsgd", threshold=0.3, update_on_kvstore=False)
    ours = run(workers_update, 6)
    servers = run(lambda p: our_trainer(p, "bitsgd", threshold=0.3), 6)
    for i in range(len(SHAPES)):
        np.testing.assert_allclose(ours[-1][i], servers[-1][i], rtol=1e-6, atol=1e-6)
    fp32 = run(lambda p: our_trainer(p, "ssgd"), 6)
    assert not np.allclose(fp32[-1][0], servers[-1][0], atol=1e-4)  # 2-bit codes, not fp32


def test_workers_updating_refuse_checkpoints_in_one_line(tmp_path):
    params, plist = make_params()
    tr = our_trainer(params, "ssgd", update_on_kvstore=False)
    backward(plist, 0)
    tr.step(1)
    with pytest.raises(cdsgd_mx.worker.kvstore.ConfigError, match=r"^save_states/load_states with update_on_kvstore=False"):
        tr.save_states(str(tmp_path / "c.states"))
    assert not list(tmp_path.iterdir())


def test_setting_the_optimizers_other_settings_mid_training_stops_in_one_line():
    """trainer.optimizer.wd = 0 after training started would never reach the servers: stop,
    naming the setting (the learning rate goes through set_learning_rate and works)."""
    params, plist = make_params()
    tr = our_trainer(params, "cdsgd", k=2)
    backward(plist, 0)
    tr.step(1)
    tr.set_learning_rate(0.05)  # this one follows
    backward(plist, 1)
    tr.step(1)
    tr.optimizer.wd = 0.0
    backward(plist, 2)
    with pytest.raises(cdsgd_mx.worker.kvstore.ConfigError, match=r"^the optimizer's wd changed during training "
                                                           r"\(0\.01 -> 0\.0\): the servers' optimizer is set"):
        tr.step(1)


def test_amp_loss_scaling_is_refused_in_one_line():
    """amp.init_trainer, run in a fresh process (amp.init() changes MXNet for the process)."""
    import subprocess
    import sys
    # (no forward: float16 layers need cuDNN; the refusal comes before anything is pushed)
    code = ("import mxnet as mx, cdsgd_mx\nfrom mxnet.contrib import amp\nfrom cdsgd_mx.bench import mark_fresh\n"
            "amp.init()\nparams = mx.gluon.ParameterDict(); params.get('w', shape=(3,)); params.initialize()\n"
            "tr = cdsgd_mx.Trainer(params, 'sgd', {'learning_rate': 0.1}, kvstore='local')\n"
            "amp.init_trainer(tr)\nmark_fresh(tr)\n"
            "try:\n    tr.step(1)\nexcept cdsgd_mx.worker.kvstore.ConfigError as e:\n    print('REFUSED', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "REFUSED AMP's dynamic loss scaling (amp.init_trainer) is not supported" in proc.stdout, \
        proc.stdout + proc.stderr[-2000:]

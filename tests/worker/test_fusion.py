"""One-parameter calls collected into buckets (worker/fusion.py, issue 39), in one process
(kvstore='local'): MXNet's Module and gluon.Trainer broadcast and push one parameter per call."""
import mxnet as mx
import numpy as np
import pytest

from cdsgd_mx import CDSGD, ConfigError

SHAPES = [(37,), (5, 7), (300,), (1,)]


def grad(i, t, shape):
    return mx.nd.array(np.random.RandomState(100 * t + i).normal(0, 1, shape).astype(np.float32))


def store(algorithm, **kw):
    kv = CDSGD(algorithm=algorithm, k=3, warmup_steps=2, kvstore="local", **kw)
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, rescale_grad=0.5))
    return kv


def weights(i, shape):
    return mx.nd.array(np.random.RandomState(i).uniform(-1, 1, shape).astype(np.float32))


def train(kv, per_call, steps=9, pushed=None):
    """pushed: the parameters pushed each step (default all); per_call: one call each, as Module."""
    outs = [weights(i, s) for i, s in enumerate(SHAPES)]
    if per_call:
        for i in range(len(SHAPES)):
            kv.broadcast(i, outs[i], out=outs[i])
    else:
        kv.broadcast(list(range(len(SHAPES))), outs, out=outs)
    for t in range(steps):
        keys = list(range(len(SHAPES))) if pushed is None else pushed(t)
        grads = [grad(i, t, SHAPES[i]) for i in keys]
        if per_call:
            for i, g in zip(keys, grads):
                kv.pushpull(i, g, out=outs[i])
        else:
            kv.pushpull(keys, grads, out=[outs[i] for i in keys])
    kv.wait_all()
    return [o.asnumpy() for o in outs]


@pytest.mark.parametrize("algorithm", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_one_parameter_calls_become_one_bucket_set_with_the_same_weights(algorithm):
    kv = store(algorithm)
    got = train(kv, per_call=True)
    assert len(kv.bucket_sets) == 1 and sorted(kv.bucket_sets[0].keys) == [0, 1, 2, 3]
    assert kv.steps_done == 9
    want = train(store(algorithm), per_call=False)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_without_fusion_each_parameter_keeps_its_own_set_and_the_same_weights():
    kv = store("cdsgd", fuse_calls=False)
    got = train(kv, per_call=True)
    assert len(kv.bucket_sets) == 4
    for g, w in zip(got, train(store("cdsgd"), per_call=False)):
        np.testing.assert_array_equal(g, w)


def every_step(kv, pushed, marked=None, steps=6):
    """One call per parameter (as Module and gluon.Trainer): the weights after each step, i.e.
    what each next forward reads. marked: the parameters whose weights carry autograd's
    gradient mark (as gluon's do unless grad_req='null')."""
    outs = [weights(i, s) for i, s in enumerate(SHAPES)]
    for i in marked or ():
        outs[i].attach_grad()
    for i in range(len(SHAPES)):
        kv.broadcast(i, outs[i], out=outs[i])
    reads = []
    for t in range(steps):
        for i in pushed:
            kv.pushpull(i, grad(i, t, SHAPES[i]), out=outs[i])
        reads.append([o.asnumpy() for o in outs])
    return reads


@pytest.mark.parametrize("algorithm", ["ssgd", "cdsgd"])
@pytest.mark.parametrize("pushed,marked", [([0, 2, 3], None), ([0, 1, 2], [0, 1, 2])],
                         ids=["passed-over", "unmarked-last"])
def test_a_parameter_never_pushed_is_planned_out_within_the_first_step(capsys, algorithm, pushed, marked):
    """Module's fixed_param_names (passed over: 1 never comes, and a later one does) and
    gluon's grad_req='null' (3, the last, carries no gradient mark): the first step's set runs
    at the call of its last parameter that can come, planned again without the other, so every
    step's weights equal those of one set per parameter (exact from the first step), the first
    step included, and nothing needs saying."""
    kv = store(algorithm)
    got = every_step(kv, pushed, marked)
    assert capsys.readouterr().out == ""
    never = [i for i in range(len(SHAPES)) if i not in pushed]
    assert sorted(map(sorted, (b.keys for b in kv.bucket_sets))) == sorted([sorted(pushed), never])
    want = every_step(store(algorithm, fuse_calls=False), pushed, marked)
    for t, (g, w) in enumerate(zip(got, want)):
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(g[i], w[i], err_msg="step %d parameter %d" % (t, i))
    np.testing.assert_array_equal(got[-1][never[0]], weights(never[0], SHAPES[never[0]]).asnumpy())


def test_a_last_parameter_never_pushed_without_a_mark_is_found_at_the_second_step_and_said(capsys):
    """Where nothing tells (3, the last in broadcast order, never comes and no weights carry a
    gradient mark: Module with its last parameter fixed), the set is planned again at the
    second step, and one line says the forward/backward before it read step 0's weights."""
    kv = store("ssgd")
    got = train(kv, per_call=True, pushed=lambda t: [0, 1, 2])
    out = capsys.readouterr().out
    assert "parameters 3 are never pushed (fixed, or grad_req='null'): fusing the other 3 from here on" in out
    assert "ran at step 0's weights, once" in out
    assert sorted(map(sorted, (b.keys for b in kv.bucket_sets))) == [[0, 1, 2], [3]]
    np.testing.assert_array_equal(got[3], weights(3, SHAPES[3]).asnumpy())
    assert kv.steps_done == 9


def test_a_parameter_left_out_after_it_was_pushed_stops_in_one_line():
    kv = store("cdsgd")
    with pytest.raises(ConfigError, match=r"parameters 2 were pushed at earlier steps but not at step 3"):
        train(kv, per_call=True, pushed=lambda t: [0, 1, 3] if t == 3 else [0, 1, 2, 3])

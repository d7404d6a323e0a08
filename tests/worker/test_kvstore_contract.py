"""The KVStore contract, ported from the applicable cases of MXNet's own
tests/python/unittest/test_kvstore_custom.py and run against CDSGD. What differs by design:
- pushpull needs out= and applies the optimizer on the servers (update_on_kvstore): there is
  no in-place pushpull(key, vals) that returns the plain sum, so the sums are checked through
  SGD with learning rate -1 (W + sum of gradients);
- a key is initialized once: a second broadcast of the same key raises ValueError (its buckets
  live on the servers);
- is_capable('optimizer') is True (MXNet's test store says False);
- .type is 'cdsgd_dist_sync' / 'cdsgd_local', not the registered 'cdsgd': gluon.Trainer reads
  'dist' in kvstore.type to treat a store as distributed (it then refuses a changing batch size
  and a kvstore reset, which a parameter server cannot honour).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

mx = pytest.importorskip("mxnet")

import cdsgd_mx  # noqa: E402

SHAPE = (4, 4)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def local_store(**kw):
    kv = cdsgd_mx.CDSGD(algorithm="ssgd", kvstore="local", **kw)
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=-1.0))  # W + sum: pushpull shows the sum
    return kv


@pytest.mark.parametrize("key", [3, "a"])
def test_broadcast_single_kv_pair(key):
    kv = local_store()
    out = mx.nd.empty(SHAPE)
    kv.broadcast(key, mx.nd.ones(SHAPE), out)
    assert np.all(out.asnumpy() == 1)
    outs = [mx.nd.empty(SHAPE, ctx=mx.cpu(d)) for d in range(3)]  # one per device of this worker
    kv.broadcast(key * 2, mx.nd.ones(SHAPE), outs)
    assert all(np.all(o.asnumpy() == 1) for o in outs)


@pytest.mark.parametrize("keys", [[5, 7, 11], ["b", "c", "d"]])
def test_broadcast_list_kv_pair(keys):
    kv = local_store()
    outs = [mx.nd.empty(SHAPE) for _ in keys]
    kv.broadcast(keys, [mx.nd.ones(SHAPE) * (i + 1) for i in range(len(keys))], outs)
    for i, o in enumerate(outs):
        assert np.all(o.asnumpy() == i + 1)
    with pytest.raises(ValueError, match="already initialized"):  # differs: initialized once
        kv.broadcast(keys[0], mx.nd.ones(SHAPE), mx.nd.empty(SHAPE))


@pytest.mark.parametrize("key,keys", [(3, [5, 7, 11]), ("a", ["b", "c", "d"])])
def test_pushpull_single_and_list_kv_pairs(key, keys):
    kv = local_store()
    kv.broadcast(key, mx.nd.zeros(SHAPE), out=mx.nd.empty(SHAPE))
    out = mx.nd.empty(SHAPE)
    kv.pushpull(key, mx.nd.ones(SHAPE), out=out)
    kv.wait_all()
    assert np.all(out.asnumpy() == 1)
    outs = [mx.nd.empty(SHAPE) for _ in keys]
    kv.broadcast(keys, [mx.nd.zeros(SHAPE)] * len(keys), out=outs)
    kv.pushpull(keys, [mx.nd.ones(SHAPE) * 2.0] * len(keys), out=outs)
    kv.wait_all()
    for o in outs:
        assert np.all(o.asnumpy() == 2)
    with pytest.raises(ValueError, match="needs out="):  # differs: no in-place reduce
        kv.pushpull(key, mx.nd.ones(SHAPE))
    # several devices: their gradients are summed (1 + 2 = 3, one push), every out gets W
    kv.broadcast(key * 3, mx.nd.zeros(SHAPE), out=mx.nd.empty(SHAPE))
    outs = [mx.nd.empty(SHAPE, ctx=mx.cpu(d)) for d in range(2)]
    kv.pushpull(key * 3, [mx.nd.ones(SHAPE, ctx=mx.cpu(d)) * (d + 1) for d in range(2)], out=outs)
    kv.wait_all()
    assert all(np.all(o.asnumpy() == 3) for o in outs)
    with pytest.raises(ValueError, match="out: no array given"):
        kv.pushpull(key, mx.nd.ones(SHAPE), out=[])


def test_is_capable_and_type():
    kv = local_store()
    assert type(kv).is_capable("optimizer") is True
    with pytest.raises(ValueError, match="Unknown capability: no_such"):
        kv.is_capable("no_such")
    assert kv.type == "cdsgd_local"
    assert mx.kv.create("local").type == "local"  # MXNet's: the name created with


def test_save_and_load_optimizer_states_round_trip(tmp_path):
    kv = local_store()
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.5, momentum=0.9))
    out = mx.nd.empty(SHAPE)
    kv.broadcast(3, mx.nd.ones(SHAPE), out)
    kv.pushpull(3, mx.nd.ones(SHAPE), out=out)
    kv.save_optimizer_states(str(tmp_path / "s"))
    kv.pushpull(3, mx.nd.ones(SHAPE), out=out)
    kv.wait_all()
    after_two = out.asnumpy().copy()
    kv.load_optimizer_states(str(tmp_path / "s"))  # back to after one step, momentum included
    kv.pushpull(3, mx.nd.ones(SHAPE), out=out)
    kv.wait_all()
    np.testing.assert_array_equal(out.asnumpy(), after_two)


def test_pushpull_sums_over_workers(tmp_path):
    """With 2 workers the servers sum the pushes: int and str keys, one key and a list. The
    store mx.kv.create('cdsgd') makes runs CD-SGD: out gets the local step W - lr * g = 1 (the
    one-step delayed update), the servers' W the sum."""
    script = tmp_path / "sums.py"
    script.write_text(
        "import mxnet as mx, numpy as np, cdsgd_mx\n"
        "kv = mx.kv.create('cdsgd')\n"
        "kv.set_optimizer(mx.optimizer.SGD(learning_rate=-1.0))\n"
        "for key, keys in ((3, [5, 7, 11]), ('a', ['b', 'c', 'd'])):\n"
        "    out = mx.nd.empty((4, 4)); kv.broadcast(key, mx.nd.zeros((4, 4)), out)\n"
        "    kv.pushpull(key, mx.nd.ones((4, 4)), out=out)\n"
        "    outs = [mx.nd.empty((4, 4)) for _ in keys]\n"
        "    kv.broadcast(keys, [mx.nd.zeros((4, 4))] * 3, outs)\n"
        "    kv.pushpull(keys, [mx.nd.ones((4, 4)) * 2] * 3, out=outs)\n"
        "    kv.wait_all()\n"
        "    W = [kv.global_weights(k).asnumpy() for k in [key] + keys]\n"
        "    print('SUMS', key, W[0].min(), W[0].max(), min(w.min() for w in W[1:]), max(w.max() for w in W[1:]),\n"
        "          'LOCAL', out.asnumpy().max(), flush=True)\n")
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "2", "--timeout", "60", "--",
                           sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count("SUMS 3 2.0 2.0 4.0 4.0 LOCAL 1.0") == 2, proc.stdout[-2000:]
    assert proc.stdout.count("SUMS a 2.0 2.0 4.0 4.0 LOCAL 1.0") == 2, proc.stdout[-2000:]

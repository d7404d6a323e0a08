"""A one-process trainer for the checkpoint-set tests (kvstore='local'), and, run as a script,
a save that the process dies in:

    python checkpoint_worker.py CKPT N WHEN
loads checkpoint CKPT (taken after 2 steps), takes step 2 and saves again, ending the process
with os._exit(9) before (WHEN=before) or after (WHEN=after) the N-th os.replace of the save
(1: the server's file, 2: the worker's, 3: the manifest).
"""
import os
import sys

import numpy as np

NAMES = ("w", "v")
SHAPES = ((10,), (3, 4))


def make_trainer(names=NAMES, optimizer="sgd", optimizer_params=None):
    import cdsgd_mx  # first: MXNet then imports without scikit-learn (mxnet_import.py)
    import mxnet as mx
    from mxnet import gluon
    params = gluon.ParameterDict()
    for i, (name, shape) in enumerate(zip(names, SHAPES)):
        params.get(name, shape=shape, init=mx.init.Constant(0.5 + i))
    params.initialize()
    tr = cdsgd_mx.Trainer(params, optimizer, optimizer_params or {"learning_rate": 0.1, "momentum": 0.9},
                          kvstore="local", algorithm="cdsgd", warmup_steps=1, k=2)
    return params, tr


def step(params, tr, t):
    """Step t with a gradient that depends on t and on the weights (the state matters)."""
    for i, p in enumerate(params.values()):
        x = p.data().asnumpy()
        p.grad()[:] = np.round((0.3 * x + np.sin(np.arange(x.size) + 7 * t + i).reshape(x.shape)) * 64) / 64
        p.data()._fresh_grad = True  # as backward would
    tr.step(1)


def state(params, tr):
    """The weights in use and the global weights."""
    tr.wait_all()
    return [p.data().asnumpy().copy() for p in params.values()] + \
        [tr.kvstore.global_weights(i).asnumpy() for i in range(len(NAMES))]


def main(ckpt, n, when):
    params, tr = make_trainer()
    tr.load_states(ckpt)
    step(params, tr, 2)
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == n and when == "before":
            os._exit(9)
        real_replace(src, dst)
        if len(calls) == n and when == "after":
            os._exit(9)

    os.replace = replace
    tr.save_states(ckpt)
    sys.exit("the save ended without reaching os.replace %d (%d calls)" % (n, len(calls)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])

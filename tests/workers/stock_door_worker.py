"""A worker for the every-step door tests (tests/test_stock_doors.py): the weights each forward
reads, step by step, through the doors an MXNet user comes by, so that a run on our store can be
held to stock `dist_sync` on MXNet's own servers (or to cdsgd_mx.Trainer) at every step.

    --door gluon          gluon.Trainer(..., kvstore=mx.kv.create(STORE)) (updates on the store)
    --door gluon-workers  the same with update_on_kvstore=False (the store sums, gluon updates)
    --door module         Module with kvstore=STORE, stepped by Module.update(): one pushpull per parameter
    --door module-fused   the same Module, one pushpull per step with every parameter pushed (how
                          cdsgd_mx.Trainer hands a step over)
    --door trainer        cdsgd_mx.Trainer with the algorithm STORE names (our own door)
    --door trainer-workers  the same with update_on_kvstore=False
    --store NAME          mx.kv.create(NAME); `import cdsgd_mx` first unless --no-import

The gluon model is a small hybridized conv net with BatchNorm, whose running mean and variance
are parameters gluon broadcasts but never pushes (grad_req='null'); --bn-last ends it with a
BatchNorm, so that the last parameter in the Trainer's order is never pushed. The optimizer is
SGD with momentum, wd and multi_precision, and the learning rate is set before the first step
(with --lr-changes again every 3 steps: trainer.set_learning_rate, as MXNet's
image-classification example does at each epoch). Module: the same shapes as a symbol, --fixed NAME keeps one parameter
fixed (fixed_param_names).

Writes OUT/rank<R>.json: {"reads": {step: {param: float32 hex}}} for steps 0-5 and the last,
read just before each forward, and "final": the weights after the last step.
"""
import argparse
import json
import os

ap = argparse.ArgumentParser()
ap.add_argument("--door", default="gluon", choices=["gluon", "gluon-workers", "module", "module-fused", "trainer", "trainer-workers"])
ap.add_argument("--store", default="dist_sync_ssgd")
ap.add_argument("--no-import", action="store_true")
ap.add_argument("--steps", type=int, default=9)
ap.add_argument("--bn-last", action="store_true")
ap.add_argument("--lr-changes", action="store_true")
ap.add_argument("--fixed", default=None, help="Module: one parameter name kept fixed")
ap.add_argument("--out", required=True)
args = ap.parse_args()

if not args.no_import:
    import cdsgd_mx  # noqa: F401  (first: registers our store names)
import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

BATCH, LR = 8, 0.1
RECORDED = set(range(6)) | {args.steps - 1}
OPT = {"learning_rate": LR, "momentum": 0.9, "wd": 1e-4, "multi_precision": True}

rng = np.random.RandomState(0)
X_ALL = rng.normal(0, 1, (BATCH * args.steps * 2, 1, 6, 6)).astype(np.float32)
Y_ALL = (X_ALL.reshape(len(X_ALL), -1) @ rng.normal(0, 1, (36, 4))).argmax(axis=1).astype(np.float32)
kv = None if args.door.startswith("trainer") else mx.kv.create(args.store)


def shard(store):
    """This worker's batches (2 workers)."""
    assert store.num_workers == 2, store.num_workers
    return X_ALL[store.rank::2], Y_ALL[store.rank::2]


reads = {}


def hexes(arrays):
    return {name: a.astype(np.float32).tobytes().hex() for name, a in arrays.items()}


def rate(step):
    """Set before the first step; with --lr-changes again every 3 steps (gluon's own Trainer
    given a store changes only the worker's optimizer: MXNet's servers keep their rate)."""
    return LR * (0.5 ** (step // 3)) if step and args.lr_changes else LR * 0.8


if args.door.startswith("module"):
    data = mx.sym.Variable("data")
    net = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv")
    net = mx.sym.BatchNorm(net, name="bn")
    net = mx.sym.Activation(net, act_type="relu")
    net = mx.sym.FullyConnected(mx.sym.flatten(net), num_hidden=8, name="fc1")
    net = mx.sym.FullyConnected(net, num_hidden=4, name="fc2")
    net = mx.sym.SoftmaxOutput(net, name="softmax")
    X, y = shard(kv)
    train = mx.io.NDArrayIter(X, y, batch_size=BATCH, shuffle=False)
    mx.random.seed(kv.rank)  # each worker starts elsewhere: the servers' W(0) (rank 0's) must win
    mod = mx.mod.Module(net, context=mx.cpu(), fixed_param_names=[args.fixed] if args.fixed else None)
    step = [0]

    def before_forward(_param=None):
        if step[0] in RECORDED:
            reads[step[0]] = hexes({n: mod._exec_group.param_arrays[i][0].asnumpy()
                                    for i, n in enumerate(mod._exec_group.param_names)})
        step[0] += 1

    # fit runs forward_backward then update: read the weights a forward is about to use
    mod.bind(data_shapes=train.provide_data, label_shapes=train.provide_label)
    mod.init_params(initializer=mx.init.Xavier())
    mod.init_optimizer(kvstore=kv, optimizer="sgd", optimizer_params=dict(OPT, learning_rate=rate(0)))
    for batch in train:
        before_forward()
        mod.forward_backward(batch)
        if args.door == "module":
            mod.update()
        else:
            pushed = [i for i, g in enumerate(mod._exec_group.grad_arrays) if g[0] is not None]
            kv.pushpull([mod._exec_group.param_names[i] for i in pushed], [mod._exec_group.grad_arrays[i] for i in pushed],
                        out=[mod._exec_group.param_arrays[i] for i in pushed])
    final = {n: a[0].asnumpy() for n, a in zip(mod._exec_group.param_names, mod._exec_group.param_arrays)}
else:
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=1), gluon.nn.BatchNorm(in_channels=4), gluon.nn.Activation("relu"),
            gluon.nn.Flatten(), gluon.nn.Dense(8, in_units=64), gluon.nn.Dense(4, in_units=8))
    if args.bn_last:
        net.add(gluon.nn.BatchNorm(in_channels=4))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    learned = {name: p for name, p in net.collect_params().items() if p.grad_req != "null"}
    if args.door.startswith("trainer"):
        import cdsgd_mx
        from cdsgd_mx.worker import doors
        options = doors.store_arguments(dict(doors.options_from_environment(), algorithm=doors.NAMES[args.store]))
        trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", OPT, kvstore="dist_sync", **options,
                                   update_on_kvstore=False if args.door == "trainer-workers" else None)
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", OPT, kvstore=kv,
                                update_on_kvstore=False if args.door == "gluon-workers" else None)
    if args.door == "gluon-workers":
        # stock MXNet's known first-step race with the workers updating (docs/failures.md, "Stock
        # MXNet: workers apart after the first step"): its pull of W(0), issued inside the first
        # step, can reach the server after that step's sum; the workaround, in both systems' runs
        trainer._init_kvstore()
        trainer._init_params()
        mx.nd.waitall()
    kv = trainer.kvstore if args.door.startswith("trainer") else kv
    X, y = shard(kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for step in range(args.steps):
        trainer.set_learning_rate(rate(step))
        if step in RECORDED:
            reads[step] = hexes({n: p.data().asnumpy() for n, p in learned.items()})
        data, label = mx.nd.array(X[step * BATCH:(step + 1) * BATCH]), mx.nd.array(y[step * BATCH:(step + 1) * BATCH])
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(BATCH)
    final = {n: p.data().asnumpy() for n, p in learned.items()}
mx.nd.waitall()
with open(os.path.join(args.out, "rank%d.json" % kv.rank), "w") as f:
    json.dump({"reads": reads, "final": hexes(final)}, f)
print("worker %d done" % kv.rank, flush=True)

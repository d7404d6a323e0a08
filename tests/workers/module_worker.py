"""A fit.py-style worker for the door tests (tests/test_doors.py): MXNet's Module API,
NDArrayIter over a deterministic synthetic set sharded by rank, SGD with momentum and a
FactorScheduler, 2+ workers.

    --door module   mod.fit(..., kvstore=STORE): Module pushes one parameter per call
    --door fused    the same Module stepped by hand: forward_backward, then one pushpull call
                    with every parameter (how cdsgd_mx.Trainer hands a step over)
    --store NAME    mx.kv.create(NAME) ('dist_sync', 'dist_sync_cdsgd', ...); with `import cdsgd_mx`
                    first unless --no-import
Writes OUT/rank<R>.json: per batch (steps_done, the local learning rate), and the final
parameters.
"""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--door", default="module", choices=["module", "fused"])
ap.add_argument("--store", default="dist_sync_cdsgd")
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--batches", type=int, default=6, help="batches per worker per epoch")
ap.add_argument("--no-import", action="store_true")
ap.add_argument("--save", default=None, help="Module.save_optimizer_states(SAVE) at every epoch's end")
ap.add_argument("--resume", default=None, help="Module.load_optimizer_states(RESUME), then fit from --begin-epoch")
ap.add_argument("--begin-epoch", type=int, default=0)
ap.add_argument("--out", required=True)
args = ap.parse_args()

if not args.no_import:
    import cdsgd_mx  # noqa: F401  (first, as the docs say: registers our stores)
if os.environ.get("TEST_PART_CLOSE"):  # (tests/test_doors.py) how near the part choice's medians must be for a second look
    from cdsgd_mx.worker import part_choice
    part_choice.CLOSE = float(os.environ["TEST_PART_CLOSE"])
import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

BATCH = 8
kv = mx.kv.create(args.store)
rank, workers = kv.rank, kv.num_workers
rng = np.random.RandomState(0)
n = BATCH * args.batches * workers
X = rng.normal(0, 1, (n, 12)).astype(np.float32)
y = (X @ rng.normal(0, 1, (12, 4))).argmax(axis=1).astype(np.float32)
train = mx.io.NDArrayIter(X[rank::workers], y[rank::workers], batch_size=BATCH, shuffle=False)

data = mx.sym.Variable("data")
net = mx.sym.FullyConnected(data, num_hidden=16, name="fc1")
net = mx.sym.Activation(net, act_type="relu")
net = mx.sym.FullyConnected(net, num_hidden=4, name="fc2")
net = mx.sym.SoftmaxOutput(net, name="softmax")

mx.random.seed(rank)  # each worker starts elsewhere: the servers' W(0) (rank 0's) must win
mod = mx.mod.Module(net, context=mx.cpu())
sched = mx.lr_scheduler.FactorScheduler(step=3, factor=0.5)
opt_params = {"learning_rate": 0.2, "momentum": 0.9, "wd": 1e-4, "lr_scheduler": sched}
record = []


def seen(_param=None):
    local = getattr(kv, "local_learning_rate", None)
    record.append([getattr(kv, "steps_done", None), local])


def save(epoch, symbol, arg_params, aux_params):
    mod.save_optimizer_states(args.save)  # every worker, at the same step (the store's checkpoint set)


if args.door == "module":
    if args.resume:  # as a fit.py script resumes: the states after the optimizer exists, then fit on
        mod.bind(data_shapes=train.provide_data, label_shapes=train.provide_label)
        mod.init_params(initializer=mx.init.Xavier())
        mod.init_optimizer(kvstore=kv, optimizer="sgd", optimizer_params=opt_params)
        mod.load_optimizer_states(args.resume)
    mod.fit(train, num_epoch=args.epochs, kvstore=kv, optimizer="sgd", optimizer_params=opt_params,
            initializer=mx.init.Xavier(), batch_end_callback=seen, begin_epoch=args.begin_epoch,
            epoch_end_callback=save if args.save else None)
else:
    mod.bind(data_shapes=train.provide_data, label_shapes=train.provide_label)
    mod.init_params(initializer=mx.init.Xavier())
    mod.init_optimizer(kvstore=kv, optimizer="sgd", optimizer_params=opt_params)
    names = mod._exec_group.param_names
    for epoch in range(args.epochs):
        train.reset()
        for batch in train:
            mod.forward_backward(batch)
            kv.pushpull(names, mod._exec_group.grad_arrays, out=mod._exec_group.param_arrays)
            mod._params_dirty = True  # (as Module.update says: get_params then reads the devices' weights)
            seen()
args_, _ = mod.get_params()
with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
    json.dump({"record": record, "params": {k: v.asnumpy().ravel().tolist() for k, v in args_.items()},
               "type": kv.type, "sets": len(getattr(kv, "bucket_sets", ())),
               "parts": sum(len(b.parts) for bset in getattr(kv, "bucket_sets", ()) for b in bset.buckets)}, f)
print("worker %d done: %d batches" % (rank, len(record)), flush=True)
sys.stdout.flush()

"""A gluon worker for the door tests (tests/test_doors.py): the same MLP, data and schedule as
module_worker.py, trained through

    --door gluon     gluon.Trainer(..., kvstore=mx.kv.create(STORE)): one pushpull per parameter
    --door trainer   cdsgd_mx.Trainer with the same algorithm and options: one call per step

Writes OUT/rank<R>.json: per step (steps_done, the local learning rate) and the final weights.
"""
import argparse
import json
import os

import cdsgd_mx  # noqa: F401  (first: registers our store names)
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from cdsgd_mx.worker import doors

ap = argparse.ArgumentParser()
ap.add_argument("--door", default="gluon", choices=["gluon", "trainer"])
ap.add_argument("--store", default="dist_sync_cdsgd")
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--out", required=True)
args = ap.parse_args()
if os.environ.get("TEST_PART_CLOSE"):  # (tests/test_doors.py) how near the part choice's medians must be for a second look
    from cdsgd_mx.worker import part_choice
    part_choice.CLOSE = float(os.environ["TEST_PART_CLOSE"])

BATCH = 8
mx.random.seed(0)
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(16, activation="relu", in_units=12), gluon.nn.Dense(4, in_units=16))
net.initialize(mx.init.Xavier())
sched = mx.lr_scheduler.FactorScheduler(step=3, factor=0.5)
opt_params = {"learning_rate": 0.2, "momentum": 0.9, "wd": 1e-4, "lr_scheduler": sched}
if args.door == "gluon":
    kv = mx.kv.create(args.store)
    trainer = gluon.Trainer(net.collect_params(), "sgd", opt_params, kvstore=kv)
else:  # the same algorithm and options, through our Trainer (its own defaults overridden)
    options = doors.store_arguments(dict(doors.options_from_environment(), algorithm=doors.NAMES[args.store]))
    trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", opt_params, kvstore="dist_sync", **options)
    kv = trainer.kvstore
rank, workers = kv.rank, kv.num_workers
rng = np.random.RandomState(0)
X = rng.normal(0, 1, (BATCH * args.steps * workers, 12)).astype(np.float32)
y = (X @ rng.normal(0, 1, (12, 4))).argmax(axis=1).astype(np.float32)
X, y = X[rank::workers], y[rank::workers]
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
record = []
for step in range(args.steps):
    data, label = mx.nd.array(X[step * BATCH:(step + 1) * BATCH]), mx.nd.array(y[step * BATCH:(step + 1) * BATCH])
    with autograd.record():
        loss = loss_fn(net(data), label)
    loss.backward()
    trainer.step(BATCH)
    record.append([kv.steps_done, kv.local_learning_rate])
kv.wait_all() if hasattr(kv, "wait_all") else None
params = {name: p.data().asnumpy().ravel().tolist() for name, p in net.collect_params().items()}
with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
    json.dump({"record": record, "params": params,
               "parts": sum(len(b.parts) for bset in getattr(kv, "bucket_sets", ()) for b in bset.buckets)}, f)
print("worker %d done" % rank, flush=True)

"""A worker of the fault tests: trains a small model, and on request misbehaves.

--fault corrupt   after 3 steps, pushes a payload the server cannot decode
--fault die       rank 1 kills itself with SIGKILL after 3 steps
--fault optimizer the global optimizer fails on the server at its first update
--fault none      trains until killed (the test kills a server)
--fault sleep     launch index 1 sleeps 10 s at step 5 (a slow but live step)
--fault uneven    launch index 0 takes half the steps of the others
--fault late      launch index 1 sleeps 40 s before it starts (never registers in time)
--fault finish    trains --steps steps, prints 'training done', waits 3 s, exits (the test
                  stops a node at the exit barrier)
--fault exit      as finish, but launch index 0 exits at once and index 1 after 8 s: index 0
                  waits inside the exit barrier meanwhile (the test stops it there)
"""
import argparse
import os
import signal
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fault", default="none")
    ap.add_argument("--steps", type=int, default=100000)
    args = ap.parse_args()
    index = int(os.environ.get("CDSGD_LAUNCH_INDEX", "0"))
    if args.fault == "late" and index == 1:
        time.sleep(40)
    if args.fault == "uneven" and index == 0:
        args.steps //= 2
    import cdsgd_mx  # first: MXNet then imports without scikit-learn (mxnet_import.py)
    import mxnet as mx
    from mxnet import gluon
    params = gluon.ParameterDict()
    w = params.get("w", shape=(1000,), init=mx.init.Zero())
    params.initialize()
    opt = {"learning_rate": 0.1}
    if args.fault == "optimizer":
        opt["clip_gradient"] = "not a number"  # accepted here, fails inside the server's update
    trainer = cdsgd_mx.Trainer(params, "sgd", opt, algorithm="bitsgd", warmup_steps=0)
    rank = trainer.kvstore.rank
    for t in range(args.steps):
        w.grad()[:] = np.random.RandomState(t).randn(1000).astype(np.float32)
        w.data()._fresh_grad = True  # as backward would
        trainer.step(1)
        trainer.wait_all()
        print("rank %d step %d" % (rank, t), flush=True)
        if t == 3 and args.fault == "corrupt" and rank == 0:
            bucket = trainer.kvstore.bucket_sets[0].buckets[0]
            trainer.kvstore.backend.wire_row(bucket.payload_key)[:] = np.nan
            trainer.kvstore.backend.seal(bucket)  # the job's own push: with its proof
            trainer.kvstore.backend.push_payload(bucket.payload_key)
        if t == 3 and args.fault == "die" and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        if t == 5 and args.fault == "sleep" and index == 1:
            time.sleep(10)
        time.sleep(0.05)
    if args.fault == "finish":
        print("training done", flush=True)
        time.sleep(3)
    if args.fault == "exit":
        print("training done", flush=True)
        time.sleep(8 if index == 1 else 0)


if __name__ == "__main__":
    sys.exit(main())

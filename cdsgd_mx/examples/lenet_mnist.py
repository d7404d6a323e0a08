"""LeNet-5 on MNIST with cdsgd_mx.Trainer: one worker of a job (or one process with
--kvstore local). Run under the launcher:

    python -m cdsgd_mx.launch -n 2 -s 1 -- python -m cdsgd_mx.examples.lenet_mnist --algorithm cdsgd

Each worker trains on its shard (every num_workers-th sample of a permutation drawn from
--seed); rank 0 reports test accuracy and mean time per iteration, and prints one JSON summary
line prefixed with "RESULT " (with which test images it classified right, so that two runs can
be compared image by image).
"""
import argparse
import json
import os
import sys
import time

from cdsgd_mx.server.node import serve_if_not_worker

serve_if_not_worker()  # with MXNet's tools/launch.py every role runs this script

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

import cdsgd_mx  # noqa: E402
from cdsgd_mx.experiments.data import DataMissing, ensure, load_mnist, shard  # noqa: E402
from cdsgd_mx.experiments.models import lenet5  # noqa: E402


def evaluate(net, x, y, batch=1000):
    """Per test image, whether the net classifies it right (a bool array)."""
    hits = [net(mx.nd.array(x[b:b + batch])).argmax(axis=1).asnumpy() == y[b:b + batch]
            for b in range(0, len(x), batch)]
    return np.concatenate(hits)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.examples.lenet_mnist")
    ap.add_argument("--algorithm", default="cdsgd", choices=["ssgd", "bitsgd", "odsgd", "cdsgd"])
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=32, help="per worker (paper: 32)")
    ap.add_argument("--lr", type=float, default=0.1, help="global learning rate (paper: 0.1)")
    ap.add_argument("--local-lr", type=float, default=0.4, help="local learning rate (paper: 0.4)")
    ap.add_argument("--momentum", type=float, default=0.0, help="paper: plain SGD")
    ap.add_argument("--k", type=int, default=2, help="k-step correction (paper: 2)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--threshold", type=float, default=0.5, help="paper: 0.5")
    ap.add_argument("--kvstore", default="dist_sync", choices=["dist_sync", "local"])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--trace", default=None, help="write a chrome-trace JSON of rank 0 here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pull-compression", default="none", choices=["none", "2bit"],
                    help="2bit: 2 bits both ways (bitsgd, cdsgd)")
    args = ap.parse_args(argv)

    mx.random.seed(args.seed)
    np.random.seed(args.seed)
    net = lenet5()
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.hybridize()
    trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": args.lr, "momentum": args.momentum},
                               kvstore=args.kvstore, algorithm=args.algorithm, k=args.k, warmup_steps=args.warmup,
                               threshold=args.threshold, local_optimizer_params={"learning_rate": args.local_lr},
                               pull_compression=args.pull_compression,
                               trace=args.trace)
    rank, workers = trainer.kvstore.rank, trainer.kvstore.num_workers
    if rank != 0 and args.trace:
        trainer.kvstore.tracer.path = None
    try:
        if "DMLC_ROLE" not in os.environ:  # alone, not in a job: fetching here is safe
            ensure("mnist", args.data_dir)
        xtr, ytr, xte, yte, source = load_mnist(args.data_dir)  # in a job: from disk only
    except DataMissing as e:
        sys.exit("data error: %s" % e)
    idx = shard(len(xtr), rank, workers, seed=args.seed)
    xtr, ytr = xtr[idx], ytr[idx]
    rng = np.random.RandomState(args.seed + rank)
    order = rng.permutation(len(xtr))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    net(mx.nd.array(xtr[:2]))  # materialize parameters before the clock starts
    times, losses = [], []
    pos = 0
    start = time.perf_counter()
    for it in range(args.iterations):
        if pos + args.batch_size > len(order):
            order, pos = rng.permutation(len(xtr)), 0
        sel = order[pos:pos + args.batch_size]
        pos += args.batch_size
        t0 = time.perf_counter()
        x, y = mx.nd.array(xtr[sel]), mx.nd.array(ytr[sel])
        with trainer.kvstore.tracer.span("forward/backward", step=it):
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
        # MXNet Module's convention, which the paper used: average over all workers' samples
        trainer.step(args.batch_size * workers)
        losses.append(loss.mean().asscalar())  # waits for this step's forward/backward only
        times.append(time.perf_counter() - t0)
        if rank == 0 and (it + 1) % 100 == 0:
            print("%s: iteration %d/%d  loss %.4f  %.1f ms/iter" % (
                args.algorithm, it + 1, args.iterations, float(np.mean(losses[-100:])),
                1e3 * float(np.mean(times[-100:]))), flush=True)
    trainer.wait_all()
    total = time.perf_counter() - start
    if rank == 0:
        hits = evaluate(net, xte, yte)
        acc = float(hits.mean())
        skip = min(len(times) // 5, args.warmup)  # warm-up steps run as S-SGD: leave them out
        summary = {"algorithm": args.algorithm, "workers": workers, "iterations": args.iterations,
                   "test_accuracy": acc, "iter_ms": 1e3 * float(np.mean(times[skip:])),
                   "total_s": total, "bytes_pushed_per_worker": trainer.kvstore.bytes_pushed,
                   "final_loss": float(np.mean(losses[-50:])), "data": source,
                   "test_images": len(hits), "test_hits": np.packbits(hits).tobytes().hex()}  # 1 bit per image
        print("RESULT " + json.dumps(summary), flush=True)
        if args.trace:
            print("trace written to %s" % trainer.save_trace(), flush=True)


if __name__ == "__main__":
    main()

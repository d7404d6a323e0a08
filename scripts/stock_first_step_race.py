"""Shows a race in stock MXNet 1.9.1 (docs/failures.md, "Stock MXNet: workers apart after the
first step"): gluon.Trainer with kvstore='dist_sync' and updates on the workers
(update_on_kvstore=False) sets its kvstore up inside the first step(), and the pull of the
initial weights it issues there can reach the server after that step's gradient rounds. ps-lite's
server takes messages from a priority queue, and with every message at priority 0 it does not
keep their order; without an updater the server stores the summed gradient G as the key's value,
so a late pull hands that worker G as its weights. The workers then train apart for good.

    python scripts/stock_first_step_race.py [--runs 30] [--devices 2] [--early-setup]

Each run is a job of stock MXNet (its own server, 2 workers + 1 server, our launcher), 3 jobs
at a time. The workers start from different random weights on purpose (each seeds its own), as
any two processes that initialize independently do; the first step's broadcast is what should
make them equal. Per run it prints whether the workers hold the same weights after 5 steps and,
where they do not, whether a worker's weights after step 1 are exactly G - lr G / batch (the
summed gradient pulled as weights, then updated). --early-setup runs the known workaround: the
kvstore set up, and waited for, before the first forward/backward.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

LR, BATCH, STEPS = 0.1, 32, 5


def worker(args):
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon
    kv = mx.kv.create("dist_sync")
    mx.random.seed(1 + kv.rank)  # each worker its own initial weights: the broadcast must replace them
    rng = np.random.RandomState(7 + kv.rank)
    contexts = [mx.cpu(i) for i in range(args.devices)]
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net(mx.nd.zeros((2, 32), ctx=contexts[0]))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR}, kvstore=kv, update_on_kvstore=False)
    if args.early_setup:  # the workaround: the store and W(0) in place before any gradient round
        trainer._init_kvstore()
        trainer._init_params()
        mx.nd.waitall()
    params = list(net.collect_params().values())
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    after_first = {}
    for step in range(STEPS):
        x = gluon.utils.split_and_load(mx.nd.array(rng.randn(BATCH, 32).astype(np.float32)), contexts)
        y = gluon.utils.split_and_load(mx.nd.array(rng.randint(0, 10, BATCH).astype(np.float32)), contexts)
        with autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(x, y)]
        for loss in losses:
            loss.backward()
        trainer.step(BATCH)
        mx.nd.waitall()
        if step == 0:  # after step 1 the gradients hold G, the pulled sum, on every device
            for p in params:
                w, g = p.data(contexts[0]).asnumpy(), p.grad(contexts[0]).asnumpy()
                after_first[p.name] = bool(np.array_equal(w, g - np.float32(LR / BATCH) * g))
    digest = hashlib.sha1(b"".join(p.data(c).asnumpy().tobytes() for p in params for c in contexts)).hexdigest()
    print("RESULT " + json.dumps({"rank": kv.rank, "digest": digest,
                                  "weights_are_the_gradient_after_step_1": sorted(k for k, v in after_first.items() if v)}),
          flush=True)


def job(args, folder):
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--stock-server", "--timeout", "120", "--",
           sys.executable, os.path.abspath(__file__), "--worker", "--devices", str(args.devices)] + \
        (["--early-setup"] if args.early_setup else [])
    return subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python scripts/stock_first_step_race.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--devices", type=int, default=2, help="CPU contexts per worker (default %(default)s)")
    ap.add_argument("--early-setup", action="store_true", help="set the kvstore up before the first step")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.runs < 1 or args.devices < 1:
        ap.error("--runs and --devices must be >= 1")
    if args.worker:
        return worker(args)
    apart = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for first in range(0, args.runs, 3):
            batch = [(n, job(args, tmp)) for n in range(first, min(first + 3, args.runs))]
            for n, proc in batch:
                out, err = proc.communicate()
                found = sorted((json.loads(l.split("RESULT ", 1)[1]) for l in out.splitlines() if "RESULT " in l),
                               key=lambda r: r["rank"])
                if proc.returncode != 0 or len(found) != 2:
                    failed += 1
                    print("run %d: the job failed (exit %d): %s" % (n + 1, proc.returncode,
                                                                   (err.strip().splitlines() or ["?"])[-1]), flush=True)
                    continue
                same = found[0]["digest"] == found[1]["digest"]
                apart += not same
                hit = ["rank %d (%s)" % (r["rank"], ", ".join(r["weights_are_the_gradient_after_step_1"]))
                       for r in found if r["weights_are_the_gradient_after_step_1"]]
                print("run %d: workers %s%s" % (n + 1, "the same" if same else "APART",
                                                "; weights = G - lr G / batch after step 1 on " + "; ".join(hit)
                                                if hit else ""), flush=True)
    print("%d of %d runs ended with the workers apart (%d contexts per worker, %s)%s" % (
        apart, args.runs - failed, args.devices, "kvstore set up before the first step" if args.early_setup
        else "stock gluon.Trainer as documented", "; %d jobs failed" % failed if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Where 2 bits both ways loses under momentum (issue 40, item 1): a momentum MLP on MNIST trained
one way and both ways, with the lag of the workers' weights V behind the servers' W recorded
per parameter and over time.

    python -m cdsgd_mx.experiments.pull_lag [--steps 600] [--every 50] [--algorithms cdsgd,bitsgd]

The workload is the issue's: an MLP 784-300-100-10, SGD with momentum 0.9 and wd 1e-4, the rate
cut 10x at 60% of the run, k = 4 and 20 warm-up steps. It runs in one process (kvstore='local',
the in-process server: the same V, codes and re-syncs as a job, with one worker). It prints:
- the test accuracy one way and both ways;
- ||W - V|| / ||W|| over the whole model at every --every steps, and ||W - V|| in units of the
  last update's size ||W(t) - W(t-1)||: the weights the workers train with, off by how many steps;
- each parameter's own ||W - V|| / ||W|| at the end of the high rate and at the end.
"""
import argparse
import sys
import time

import numpy as np


def mlp():
    from mxnet import gluon
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(300, activation="relu", in_units=784), gluon.nn.Dense(100, activation="relu", in_units=300),
            gluon.nn.Dense(10, in_units=100))
    return net


def names_of(trainer):
    """Parameter names by key: key i is the Trainer's parameter i (gluon sorts them; not the
    order of collect_params, which labelled biases as weights here before)."""
    return [p.name for p in trainer._params]


def global_flat(kv):
    """Every parameter's W from the servers, flattened in key order."""
    return np.concatenate([kv.global_weights(k).asnumpy().reshape(-1) for bset in kv.bucket_sets for k in bset.keys])


def _v_of(bset, key, v):
    """Parameter `key`'s V, flat, from its bucket set's V (its slices may be several pieces)."""
    out = np.empty(int(np.prod(bset.shapes[key])), np.float32)
    for s in bset.slots:
        if s.key == key:
            out[s.begin:s.end] = v[s.offset:s.offset + s.size]
    return out


def v_flat(kv):
    """The workers' V, flattened in the same order as global_flat."""
    return np.concatenate([_v_of(bset, key, bset.copy.values()) for bset in kv.bucket_sets for key in bset.keys])


def lag_per_parameter(kv, names):
    """{name: ||W - V|| / ||W||} for every parameter (W pulled from the server, V the workers')."""
    out = {}
    for bset in kv.bucket_sets:
        v = bset.copy.values()
        for key in bset.keys:
            w = kv.global_weights(key).asnumpy().reshape(-1)
            norm = float(np.linalg.norm(w))
            out[names[key]] = float(np.linalg.norm(w - _v_of(bset, key, v))) / norm if norm else 0.0
    return out


def run(algorithm, pull, steps, every, batch=64, seed=0, resync_every=0):
    import mxnet as mx
    from mxnet import autograd, gluon

    import cdsgd_mx
    from cdsgd_mx.experiments.data import load_mnist
    xtr, ytr, xte, yte, _ = load_mnist()
    xtr, xte = xtr.reshape(-1, 784), xte.reshape(-1, 784)
    mx.random.seed(seed)
    rng = np.random.RandomState(seed)
    net = mlp()
    net.initialize(mx.init.Xavier())
    params = net.collect_params()
    cut = int(0.6 * steps)
    sched = mx.lr_scheduler.MultiFactorScheduler(step=[cut], factor=0.1)
    trainer = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4,
                                               "lr_scheduler": sched},
                               kvstore="local", algorithm=algorithm, k=4, warmup_steps=20, pull_compression=pull,
                               resync_every=resync_every)
    kv = trainer.kvstore
    names = names_of(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    curve, at_cut = [], None
    for t in range(steps):
        idx = rng.randint(0, len(xtr), batch)
        data, label = mx.nd.array(xtr[idx]), mx.nd.array(ytr[idx])
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(batch)
        if pull == "2bit" and (t + 2) % every == 0:
            before = global_flat(kv)  # W one step before the reading: the size of one update
        if pull == "2bit" and (t + 1) % every == 0:
            kv.wait_all()
            w, v = global_flat(kv), v_flat(kv)
            step = float(np.linalg.norm(w - before))
            behind = float(np.dot(w - v, w - before)) / step ** 2 if step else float("nan")
            curve.append((t + 1, float(np.linalg.norm(w - v) / np.linalg.norm(w)),
                          float(np.linalg.norm(w - v)) / step if step else float("nan"), behind))
        if pull == "2bit" and t + 1 == cut:
            at_cut = lag_per_parameter(kv, names)
    kv.wait_all()
    end = lag_per_parameter(kv, names) if pull == "2bit" else None
    pred = net(mx.nd.array(xte)).argmax(axis=1).asnumpy()
    held = float((pred == yte).mean())  # the weights the worker holds
    for key, name in enumerate(names):  # W: the servers' weights
        params[name].set_data(kv.global_weights(key))
    pred = net(mx.nd.array(xte)).argmax(axis=1).asnumpy()
    return held, curve, at_cut, end, float((pred == yte).mean())


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.experiments.pull_lag", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--every", type=int, default=50, help="steps between two readings of ||W - V|| / ||W||")
    ap.add_argument("--algorithms", default="cdsgd,bitsgd")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds: one way and both ways paired by seed")
    ap.add_argument("--resync-every", type=int, default=0, help="BIT-SGD's re-sync period (0: never, the default)")
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error("--seeds must be comma-separated integers, got %r" % args.seeds)
    for algorithm in args.algorithms.split(","):
        diffs = []
        for seed in seeds:
            results = {}
            for pull in ("none", "2bit"):
                began = time.time()
                print("%s, seed %d, pull %s: %d steps ..." % (algorithm, seed, pull, args.steps), end=" ", flush=True)
                results[pull] = run(algorithm, pull, args.steps, args.every, seed=seed, resync_every=args.resync_every)
                print("%.2f%% (the servers' W: %.2f%%; %.0f s)" % (100 * results[pull][0], 100 * results[pull][4],
                                                                    time.time() - began), flush=True)
            diffs.append(100 * (results["2bit"][0] - results["none"][0]))
            if seed == seeds[0]:
                first = results
        acc1, acc2 = first["none"][0], first["2bit"][0]
        _, curve, at_cut, end, _ = first["2bit"]
        print("%s, seed %d: test accuracy one way %.2f%%, both ways %.2f%% (%+.2f points)"
              % (algorithm, seeds[0], 100 * acc1, 100 * acc2, 100 * (acc2 - acc1)))
        print("  ||W - V|| / ||W|| over the model, by step: " + ", ".join("%d: %.4f" % c[:2] for c in curve))
        print("  ||W - V|| in updates (/ ||W(t) - W(t-1)||), by step: " + ", ".join("%d: %.1f" % (c[0], c[2])
                                                                                     for c in curve))
        print("  V behind W along the last update, in updates (<W - V, dW> / ||dW||^2; < 0: ahead), by step: "
              + ", ".join("%d: %+.2f" % (c[0], c[3]) for c in curve))
        print("  per parameter, at the rate cut and at the end:")
        for name in end:
            print("    %-40s %.4f   %.4f" % (name, at_cut[name] if at_cut else float("nan"), end[name]))
        if len(seeds) > 1:
            print("%s: both ways minus one way, paired by seed (points): %s; mean %+.2f, std %.2f"
                  % (algorithm, ", ".join("%+.2f" % d for d in diffs), np.mean(diffs), np.std(diffs, ddof=1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Iteration time of S-SGD, BIT-SGD, OD-SGD and CD-SGD side by side, on real processes.

    python -m cdsgd_mx.bench.overlap [--bandwidth 1gbit] [--workers 2] [--params 2e6]
        [--model mlp|alexnet|vgg16|inception_bn|resnet50|...] [--iterations 60]
        [--algorithms ssgd,bitsgd,odsgd,cdsgd] [--trace-dir DIR] [--json]

A model (default: a synthetic MLP of about --params weights; or one of the paper's models by
name) on synthetic inputs (time does not depend on the values) trains for --iterations steps per algorithm under the launcher, optionally behind an
emulated link. Each worker measures:
  compute_ms  forward/backward alone (tau), in a phase before training, waited to the end;
  iter_ms     mean time between step() returns after warm-up (the iteration time);
Communication alone is measured by two more jobs that push zero gradients without any
forward/backward (ssgd: phi, the fp32 round; bitsgd: psi + delta, the 2-bit round); CD-SGD's mean
communication per step is ((k-1)(psi+delta) + phi)/k (eq. 6 averaged over k steps), and the
summary checks the issue's goal: CD-SGD within 15% of max(compute, comm) and faster
than BIT-SGD and S-SGD.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ALGORITHMS = ["ssgd", "bitsgd", "odsgd", "cdsgd"]


def mlp(params, in_units=512):
    """Three square-ish dense layers holding about `params` weights."""
    from mxnet.gluon import nn
    hidden = max(16, int((params / 2) ** 0.5))
    net = nn.HybridSequential()
    net.add(nn.Dense(hidden, in_units=in_units, activation="relu"),
            nn.Dense(hidden, in_units=hidden, activation="relu"),
            nn.Dense(10, in_units=hidden))
    return net, in_units


def worker(args):
    from cdsgd_mx.server import serve_if_not_worker
    serve_if_not_worker()
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon
    import cdsgd_mx

    if args.model == "mlp":
        net, in_units = mlp(args.params)
        shape, classes = (in_units,), 10
    else:
        from .. import models
        shape = models.INPUT_SHAPES[args.model]
        classes = 1000 if shape[-1] == 224 else 10
        net = models.build(args.model, classes)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1,) + shape))  # deferred shapes known before the trainer sees the parameters
    net.hybridize()
    trace = os.path.join(args.trace_dir, "%s.json" % args.algorithm) if args.trace_dir else "/dev/null"
    trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                               algorithm=args.algorithm, k=args.k, warmup_steps=args.warmup,
                               threshold=args.threshold, trace=trace)
    kv = trainer.kvstore
    x = mx.nd.array(np.random.RandomState(kv.rank).randn(args.batch, *shape).astype(np.float32))
    y = mx.nd.array(np.random.RandomState(kv.rank).randint(0, classes, args.batch).astype(np.float32))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def fwd_bwd(step):
        with kv.tracer.span("forward/backward", step=step):
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
        return loss

    # tau: forward/backward alone, each waited to its end
    fwd_bwd(-1)
    mx.nd.waitall()
    t0 = time.perf_counter()
    for _ in range(args.compute_iterations):
        fwd_bwd(-1)
        mx.nd.waitall()
    compute_ms = 1e3 * (time.perf_counter() - t0) / args.compute_iterations

    stamps = []
    if args.comm_only:  # no forward/backward: each step is one round of communication
        for p in net.collect_params().values():
            if p.grad_req != "null":  # BatchNorm's running statistics have no gradient
                p.grad()[:] = 0
        for it in range(args.iterations):
            trainer.step(args.batch, ignore_stale_grad=True)
            mx.nd.waitall()
            stamps.append(time.perf_counter())
    for it in range(0 if args.comm_only else args.iterations):
        loss = fwd_bwd(it)
        trainer.step(args.batch)
        # as a training loop that logs its loss does: waits for forward(t), hence for the
        # weights it read (W(t) for ssgd/bitsgd, the local update from W(t-1) for odsgd/cdsgd)
        loss.wait_to_read()
        stamps.append(time.perf_counter())
    trainer.wait_all()
    first = min(args.warmup + 2, args.iterations // 2)
    iter_ms = 1e3 * (stamps[-1] - stamps[first]) / (len(stamps) - 1 - first)
    if kv.rank == 0:
        if args.trace_dir:
            trainer.save_trace()
        print("RESULT " + json.dumps({
            "algorithm": args.algorithm, "model": args.model, "batch": args.batch,
            "workers": kv.num_workers, "params": sum(
                int(np.prod(p.shape)) for p in net.collect_params().values()),
            "compute_ms": compute_ms, "iter_ms": iter_ms,
            "bytes_per_step": kv.bytes_pushed / args.iterations}), flush=True)


def leader(args):
    results = {}
    jobs = [(a, False) for a in args.algorithms.split(",")] + [("ssgd", True), ("bitsgd", True)]
    for alg, comm_only in jobs:
        cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", str(args.workers), "-s", str(args.servers),
               "--timeout", str(args.timeout)]
        if args.bandwidth:
            cmd += ["--bandwidth", args.bandwidth]
        cmd += ["--", sys.executable, "-m", "cdsgd_mx.bench.overlap", "--worker", "--algorithm", alg]
        if comm_only:
            cmd.append("--comm-only")
        for name in ("model", "params", "iterations", "batch", "k", "warmup", "threshold", "compute_iterations"):
            cmd += ["--" + name.replace("_", "-"), str(getattr(args, name))]
        if args.trace_dir and not comm_only:
            cmd += ["--trace-dir", os.path.abspath(args.trace_dir)]
        name = alg + (" (communication only)" if comm_only else "")
        if not args.json:
            print("running %s ..." % name, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [l for l in proc.stdout.splitlines() if "RESULT " in l]
        if proc.returncode != 0 or not lines:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
            sys.exit("bench.overlap: the %s job failed (exit code %d)" % (alg, proc.returncode))
        key = alg + ("_comm" if comm_only else "")
        results[key] = json.loads(lines[0].split("RESULT ", 1)[1])
        if args.json:
            print(json.dumps(dict(results[key], job=key, bandwidth=args.bandwidth or "loopback")), flush=True)
    phi, psi = results.pop("ssgd_comm")["iter_ms"], results.pop("bitsgd_comm")["iter_ms"]
    comm_cd = ((args.k - 1) * psi + phi) / args.k  # the paper's eq. 6 averaged over k steps
    if args.json:
        print(json.dumps({"phi_ms": phi, "psi_plus_delta_ms": psi, "cdsgd_comm_ms": comm_cd}), flush=True)
        return results
    print("\nlink: %s, %d workers, %d server(s), %d parameters, batch %d, k=%d" % (
        args.bandwidth or "unshaped loopback", args.workers, args.servers,
        next(iter(results.values()))["params"], args.batch, args.k))
    print("communication per step, measured alone: fp32 round (phi) %.1f ms, 2-bit round (psi + delta) %.1f ms;"
          " CD-SGD mean ((k-1)(psi+delta) + phi)/k = %.1f ms" % (phi, psi, comm_cd))
    from .. import timemodel
    tau = sum(r["compute_ms"] for r in results.values()) / len(results)
    predicted = timemodel.predict(timemodel.calibrate(tau, phi, psi), args.k)
    print("%-8s %12s %16s %12s %16s" % ("algorithm", "iter ms", "model (eqs 2-7)", "compute ms", "pushed KB/step"))
    for alg, r in results.items():
        print("%-8s %12.1f %16.1f %12.1f %16.1f" % (alg, r["iter_ms"], predicted[alg], r["compute_ms"],
                                                   r["bytes_per_step"] / 1e3))
    if "cdsgd" in results:
        cd = results["cdsgd"]
        bound = max(cd["compute_ms"], comm_cd)
        print("cdsgd iteration / max(compute, communication) = %.2f (goal <= 1.15)" % (cd["iter_ms"] / bound))
        for other in ("bitsgd", "ssgd"):
            if other in results:
                print("cdsgd / %s iteration time = %.2f (goal < 1)" % (other, cd["iter_ms"] / results[other]["iter_ms"]))
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.overlap", description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--algorithm", default="cdsgd", help=argparse.SUPPRESS)
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--bandwidth", default=None, help="emulated link, tc syntax (e.g. 1gbit); default: none")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--params", type=float, default=2e6, help="weights of the MLP (--model mlp)")
    ap.add_argument("--model", default="mlp", help="mlp (default) or a model of cdsgd_mx.models")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--compute-iterations", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--trace-dir", default=None, help="write each algorithm's rank-0 chrome trace here")
    ap.add_argument("--comm-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.params = int(args.params)
    from .. import models
    if args.model != "mlp" and args.model not in models.INPUT_SHAPES:
        ap.error("--model must be mlp or one of %s, got %r" % (", ".join(models.INPUT_SHAPES), args.model))
    bad = [a for a in args.algorithms.split(",") if a not in ALGORITHMS]
    if bad:
        ap.error("--algorithms: %s not one of %s" % (", ".join(bad), ", ".join(ALGORITHMS)))
    for name in ("workers", "servers", "params", "iterations", "batch", "k"):
        if getattr(args, name) < 1:
            ap.error("--%s must be >= 1" % name)
    if args.iterations <= args.warmup + 4:
        ap.error("--iterations must exceed --warmup by at least 5")
    if args.worker:
        worker(args)
    else:
        leader(args)


if __name__ == "__main__":
    main()

"""bench.comm's worker: one job's rounds, run in each worker process of the job (the launcher
starts `python -m cdsgd_mx.bench.comm --worker ...`); prints its times as a RESULT line."""
import json
import os
import statistics
import time

from cdsgd_mx.bench import mark_fresh
from cdsgd_mx.bench.comm_jobs import trace_path
from cdsgd_mx.bench.comm_systems import (ALTERNATING, OPTIMIZER, OURS, OUR_JOBS, PAIRED, PER_CALL, algorithm_of,
                                         ROUND_NAMES, WARMUP_ROUNDS, build_model)

BATCH = 32            # only rescales the gradients (rescale_grad = 1/batch)
FRESH_POOL = 3        # --grads fresh: gradient draws taken in turn, one per round


def worker(args):
    """Warm-up rounds, then args.rounds timed ones of args.system on args.models; prints this
    worker's RESULT line (a server or scheduler of our jobs, started with the same command, serves)."""
    if args.system in OUR_JOBS:
        from cdsgd_mx.server.node import serve_if_not_worker
        serve_if_not_worker()
    import mxnet as mx
    import numpy as np
    net = build_model(args.models)
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    rng = np.random.RandomState(1 + int(os.environ.get("CDSGD_LAUNCH_INDEX", "0")))
    draw = lambda: [mx.nd.array(0.1 * rng.randn(*p.shape).astype(np.float32)) for p in params]
    pool = [draw() for _ in range(FRESH_POOL if args.grads == "fresh" else 1)]
    grads = list(pool[0])  # this round's gradients (stock_2bit pushes them; the Trainers read p.grad())
    trainer = kv = None
    if args.system == "stock_2bit":
        kv = mx.kv.create("dist_sync")
        kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})
        kv.set_optimizer(mx.optimizer.create("sgd", rescale_grad=1.0 / BATCH, **OPTIMIZER))
        data = [p.data() for p in params]
        for i, d in enumerate(data):
            kv.init(i, d)

        def one_round():
            for i, g in enumerate(grads):
                kv.push(i, g, priority=-i)
            for i, d in enumerate(data):
                kv.pull(i, out=d, priority=-i)
            wait()
    else:
        if args.system == "stock_fp32":
            trainer = mx.gluon.Trainer(net.collect_params(), "sgd", dict(OPTIMIZER), kvstore="dist_sync")
        else:
            import cdsgd_mx
            extra = {"bucket_size": args.bucket_size} if args.bucket_size else {}
            if args.system.endswith("_2bit") or args.system == "paired_pull":
                extra.update(pull_compression="2bit", resync_every=1 << 30)  # bitsgd: only step 0 re-syncs
            if args.system == "paired_sum":  # the buckets get rows keys; even rounds leave them alone
                extra["fp32_sum"] = "rank"
            algorithm = algorithm_of(args.system)
            if args.trace:
                extra["trace"] = trace_path(args.trace, args.models, args.link, args.system,
                                            os.environ.get("CDSGD_LAUNCH_INDEX", "0"))
            if args.system in PER_CALL:  # the door of Module and gluon.Trainer: one parameter per call
                store = cdsgd_mx.CDSGD(algorithm=args.system.replace("_percall", ""), warmup_steps=0, k=5, **extra)
                trainer = mx.gluon.Trainer(net.collect_params(), "sgd", dict(OPTIMIZER), kvstore=store)
            else:
                trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", dict(OPTIMIZER), kvstore="dist_sync",
                                           algorithm=algorithm, warmup_steps=0, k=5, **extra)
            if args.system in PAIRED:
                from cdsgd_mx.worker.schedule import InterleavedSchedule
                trainer.kvstore.schedule = InterleavedSchedule(k=5)
        for p, g in zip(params, grads):
            p.grad()[:] = g  # once: a step leaves the gradients as they are

        def one_round():
            if args.system in ALTERNATING:
                alternate(trainer.kvstore, args.system)
            mark_fresh(trainer)  # the gradients are written by hand, or kept from the last step
            trainer.step(BATCH)
            wait()

    weights = [p.data() for p in params]

    def wait():
        """The end of a round: with fixed gradients, every operation on the engine; with fresh
        ones, what the next forward would wait for, the weights."""
        if args.grads == "fresh":
            for w in weights:
                w.wait_to_read()
        else:
            mx.nd.waitall()

    def load(r):
        """Before round r, untimed: its gradients in place and written, as backward leaves them
        (fresh: the next of FRESH_POOL draws; fixed: nothing, the same gradients every round)."""
        if args.grads != "fresh":
            return
        grads[:] = pool[r % len(pool)]
        if kv is None:
            for p, g in zip(params, grads):
                g.copyto(p.grad())
        for g in ([p.grad() for p in params] if kv is None else grads):
            g.wait_to_read()

    pushed = lambda: trainer._kvstore.bytes_pushed if args.system in OUR_JOBS else 0
    for r in range(WARMUP_ROUNDS):
        load(r)
        one_round()
    if args.system.startswith("cdsgd"):
        trainer.kvstore.wait_all()
        mx.nd.waitall()
    b0, times = pushed(), []
    if args.system in ALTERNATING:  # WARMUP_ROUNDS is even: the timed rounds start with the even kind
        kinds = {False: [], True: []}
        for t in range(2 * args.rounds):
            load(t)
            t0 = time.perf_counter()
            one_round()
            kinds[t % 2 == 1].append(1e3 * (time.perf_counter() - t0))
        even_ms, odd_ms = statistics.median(kinds[False]), statistics.median(kinds[True])
        rank = trainer._kvstore.rank
        names = ROUND_NAMES[args.system]
        if args.trace:
            trainer.save_trace()
        print("RESULT " + json.dumps({"rank": rank, "ms": odd_ms, "even_ms": even_ms, "odd_ms": odd_ms,
                                      names[0] + "_ms": even_ms, names[1] + "_ms": odd_ms, "ratio": odd_ms / even_ms,
                                      "bytes_per_round": (pushed() - b0) / (2 * args.rounds)}), flush=True)
        return
    if args.system.startswith("cdsgd"):  # delayed: back-to-back steps, waited once at the end
        t0 = time.perf_counter()
        for r in range(args.rounds):
            load(r)  # (timed here: backward writes the gradients while the last round is in flight)
            mark_fresh(trainer)  # the gradients are written by hand, or kept from the last step
            trainer.step(BATCH)
        trainer.kvstore.wait_all()
        mx.nd.waitall()
        ms = 1e3 * (time.perf_counter() - t0) / args.rounds
    else:
        for r in range(args.rounds):
            load(r)
            t0 = time.perf_counter()
            one_round()
            times.append(1e3 * (time.perf_counter() - t0))
        ms = statistics.median(times)
    rank = kv.rank if kv is not None else trainer._kvstore.rank
    if args.trace and args.system in OUR_JOBS:
        trainer.save_trace()
    print("RESULT " + json.dumps({"rank": rank, "ms": ms, "round_ms": times,
                                  "bytes_per_round": (pushed() - b0) / args.rounds if args.system in OURS else None}),
          flush=True)


def alternate(ours, system):
    """Ready the next round of a job that times two kinds of round in turn (ROUND_NAMES: the
    even steps' kind, then the odd steps')."""
    odd = ours.steps_done % 2 == 1
    if system == "paired_sum":  # fp32 to W (summed as it arrives), or as rows (summed in rank order)
        ours.rounds.fp32_rows = odd
    else:  # paired: S-SGD's round, then BIT-SGD's; paired_pull: BIT-SGD's one way, then both ways
        ours.schedule.begin(ours.steps_done, *PAIRED[system][odd])

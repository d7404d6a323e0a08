"""bench.comm's worker: one job's rounds, run in each worker process of the job (the launcher
starts `python -m cdsgd_mx.bench.comm --worker ...`); prints its times as a RESULT line."""
import json
import os
import statistics
import time

from cdsgd_mx.bench import mark_fresh
from cdsgd_mx.bench.comm_jobs import trace_path
from cdsgd_mx.bench.comm_systems import (ALTERNATING, K, OPTIMIZER, OURS, OUR_JOBS, PAIRED, PER_CALL, algorithm_of,
                                         ROUND_NAMES, WARMUP_ROUNDS, build_model,
                                         times_fp32_rounds)

BATCH = 32            # only rescales the gradients (rescale_grad = 1/batch)
FRESH_POOL = 3        # --grads fresh: gradient draws taken in turn, one per round
MAX_WARMUP_ROUNDS = 80  # the part choice's trials: 7 fp32 steps (13 with a second look), a CD-SGD correction every 5th round


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
                store = cdsgd_mx.CDSGD(algorithm=args.system.replace("_percall", ""), warmup_steps=0, k=K, **extra)
                trainer = mx.gluon.Trainer(net.collect_params(), "sgd", dict(OPTIMIZER), kvstore=store)
            else:
                trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", dict(OPTIMIZER), kvstore="dist_sync",
                                           algorithm=algorithm, warmup_steps=0, k=K, **extra)
            if args.system in PAIRED:
                from cdsgd_mx.worker.schedule import InterleavedSchedule
                trainer.kvstore.schedule = InterleavedSchedule(k=K)
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
    warmup = warm_up(trainer, args.system, load, one_round)
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
                                      "warmup_rounds": warmup, "way": way_of(trainer, args.system),
                                      "trials": trials_of(trainer, args.system),
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
    print("RESULT " + json.dumps({"rank": rank, "ms": ms, "round_ms": times, "warmup_rounds": warmup,
                                  "way": way_of(trainer, args.system), "trials": trials_of(trainer, args.system),
                                  "bytes_per_round": (pushed() - b0) / args.rounds if args.system in OURS else None}),
          flush=True)


def warm_up(trainer, system, load, one_round):
    """The untimed rounds: WARMUP_ROUNDS, then more until the job's fp32 rounds have chosen parts
    or whole buckets (worker/part_choice.py): its trials are its first fp32 steps, which for
    CD-SGD (a correction every k-th step) run far beyond WARMUP_ROUNDS, and a timed round among
    them would time both ways. Every worker sees the choice made at the same step (its trials'
    times are shared), so every worker runs as many. Returns how many ran."""
    import mxnet as mx
    ours = lambda: trainer._kvstore if system in OUR_JOBS else None  # (gluon's Trainer makes it at its first step)
    pending = lambda: times_fp32_rounds(system) and ours().part_choice_pending  # (BIT-SGD here: no fp32 round)
    r = 0
    while r < WARMUP_ROUNDS or (pending() and r < MAX_WARMUP_ROUNDS):
        for _ in range(2 if system in ALTERNATING else 1):  # (an even count: the timed rounds start with the even kind)
            load(r)
            one_round()
            r += 1
        if ours() is not None:  # (a delayed step's round is still in flight, its choice perhaps not yet made)
            ours().wait_all()
            mx.nd.waitall()
    if pending():
        raise RuntimeError("the part choice was not made in %d untimed rounds" % r)
    return r


def way_of(trainer, system):
    """How the job's timed fp32 rounds went: 'parts' or 'whole buckets' (part_choice.py); None
    where it times none, or its buckets have no parts."""
    return trainer._kvstore.fp32_way if times_fp32_rounds(system) else None


def trials_of(trainer, system):
    """What the part choice's trials measured (ms: each way's median step at its slowest
    worker, [parts, whole]; the first look's too where a second one decided); None where the
    job tried nothing."""
    choice = trainer._kvstore.rounds.choice if way_of(trainer, system) else None
    if choice is None or choice.medians is None:
        return None
    ms = lambda medians: [round(1e3 * m, 2) for m in medians]
    return {"ms": ms(choice.medians), "first_look_ms": ms(choice.first_look) if choice.first_look else None}


def alternate(ours, system):
    """Ready the next round of a job that times two kinds of round in turn (ROUND_NAMES: the
    even steps' kind, then the odd steps')."""
    odd = ours.steps_done % 2 == 1
    if system == "paired_sum":  # fp32 to W (summed as it arrives), or as rows (summed in rank order)
        ours.rounds.fp32_rows = odd
    else:  # paired: S-SGD's round, then BIT-SGD's; paired_pull: BIT-SGD's one way, then both ways
        ours.schedule.begin(ours.steps_done, *PAIRED[system][odd])

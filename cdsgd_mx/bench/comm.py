"""One communication round of MXNet fp32, MXNet 2-bit, S-SGD, BIT-SGD and CD-SGD side by side.

    python -m cdsgd_mx.bench.comm [--bandwidth 1gbit,10gbit,none] [--models inception_bn,resnet20,alexnet]
        [--network shared,hosts] [--workers 2] [--servers 1] [--rounds 30]
        [--systems stock_fp32,stock_2bit,ssgd,bitsgd,cdsgd,bitsgd_2bit,cdsgd_2bit]
        [--bucket-size N] [--timeout SEC] [--json PATH] [--trace DIR]

Tells whether compression pays on a link. For each model and link, each system runs as its own
job under the launcher. Two network models (--network):
  shared  scheduler, servers and workers on this machine's loopback; a link other than `none` is
          one tc-shaped loopback that every flow, both directions and every server share
  hosts   every server and worker on an emulated host of its own (cdsgd_mx.cluster.emulate),
          each with a NIC of the link's rate in each direction (`none`: unshaped veths); the
          bottleneck is then the servers' NICs, each taking W pushes in and sending W pulls out
          at once, as on a cluster. Shown as LINK/hosts. A round is
communication alone: every gradient pushed (random values drawn once; no forward/backward),
the servers' SGD with momentum applied, the new weights pulled and waited for (--grads fresh:
a new gradient draw each round, and the round waited for as the next forward waits for it, on
the weights; fixed, the default: one draw, and every engine operation waited for). After a few
untimed rounds (registration, warm-up), --rounds rounds are timed on every worker; the figure
is the largest over the workers. MXNET_KVSTORE_BIGARRAY_BOUND=1000000 for every job.

Columns (ms per round; arrays: the model's parameter arrays with a gradient, pushed each round):
  stock_fp32  gluon.Trainer, kvstore='dist_sync', on MXNet's own server: median of waited steps
  stock_2bit  MXNet's 2-bit compression (threshold 0.5) on its own server, a raw kvstore driven
              as Module did (push every key, pull every key, wait): median
  ssgd, bitsgd  cdsgd_mx.Trainer on the project's server: median of waited steps
  cdsgd       cdsgd_mx.Trainer, k=5, no warm-up; its step returns before its communication ends
              (the next step waits for it), so this is the mean time per step over --rounds
              back-to-back steps, waited to the end once (take --rounds a multiple of k)
  bitsgd_2bit BIT-SGD with 2 bits both ways (pull_compression='2bit'): every timed round pulls
              the codes of W - V (no re-sync among them): median of waited steps
  cdsgd_2bit  CD-SGD with 2 bits both ways, k=5 (its corrections pull fp32): as cdsgd
  paired      (not in the default list) S-SGD's and BIT-SGD's rounds alternating in one job: a
              BIT-SGD Trainer whose even rounds push fp32 (the same push and pull as ssgd's), so
              both are timed under the same processes, placement and load; --rounds of each.
              Printed under the table: both medians and their ratio, the worker with the larger
              ratio (the conservative figure: the larger of two noisy ratios is biased up), and the
              mean of the workers' ratios. Separate jobs differ by up to 30% in speed on a shared
              machine; one job has no such spread.
  paired_pull (not in the default list) the same with BIT-SGD's one-way round (fp32 pull) on even
              rounds and its both-ways round (2-bit pull) on odd ones, in one job: a BIT-SGD
              Trainer with pull_compression='2bit' whose even rounds pull W (the servers then copy
              V := W, which today's round does not: the one-way figure is a little high)
  paired_sum  (not in the default list) S-SGD's round with the servers' fp32 sum in arrival order
              (pushes to the weight keys) on even rounds and in rank order (fp32_sum='rank': rows
              keys, the pull after their acknowledgement) on odd ones, in one job: an S-SGD Trainer
              with fp32_sum='rank' whose even rounds push to W (so both use its buckets, which
              'rank' may cut smaller: protocol.max_chunk); printed as paired, rank/arrival
  ssgd_percall, bitsgd_percall (not in the default list) gluon.Trainer given our store
              (cdsgd_mx.CDSGD): one pushpull per parameter, as Module and fit.py scripts hand a
              step over, collected into buckets by the store (worker/fusion.py); printed under the
              table beside the Trainer's own figure from its job (run ssgd / bitsgd too)
  fp32 bound  W * (4 B pushed + 4 B pulled) * values / link rate: what the wire alone needs
  2bit bound  W * (0.25 B pushed + 4 B pulled) * values / link rate (no bound for `none`)
  both bound  W * (0.25 B pushed + 0.25 B pulled) * values / link rate: 2 bits both ways
              (LINK/hosts: max(W / S, 1) * max(pushed, pulled) B * values / link rate, the
              busiest NIC's larger direction: the two directions run at once)
  a/b         ratio of the two systems' times (< 1: a is faster)
Bytes pushed per round per worker by the project's systems are printed under the table.
--trace DIR: each worker of the project's jobs writes a chrome trace of its timed rounds to
DIR/<model>-<link>-<system>-rank<r>.json (Trainer(trace=...): docs/design.md), and the median time per
round of each span (quantize, push codes, decode pull, ...) is printed under the table.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from cdsgd_mx.cluster.shaping import RATE_RE, netns_prelude, netns_unavailable, rate_bits
from cdsgd_mx.cluster import emulate
from cdsgd_mx.experiments import provenance
from cdsgd_mx.bench import mark_fresh
from cdsgd_mx.wire import stages

SYSTEMS = ["stock_fp32", "stock_2bit", "ssgd", "bitsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit"]
EXTRA_SYSTEMS = ["paired", "paired_pull", "paired_sum", "ssgd_percall", "bitsgd_percall"]  # by name; under the table
OURS = ("ssgd", "bitsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit")
PER_CALL = ("ssgd_percall", "bitsgd_percall")  # gluon.Trainer with our store: one pushpull per parameter, as Module
OUR_JOBS = OURS + ("paired", "paired_pull", "paired_sum") + PER_CALL  # jobs on the project's server
PAIRED = {"paired": (("ssgd", "none"), ("bitsgd", "none")),  # (even round, odd round): (algorithm, pull)
          "paired_pull": (("bitsgd", "none"), ("bitsgd", "2bit"))}
ALTERNATING = tuple(PAIRED) + ("paired_sum",)  # jobs whose even and odd rounds are timed apart
ALGORITHM_OF = {"paired": "bitsgd", "paired_pull": "bitsgd", "paired_sum": "ssgd"}  # (else the system's name)
ROUND_NAMES = {"paired": ("ssgd", "bitsgd"), "paired_pull": ("bitsgd", "bitsgd_2bit"),  # (even, odd)
               "paired_sum": ("arrival", "rank")}
BATCH = 32            # only rescales the gradients (rescale_grad = 1/batch)
WARMUP_ROUNDS = 4     # untimed rounds first: registration, buffers, connections
OPTIMIZER = {"learning_rate": 0.01, "momentum": 0.9}
FRESH_POOL = 3        # --grads fresh: gradient draws taken in turn, one per round
RATIOS = [("bitsgd", "stock_2bit"), ("ssgd", "stock_fp32"), ("bitsgd", "ssgd"), ("bitsgd_2bit", "bitsgd"),
          ("bitsgd_2bit", "stock_2bit")]


def build_model(name):
    """The model, initialized, with every deferred shape known."""
    import mxnet as mx
    from cdsgd_mx.experiments import models
    shape = models.INPUT_SHAPES[name]
    net = models.build(name, 1000 if shape[-1] == 224 else 10)
    net.initialize(mx.init.Xavier())
    # training-mode forward: an inference forward lets MKL-DNN reorder conv weights in place,
    # which MXNet's dist kvstore cannot send (empty pushes, 'init N first' on the server)
    with mx.autograd.record():
        net(mx.nd.zeros((1,) + shape))
    return net


def model_info(name):
    params = list(build_model(name).collect_params().values())
    trained = [p for p in params if p.grad_req != "null"]
    size = lambda ps: sum(int(p.data().size) for p in ps)
    return {"arrays": len(params), "values": size(params), "trained_arrays": len(trained),
            "trained_values": size(trained)}


# -- worker: one job's rounds ---------------------------------------------------------------
def worker(args):
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
            algorithm = ALGORITHM_OF.get(args.system, args.system.replace("_2bit", ""))
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


# -- leader: jobs, table, JSON --------------------------------------------------------------
def netns_problem(link):
    """None if the launcher can shape `link` here, else why not (the launcher's own check, then
    its shaping commands tried once)."""
    why = netns_unavailable()
    if why:
        return why
    script = netns_prelude(argparse.Namespace(bandwidth=link, latency=None))
    proc = subprocess.run(["unshare", "-n", "bash", "-c", script], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return "cannot create a shaped network namespace: %s" % (lines[-1] if lines else "exit %d" % proc.returncode)
    return None


def failure_reason(proc):
    """One line saying why a job failed: the last exception line, else the launcher's word."""
    lines = [l.strip() for l in (proc.stdout + "\n" + proc.stderr).splitlines() if l.strip()]
    for pattern in (r"\b\w*(Error|Exception|Interrupt)\b:", r"^launch \|", r"."):
        hits = [l for l in lines if re.search(pattern, l)]
        if hits:
            m = re.match(r"^(\w+(?: \d+)?) \| (.*)$", hits[-1])  # the launcher's "worker 1 | " prefix
            where, text = (m.group(1) + ", ", m.group(2)) if m else ("", hits[-1])
            return "%s (%sexit %d)" % (text[:300], where, proc.returncode)
    return "exit code %d" % proc.returncode


def split_link(label):
    """'1gbit' -> ('1gbit', 'shared'); '1gbit/hosts' -> ('1gbit', 'hosts')."""
    link, _, network = label.partition("/")
    return link, network or "shared"


def run_job(args, model, label, system):
    py = sys.executable
    link, network = split_link(label)
    cmd = [py, "-m", "cdsgd_mx.launch", "-n", str(args.workers), "-s", str(args.servers),
           "--timeout", str(args.timeout)]
    if network == "hosts":  # each server and worker on a host of its own
        cmd += ["--emulate-hosts", str(args.workers + args.servers)] + (["--nic", link] if link != "none" else [])
    elif link != "none":
        cmd += ["--bandwidth", link]
    if system.startswith("stock"):
        cmd.append("--stock-server")
    cmd += ["--", py, "-m", "cdsgd_mx.bench.comm", "--worker", "--system", system, "--models", model,
            "--rounds", str(args.rounds), "--grads", args.grads]
    if args.bucket_size:
        cmd += ["--bucket-size", str(args.bucket_size)]
    if args.trace and system in OUR_JOBS:
        cmd += ["--trace", os.path.abspath(args.trace), "--link", label.replace("/", "-")]
    env = dict(os.environ, MXNET_KVSTORE_BIGARRAY_BOUND="1000000", CDSGD_PROOF_STATS="1", **{stages.ENV: "1"})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    found = [json.loads(l.split("RESULT ", 1)[1]) for l in proc.stdout.splitlines() if "RESULT " in l]
    if proc.returncode != 0 or len(found) < args.workers:
        return {"error": failure_reason(proc)}
    worst = max(found, key=lambda r: r.get("ratio", r["ms"]))
    result = {"ms": worst["ms"], "workers": sorted(found, key=lambda r: r["rank"]),
              "bytes_per_round": worst["bytes_per_round"]}
    if "ratio" in worst:  # paired: the worker with the larger ratio, and the mean over the workers
        result.update({k: v for k, v in worst.items() if k.endswith("_ms") or k in ("ratio", "rank")})
        result["mean_ratio"] = statistics.mean(r["ratio"] for r in found)
    if args.trace and system in OUR_JOBS:  # where the timed rounds went, worker by worker
        result["spans"] = [span_medians(trace_path(args.trace, model, label.replace("/", "-"), system, r["rank"]),
                                        WARMUP_ROUNDS)
                           for r in result["workers"]]
    found_stages = stages.reports(proc.stdout)
    if found_stages:  # the busiest server's compressed rounds, stage by stage: ms per round of the job
        rounds = WARMUP_ROUNDS + args.rounds * (2 if system in ALTERNATING else 1)
        busiest = max(found_stages, key=lambda st: sum(st["wall"].values()))
        result["server_stages"] = {name: {"ms": 1e3 * busiest["wall"][name] / rounds,
                                          "cpu_ms": 1e3 * busiest["cpu"][name] / rounds}
                                   for name in busiest["wall"]}
    proofs = [json.loads(l.split("PROOF_STATS ", 1)[1]) for l in proc.stdout.splitlines() if "PROOF_STATS " in l]
    if proofs:  # the servers' proof checks, per round of one bucket, measured in the job itself
        result["server_proof_us"] = 1e6 * sum(p["seconds"] for p in proofs) / sum(p["rounds"] for p in proofs)
        result["server_proof_cpu_us"] = 1e6 * sum(p["cpu_seconds"] for p in proofs) / sum(p["rounds"] for p in proofs)
    return result


def trace_path(folder, model, link, system, rank):
    return os.path.join(folder, "%s-%s-%s-rank%s.json" % (model, link, system, rank))


def span_medians(path, first_step):
    """{span name: median over steps >= first_step of its total ms in that step} from a worker's
    chrome trace (spans without a step are left out; "step" is the main thread's whole step)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    per_step, steps = {}, set()
    for e in events:
        step = e.get("args", {}).get("step")
        if e.get("ph") == "X" and step is not None and step >= first_step:
            by_step = per_step.setdefault(e["name"], {})
            by_step[step] = by_step.get(step, 0.0) + e["dur"] / 1e3
            steps.add(step)
    # a step without the span counts as 0 ms of it
    return {name: statistics.median([d.get(t, 0.0) for t in sorted(steps)]) for name, d in per_step.items()}


def print_spans(args, results):
    """Under the table (--trace): each traced job's spans, median ms per round, per worker."""
    lines = []
    for (model, link), res in results.items():
        for system, r in res.items():
            if isinstance(r, dict) and r.get("spans"):
                for w, spans in zip(r["workers"], r["spans"]):
                    order = sorted(spans.items(), key=lambda kv: -kv[1])
                    lines.append("  %s %s %s rank %d: %s" % (model, link, system, w["rank"], ", ".join(
                        "%s %.2f" % kv for kv in order)))
    if lines:
        print("\nwhere the rounds went (--trace %s): median ms per round of each span, timed rounds only" % args.trace)
        for line in lines:
            print(line)
    lines = ["  %s %s %s: %s" % (model, link, system, ", ".join(
        "%s %.2f (cpu %.2f)" % (name, st["ms"], st["cpu_ms"])
        for name, st in sorted(r["server_stages"].items(), key=lambda kv: -kv[1]["ms"])))
        for (model, link), res in results.items() for system, r in res.items()
        if isinstance(r, dict) and r.get("server_stages")]
    if lines:
        print("\nthe busiest server's compressed rounds, stage by stage: ms per round (wall, and its thread's CPU), "
              "mean over the job's rounds")
        for line in lines:
            print(line)


def proof_cost(model, workers, servers, bucket_size=None, repeats=200):
    """A worker's proof work per round (auth.py), by the project's own calls on the model's
    bucket plan, in process. Returns (path us, next us, buckets on the busiest server):
      path   on the round's critical path: before its pushes (the proofs are normally written
             already, after the round before) and, once the pulls have landed, reading the
             server's count of every bucket (the round is ready only then);
      next   writing the next round's proofs, in the communication thread once the round is
             ready, while the main thread goes on.
    The servers' part is measured inside the jobs themselves (CDSGD_PROOF_STATS)."""
    import mxnet as mx
    import numpy as np
    from cdsgd_mx.wire import auth, protocol
    from cdsgd_mx.worker import buckets as bucketing
    from cdsgd_mx.wire.proofs import WorkerProofs
    sizes = [int(p.data().size) for p in build_model(model).collect_params().values() if p.grad_req != "null"]
    plan = bucketing.plan(list(enumerate(sizes)), bucket_size or bucketing.DEFAULT_BUCKET_SIZE, workers, servers,
                          protocol.Keys(servers), bound=protocol.DEFAULT_BIGARRAY_BOUND)
    region = workers * auth.TAG_FLOATS
    bucketing.BucketSet(plan, {k: (n,) for k, n in enumerate(sizes)},  # gives each bucket its comm_buf views
                        {k: [mx.nd.zeros((n,))] for k, n in enumerate(sizes)}, False, region=region)
    # the worker side of the proofs as a DistBackend runs it, without a kvstore
    worker = WorkerProofs([auth.session_key(auth.new_secret().encode(), auth.new_nonce()) for _ in range(servers)],
                           0, workers)
    for b in plan:
        worker.seal(b)  # the first round's proofs (later ones: after each round)
    mx.nd.waitall()
    path_s = next_s = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        for b in plan:
            worker.seal(b)
        t1 = time.perf_counter()
        for b in plan:  # what the pull brings back after the weights: the server's new count
            b.comm_status._sync_copyfrom(np.array([worker.rounds.get(b.weight_key, 0) + 1], np.float32))
        mx.nd.waitall()
        t2 = time.perf_counter()
        if not all([worker.bucket_applied(b) for b in plan]):
            raise AssertionError("a round the benchmark counted was not seen as applied")
        t3 = time.perf_counter()
        for b in plan:
            worker.seal_next(b)
        t4 = time.perf_counter()
        path_s, next_s = path_s + (t1 - t0) + (t3 - t2), next_s + t4 - t3
    busiest = max(sum(1 for b in plan if b.server == s) for s in range(servers))
    return 1e6 * path_s / repeats, 1e6 * next_s / repeats, busiest


def server_proof_cost(model, workers, bucket_size=None, repeats=100):
    """A server's proof work per round of one bucket (checking every worker's tag of a dense
    round, writing the count), by the server's own calls in process on an idle core: the cost
    itself, without the waits for a core that the jobs above include on a small machine."""
    import mxnet as mx
    import numpy as np
    from cdsgd_mx.wire import auth, protocol
    from cdsgd_mx.worker import buckets as bucketing
    from cdsgd_mx.wire.proofs import ServerProofs
    sizes = [int(p.data().size) for p in build_model(model).collect_params().values() if p.grad_req != "null"]
    plan = bucketing.plan(list(enumerate(sizes)), bucket_size or bucketing.DEFAULT_BUCKET_SIZE, workers, 1,
                          protocol.Keys(1), bound=protocol.DEFAULT_BIGARRAY_BOUND)
    state = ServerProofs(auth.session_key(auth.new_secret().encode(), auth.new_nonce()), workers, drop=lambda why: False)
    merged = {b.weight_key: mx.nd.zeros((b.size + state.region,)) for b in plan}
    stored = {b.weight_key: mx.nd.zeros((b.size + state.region,)) for b in plan}
    seconds = 0.0
    for _ in range(repeats):
        for b in plan:  # the region of a round's sum: every worker's tag for the server's count
            tags = [auth.tag(state.session, "fp32", r, state.rounds.get(b.weight_key, 0), b.weight_key, b.size)
                    for r in range(workers)]
            merged[b.weight_key][b.size:]._sync_copyfrom(np.concatenate(tags))
        mx.nd.waitall()
        start = time.perf_counter()
        for b in plan:
            if not state.proven(b.weight_key, merged[b.weight_key], b.size, announced=True):
                raise AssertionError("the benchmark's round was not proven")
            state.count_round(b.weight_key, stored[b.weight_key], b.size)
        seconds += time.perf_counter() - start
    return 1e6 * seconds / repeats / len(plan)


def print_proof_costs(args, results):
    """What the proof of every push (auth.py) adds to a round, on its critical path: the servers'
    checks (measured inside the jobs above: time per round of one bucket, times the buckets of
    the busiest server) and a worker's work before its pushes and after its pulls (measured
    here in process; the next round's proofs are written ahead, once the round is ready, beside
    the next step). The servers' part twice: wall time (on a machine whose cores the job's
    processes share, it includes waiting for a core) and the server thread's CPU time."""
    print("\nproof of every push (auth.py), added to a round's critical path (wall; with the servers' CPU time):")
    for model in args.models:
        path_us, next_us, plan_buckets = proof_cost(model, args.workers, args.servers, args.bucket_size, repeats=50)
        shares = []
        for link in args.bandwidth:
            for system in OURS:
                r = results.get((model, link), {}).get(system, {})
                if r.get("ms") and r.get("server_proof_us") is not None:
                    us = path_us + r["server_proof_us"] * plan_buckets
                    cpu = path_us + r["server_proof_cpu_us"] * plan_buckets
                    shares.append("%s %s %.0f us = %.2f%% (%.0f us = %.2f%%)" % (
                        link, system, us, 100 * us / 1e3 / r["ms"], cpu, 100 * cpu / 1e3 / r["ms"]))
        print("  %s (%d bucket(s) on the busiest server): %s; a worker's next proofs, off the path, %.0f us" % (
            model, plan_buckets, ", ".join(shares) or "no round measured", next_us))
        alone = server_proof_cost(model, args.workers, args.bucket_size)
        us = path_us + alone * plan_buckets
        shares = ["%s %s %.2f%%" % (link, system, 100 * us / 1e3 / results[(model, link)][system]["ms"])
                  for link in args.bandwidth for system in OURS
                  if results.get((model, link), {}).get(system, {}).get("ms")]
        print("    the same work on an idle core (in process): a worker %.0f us + the server %.0f us per bucket = "
              "%.0f us per round: %s" % (path_us, alone, us, ", ".join(shares) or "no round measured"))


def bounds(info, label, workers, servers=1):
    """(fp32, 2-bit push with fp32 pull, 2 bits both ways) wire bounds in ms, or Nones."""
    link, network = split_link(label)
    if link == "none":
        return None, None, None
    values, rate = info["trained_values"], rate_bits(link) / 8  # bytes per second
    if network == "hosts":  # the busiest NIC (a server's, or a worker's), its busier direction
        return tuple(1e3 * max(workers / servers, 1) * max(push, pull) * values / rate
                     for push, pull in ((4, 4), (0.25, 4), (0.25, 0.25)))
    return tuple(1e3 * workers * per_value * values / rate for per_value in (8, 4.25, 0.5))


def print_table(args, infos, results):
    systems = [s for s in SYSTEMS if s in args.systems or s in ("stock_fp32", "stock_2bit", "bitsgd")]
    head = ["model", "arrays", "link"] + systems + ["fp32 bound", "2bit bound", "both bound"] + \
        ["%s/%s" % r for r in RATIOS if r[0] in systems and r[1] in systems]
    rows, notes = [], []
    for model in args.models:
        for link in args.bandwidth:
            res = results.get((model, link), {})
            if res.get("skipped"):
                rows.append([model, str(infos[model]["trained_arrays"]), link, "skipped: " + res["skipped"]])
                continue
            ms = {s: res[s].get("ms") for s in SYSTEMS if s in res}
            cells = [model, str(infos[model]["trained_arrays"]), link]
            for s in systems:
                r = res.get(s)
                cells.append("-" if r is None else ("%.1f" % r["ms"]) if "ms" in r else "failed: " + r["error"][:40])
                if r and "error" in r:
                    notes.append("%s %s %s failed: %s" % (model, link, s, r["error"]))
            cells += ["-" if b is None else "%.1f" % b for b in bounds(infos[model], link, args.workers, args.servers)]
            cells += ["%.2f" % (ms[a] / ms[b]) if ms.get(a) and ms.get(b) else "-" for a, b in RATIOS
                      if a in systems and b in systems]
            rows.append(cells)
            sent = ["%s %.3f MB" % (s, res[s]["bytes_per_round"] / 1e6) for s in OURS
                    if s in res and res[s].get("bytes_per_round") is not None]
            if sent:
                notes.append("%s %s pushed per round per worker: %s" % (model, link, ", ".join(sent)))
            for system in PER_CALL:
                p, fused = res.get(system), res.get(system.replace("_percall", ""))
                if p and "ms" in p:
                    notes.append("%s %s %s (gluon.Trainer / Module's one pushpull per parameter): %.1f ms%s"
                                 % (model, link, system, p["ms"], ", %.2fx cdsgd_mx.Trainer's %.1f ms in its own job"
                                    % (p["ms"] / fused["ms"], fused["ms"]) if fused and "ms" in fused else ""))
                elif p and "error" in p:
                    notes.append("%s %s %s failed: %s" % (model, link, system, p["error"]))
            for system, (even, odd) in ROUND_NAMES.items():
                p = res.get(system)
                if p and "ratio" in p:
                    notes.append("%s %s %s in one job (%d rounds of each): %s %.1f ms, %s %.1f ms, %s/%s %.2f "
                                 "(worker rank %d; mean over the workers %.2f)"
                                 % (model, link, system, args.rounds, even, p["even_ms"], odd, p["odd_ms"], odd, even,
                                    p["ratio"], p["rank"], p["mean_ratio"]))
                elif p and "error" in p:
                    notes.append("%s %s %s failed: %s" % (model, link, system, p["error"]))
    full = [r for r in rows if len(r) == len(head)]
    widths = [max([len(h)] + [len(r[i]) for r in full]) for i, h in enumerate(head)]
    print("\nms per communication round, %d workers, %d server(s), %d timed rounds (cdsgd: mean per "
          "back-to-back step; others: median of waited rounds; max over workers; %s gradients)"
          % (args.workers, args.servers, args.rounds, args.grads))
    print(" | ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in rows:
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths)) if len(r) == len(head) else " | ".join(r))
    for n in notes:
        print("  " + n)


# -- --check: the speed goals of issue 47, before a change is submitted -------------------------
CHECK = {"models": ["inception_bn", "resnet20"], "bandwidth": ["1gbit", "10gbit"],
         "systems": ["ssgd", "bitsgd", "bitsgd_2bit"], "rounds": 20, "grads": "fresh", "repeats": 3}
# (a, b, model or None for any, link) -> the largest a / b allowed
CHECK_GOALS = [("bitsgd_2bit", "bitsgd", "inception_bn", "1gbit", 0.15),
               ("bitsgd_2bit", "bitsgd", "resnet20", "1gbit", 0.4),
               ("bitsgd_2bit", "bitsgd", None, "10gbit", 0.9),
               ("bitsgd", "ssgd", None, "1gbit", 1.0), ("bitsgd", "ssgd", None, "10gbit", 1.0)]
CHECK_NAMES = {("bitsgd_2bit", "bitsgd"): "BIT-SGD both ways / one way", ("bitsgd", "ssgd"): "our 2-bit / our fp32 round"}


def run_check(args):
    """Each system's job CHECK["repeats"] times, the repeats in turn (so that drift on the
    machine hits every system alike); each ratio of the medians over the jobs beside its goal.
    Separate jobs, as a user's training runs them: a job that alternates two kinds of round
    (paired_pull) starts each short both-ways round right after a long fp32 pull. Returns the
    number of goals missed (a job that failed counts as missed)."""
    jobs = [(m, l, sy) for m in args.models for l in args.bandwidth for sy in args.systems]
    total = len(jobs) * CHECK["repeats"]
    ms = {}
    for rep in range(CHECK["repeats"]):
        for n, (model, link, system) in enumerate(jobs, 1 + rep * len(jobs)):
            print("[%d/%d] %s %s %s ..." % (n, total, model, link, system), end=" ", flush=True)
            r = run_job(args, model, link, system)
            ms.setdefault((model, link, system), []).append(r.get("ms"))
            print(("%.1f ms" % r["ms"]) if "ms" in r else "failed: " + r["error"], flush=True)
    print("\n--check: %d jobs of each system (%d timed rounds each, %d workers, %d server(s), %s gradients, the "
          "servers' SGD with momentum %g); ratio of the median job times (each repeat's ratio in brackets)"
          % (CHECK["repeats"], args.rounds, args.workers, args.servers, args.grads, OPTIMIZER["momentum"]))
    missed = 0
    for a, b, only, link, goal in CHECK_GOALS:
        for model in args.models:
            if only not in (None, model) or link not in args.bandwidth:
                continue
            ta, tb = ms[(model, link, a)], ms[(model, link, b)]
            if None in ta or None in tb:
                missed += 1
                print("  %-28s %-12s %-7s a job failed" % (CHECK_NAMES[(a, b)], model, link))
                continue
            ratio = statistics.median(ta) / statistics.median(tb)
            missed += ratio > goal
            print("  %-28s %-12s %-7s %5.2f (%s)  goal <= %.2f: %s" % (
                CHECK_NAMES[(a, b)], model, link, ratio, ", ".join("%.2f" % (x / y) for x, y in zip(ta, tb)), goal,
                "met" if ratio <= goal else "NOT MET"))
    print("--check: %s" % ("all goals met" if not missed else "%d goal(s) not met" % missed))
    return missed


def leader(args):
    made = provenance.record() if args.json else None  # the leader's run, before its jobs (provenance.py)
    infos = {}
    for model in args.models:
        infos[model] = model_info(model)
        i = infos[model]
        print("%s: %d parameter arrays (%d trained), %d values (%d trained)" % (
            model, i["arrays"], i["trained_arrays"], i["values"], i["trained_values"]), flush=True)
    results, skip = {}, {}
    for label in args.bandwidth:
        link, network = split_link(label)
        if network == "hosts":
            skip[label] = emulate.unavailable()
        elif link != "none":
            skip[label] = netns_problem(link)
        if skip.get(label):
            print("note: skipping link %s: %s" % (label, skip[label]), flush=True)
    jobs = [(m, l, s) for m in args.models for l in args.bandwidth if not skip.get(l) for s in args.systems]
    for l in skip:
        if skip[l]:
            for m in args.models:
                results[(m, l)] = {"skipped": skip[l]}
    for n, (model, link, system) in enumerate(jobs, 1):
        print("[%d/%d] %s %s %s ..." % (n, len(jobs), model, link, system), end=" ", flush=True)
        t0 = time.time()
        r = run_job(args, model, link, system)
        results.setdefault((model, link), {})[system] = r
        print(("%.1f ms" % r["ms"]) if "ms" in r else "failed: " + r["error"],
              "(job %.0f s)" % (time.time() - t0), flush=True)
    print_table(args, infos, results)
    print_spans(args, results)
    print_proof_costs(args, results)
    if args.json:
        out = {"workers": args.workers, "servers": args.servers, "rounds": args.rounds, "grads": args.grads,
               "bucket_size": args.bucket_size, "models": infos, "runs": []}
        for (model, link), res in results.items():
            fp32, bit2, both = bounds(infos[model], link, args.workers, args.servers)
            out["runs"].append({"model": model, "link": split_link(link)[0], "network": split_link(link)[1],
                                "fp32_bound_ms": fp32, "2bit_bound_ms": bit2,
                                "both_bound_ms": both,
                                "systems": {s: r for s, r in res.items() if s != "skipped"},
                                "skipped": res.get("skipped")})
        out["provenance"] = made
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print("wrote %s" % args.json)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.comm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--system", default="ssgd", help=argparse.SUPPRESS)
    ap.add_argument("--bandwidth", default="1gbit,10gbit,none", help="links, tc rates or none (default %(default)s)")
    ap.add_argument("--models", default="inception_bn,resnet20,alexnet")
    ap.add_argument("--network", default="shared",
                    help="shared (one shaped loopback), hosts (a NIC per emulated host) or both: shared,hosts")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--bucket-size", type=int, default=None, help="bucket_size of cdsgd_mx.Trainer (default: its own)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per job before it is killed")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every number to PATH")
    ap.add_argument("--trace", default=None, metavar="DIR",
                    help="the project's workers write chrome traces to DIR; span medians are printed")
    ap.add_argument("--grads", default="fixed", choices=("fixed", "fresh"),
                    help="fixed: one gradient draw pushed every round, a round waited with waitall "
                         "(the figures in docs/performance.md before issue 47); fresh: a new draw each "
                         "round written before it (untimed), a round waited for as the next forward "
                         "waits, on the weights (default %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="the speed goals (issue 47): BIT-SGD both ways / one way and our 2-bit / fp32 round, "
                         "Inception-BN and ResNet-20 at 1 and 10 Gbit/s, 3 jobs per system, fresh gradients, "
                         "2 workers + 1 server; prints each ratio beside its goal, exits 1 if one is missed "
                         "(about 3 minutes on 2 cores; sets every other option)")
    ap.add_argument("--link", default="none", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.check:
        args.models, args.bandwidth, args.systems = (",".join(CHECK[k]) for k in ("models", "bandwidth", "systems"))
        args.rounds, args.grads, args.network = CHECK["rounds"], CHECK["grads"], "shared"
        args.workers, args.servers = 2, 1

    def fail(msg):
        sys.stderr.write("bench.comm: %s\n" % msg)
        sys.exit(2)

    from cdsgd_mx.experiments.models import INPUT_SHAPES
    for opt, allowed in (("models", list(INPUT_SHAPES)), ("systems", SYSTEMS + EXTRA_SYSTEMS)):
        values = [v for v in getattr(args, opt).split(",") if v]
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            fail("--%s: unknown %r (allowed: %s)" % (opt, ",".join(bad), ", ".join(allowed)))
        setattr(args, opt, values)
    args.bandwidth = [v for v in args.bandwidth.split(",") if v]
    bad = [v for v in args.bandwidth if v != "none" and not RATE_RE.match(v)]
    if bad or not args.bandwidth:
        fail("--bandwidth: bad link %r (allowed: none or a tc rate such as 100mbit, 1gbit, 10gbit)" % ",".join(bad))
    networks = [v for v in args.network.split(",") if v]
    bad = [v for v in networks if v not in ("shared", "hosts")]
    if bad or not networks:
        fail("--network: unknown %r (allowed: shared, hosts)" % ",".join(bad))
    # each link on each network, as labels: '1gbit' (shared), '1gbit/hosts'
    args.bandwidth = [link if net == "shared" else link + "/hosts" for net in networks for link in args.bandwidth]
    for opt in ("workers", "servers", "rounds", "bucket_size", "timeout"):
        value = getattr(args, opt)
        if value is not None and value < 1:
            fail("--%s must be >= 1, got %r" % (opt.replace("_", "-"), value))
    if args.check:
        return 1 if run_check(args) else 0
    return leader(args)


if __name__ == "__main__":
    sys.exit(main())

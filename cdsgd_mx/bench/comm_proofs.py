"""bench.comm's proof costs: what the proof of every push (auth.py) adds to a round, the
workers' and a server's part measured in process by the project's own calls, beside the
servers' checks timed inside the jobs."""
import time

from cdsgd_mx.bench.comm_systems import K, OURS, algorithm_of, build_model


def proof_cost(model, workers, servers, bucket_size=None, repeats=200, parts=False):
    """A worker's proof work per round (auth.py), by the project's own calls on the model's
    bucket plan, in process; parts: an fp32 round in parts (buckets.PART_SIZE), whose every
    part carries a proof of its own. Returns (path us, next us, messages on the busiest server:
    its buckets, or its parts and buckets too small to have parts):
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
    buckets = bucketing.plan(list(enumerate(sizes)), bucket_size or bucketing.DEFAULT_BUCKET_SIZE, workers, servers,
                             protocol.Keys(servers), bound=protocol.DEFAULT_BIGARRAY_BOUND,
                             part_size=bucketing.PART_SIZE if parts else None)
    region = workers * auth.TAG_FLOATS
    bucketing.BucketSet(buckets, {k: (n,) for k, n in enumerate(sizes)},  # gives each unit its comm_buf views
                        {k: [mx.nd.zeros((n,))] for k, n in enumerate(sizes)}, False, region=region)
    plan = [u for b in buckets for u in (b.parts or [b])]  # what a round pushes, each with its proof
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


def server_proof_cost(model, workers, bucket_size=None, repeats=100, parts=False):
    """A server's proof work per round of one bucket (checking every worker's tag of a dense
    round, writing the count), by the server's own calls in process on an idle core: the cost
    itself, without the waits for a core that the jobs above include on a small machine.
    parts: per round of one part (buckets.PART_SIZE)."""
    import mxnet as mx
    import numpy as np
    from cdsgd_mx.wire import auth, protocol
    from cdsgd_mx.worker import buckets as bucketing
    from cdsgd_mx.wire.proofs import ServerProofs
    sizes = [int(p.data().size) for p in build_model(model).collect_params().values() if p.grad_req != "null"]
    buckets = bucketing.plan(list(enumerate(sizes)), bucket_size or bucketing.DEFAULT_BUCKET_SIZE, workers, 1,
                             protocol.Keys(1), bound=protocol.DEFAULT_BIGARRAY_BOUND,
                             part_size=bucketing.PART_SIZE if parts else None)
    plan = [u for b in buckets for u in (b.parts or [b])]
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


def in_parts(system, r):
    """The share of a job's timed rounds that went as fp32 rounds in parts (every part with a
    proof of its own), from the way its fp32 rounds took (comm_jobs: result["way"]): every round
    of S-SGD's, every K-th (the correction) of CD-SGD's, none of BIT-SGD's."""
    if r.get("way") != "parts":
        return 0.0
    return 1.0 / K if algorithm_of(system).startswith("cdsgd") else 1.0


def print_proof_costs(args, results):
    """What the proof of every push (auth.py) adds to a round, on its critical path: the servers'
    checks (measured inside the jobs above: time per round of one bucket or part, times the
    messages of the busiest server) and a worker's work before its pushes and after its pulls
    (measured here in process; the next round's proofs are written ahead, once the round is
    ready, beside the next step). The servers' part twice: wall time (on a machine whose cores
    the job's processes share, it includes waiting for a core) and the server thread's CPU time.
    Each job on the messages its timed rounds sent: its buckets, and where its fp32 rounds went
    in parts (in_parts), their parts."""
    from cdsgd_mx.worker.buckets import default_bucket_size
    print("\nproof of every push (auth.py), added to a round's critical path (wall; with the servers' CPU time):")
    for model in args.models:
        by_size = {}  # bucket size -> our systems that ran on it
        for system in OURS:
            size = args.bucket_size or default_bucket_size(algorithm_of(system))
            by_size.setdefault(size, []).append(system)
        for size, systems in sorted(by_size.items()):
            measured = [(link, system) for link in args.bandwidth for system in systems
                        if results.get((model, link), {}).get(system, {}).get("ms")]
            if not measured and len(by_size) > 1:
                continue
            share = {(link, system): in_parts(system, results[(model, link)][system]) for link, system in measured}
            ways = [False] + ([True] if any(share.values()) else [])  # whole buckets, and parts where a job took them
            costs = {way: proof_cost(model, args.workers, args.servers, size, repeats=50, parts=way) for way in ways}
            alone = {way: server_proof_cost(model, args.workers, size, parts=way) for way in ways}
            # a job's figures: each way's, weighted by the share of its rounds that went that way
            mean = lambda x, f: sum(w * f(way) for way, w in ((False, 1 - x), (True, x)) if w)
            path = lambda x: mean(x, lambda way: costs[way][0])
            shares = []
            for link, system in measured:
                r, x = results[(model, link)][system], share[(link, system)]
                if r.get("server_proof_us") is not None:
                    messages = mean(x, lambda way: costs[way][2])
                    us = path(x) + r["server_proof_us"] * messages
                    cpu = path(x) + r["server_proof_cpu_us"] * messages
                    shares.append("%s %s%s %.0f us = %.2f%% (%.0f us = %.2f%%)" % (
                        link, system, " (%s)" % parts_said(x) if x else "", us, 100 * us / 1e3 / r["ms"], cpu,
                        100 * cpu / 1e3 / r["ms"]))
            print("  %s, buckets of %d values (%d on the busiest server%s): %s; a worker's next proofs, off the path, "
                  "%.0f us" % (model, size, costs[False][2],
                               "; %d parts and buckets in an fp32 round in parts" % costs[True][2] if True in costs else "",
                               ", ".join(shares) or "no round measured", costs[False][1]))
            idle = lambda x: path(x) + mean(x, lambda way: alone[way] * costs[way][2])
            shares = ["%s %s %.2f%%" % (link, system, 100 * idle(share[(link, system)]) / 1e3
                                        / results[(model, link)][system]["ms"]) for link, system in measured]
            print("    the same work on an idle core (in process): a worker %.0f us + the server %.0f us per bucket = "
                  "%.0f us per round%s: %s" % (
                      costs[False][0], alone[False], idle(0.0),
                      "; in parts, a worker %.0f us + the server %.0f us per message = %.0f us" % (
                          costs[True][0], alone[True], idle(1.0)) if True in costs else "",
                      ", ".join(shares) or "no round measured"))


def parts_said(x):
    """How a job's share of rounds in parts reads beside it."""
    return "in parts" if x == 1 else "1 round in %d in parts" % round(1 / x)

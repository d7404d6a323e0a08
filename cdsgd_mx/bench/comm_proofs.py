"""bench.comm's proof costs: what the proof of every push (auth.py) adds to a round, the
workers' and a server's part measured in process by the project's own calls, beside the
servers' checks timed inside the jobs."""
import time

from cdsgd_mx.bench.comm_systems import OURS, algorithm_of, build_model


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
    processes share, it includes waiting for a core) and the server thread's CPU time. Each
    system on its own bucket plan (--bucket-size, else its algorithm's default)."""
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
            path_us, next_us, plan_buckets = proof_cost(model, args.workers, args.servers, size, repeats=50)
            shares = []
            for link, system in measured:
                r = results[(model, link)][system]
                if r.get("server_proof_us") is not None:
                    us = path_us + r["server_proof_us"] * plan_buckets
                    cpu = path_us + r["server_proof_cpu_us"] * plan_buckets
                    shares.append("%s %s %.0f us = %.2f%% (%.0f us = %.2f%%)" % (
                        link, system, us, 100 * us / 1e3 / r["ms"], cpu, 100 * cpu / 1e3 / r["ms"]))
            print("  %s, buckets of %d values (%d on the busiest server): %s; a worker's next proofs, off the path, "
                  "%.0f us" % (model, size, plan_buckets, ", ".join(shares) or "no round measured", next_us))
            alone = server_proof_cost(model, args.workers, size)
            us = path_us + alone * plan_buckets
            shares = ["%s %s %.2f%%" % (link, system, 100 * us / 1e3 / results[(model, link)][system]["ms"])
                      for link, system in measured]
            print("    the same work on an idle core (in process): a worker %.0f us + the server %.0f us per bucket = "
                  "%.0f us per round: %s" % (path_us, alone, us, ", ".join(shares) or "no round measured"))

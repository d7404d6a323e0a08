"""Iteration time of S-SGD, BIT-SGD, OD-SGD and CD-SGD side by side, on real processes.

    python -m cdsgd_mx.bench.overlap [--bandwidth 1gbit | --emulate-hosts N --nic 1gbit] [--workers 2]
        [--servers 1] [--params 2e6] [--model mlp|alexnet|vgg16|inception_bn|resnet50|...] [--iterations 60]
        [--compute-ms T] [--algorithms ssgd,bitsgd,odsgd,cdsgd] [--fp32-sum arrival|rank]
        [--trace-dir DIR] [--json]

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

--compute-ms T: each worker's forward/backward becomes T ms of waiting (after waiting for the
weights the forward would read), with gradients of the model's real shapes drawn once, so that
two cores can move the real bytes of 16 workers through real servers. Where it differs from
real compute: a GPU's compute takes no CPU from the codec, and neither does the waiting; on
this machine's CPUs real compute would. worker_cpu_ms is then the worker's own CPU per step
(codec, communication, local update, Python), which compute would have to leave free;
server_cpu_ms is the busiest server's CPU per step while it served (with --interleaved, over
the whole job: every algorithm and round).
--emulate-hosts N --nic RATE: every job on N emulated hosts, each node on one (servers first),
each host's NIC at RATE in each direction (python -m cdsgd_mx.cluster.emulate), instead of
--bandwidth's one shared loopback.

--interleaved: all of it in one job instead (cdsgd_mx.worker.schedule.InterleavedSchedule): separate
jobs on a machine whose cores the workers share differ in compute from job to job by more
than what the algorithms differ by at fast links; in one job every algorithm runs on the
same processes. One job per bucket size and pull: each algorithm runs on the buckets it gets
by default (2^20 values, worker/buckets.py: one size for all), and the both-ways algorithms
(2-bit pulls) in a job of their own, since a store has one pull setting; so there are up to
two jobs, each with its own rounds alone, and each algorithm's
model is calibrated by its own job's; --bucket-size N runs them in one job per pull on buckets of N values.
Each cycle measures tau, then fp32 and 2-bit rounds alone taking turns, then each algorithm
for a block of 1 + 2k steps (the order rotated every cycle); --iterations is then the timed
steps per algorithm, rounded up to whole cycles of 2k; iter_ms is the median over cycles of
each block's mean.

--json: one JSON object per line instead of the summary: first {"provenance": ...}
(cdsgd_mx.experiments.provenance.record()), then one row per job (or algorithm), then the costs (phi_ms, ...).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from cdsgd_mx.experiments import provenance
from cdsgd_mx.bench import mark_fresh
from cdsgd_mx.wire import stages

ALGORITHMS = ["ssgd", "bitsgd", "odsgd", "cdsgd"]
BOTH_WAYS = ["bitsgd_2bit", "cdsgd_2bit"]  # --interleaved only: with 2-bit pulls (pull_compression='2bit')
MAX_TRIAL_ROUNDS = 16  # --interleaved: untimed fp32 rounds for the part choice's trials (7 fp32 steps, 13 with a second look)
COMM_ROUNDS = 4  # --interleaved: rounds of each kind alone per cycle (phi, psi + delta)


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
    from cdsgd_mx.server.node import serve_if_not_worker
    serve_if_not_worker()
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon
    import cdsgd_mx

    if args.model == "mlp":
        net, in_units = mlp(args.params)
        shape, classes = (in_units,), 10
    else:
        from cdsgd_mx.experiments import models
        shape = models.INPUT_SHAPES[args.model]
        classes = 1000 if shape[-1] == 224 else 10
        net = models.build(args.model, classes)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1,) + shape))  # deferred shapes known before the trainer sees the parameters
    net.hybridize()
    # (--interleaved: the leader gives each job its group's bucket size, bucket_groups)
    name = ("interleaved-%d" % args.bucket_size) if args.interleaved else args.algorithm
    trace = os.path.join(args.trace_dir, "%s.json" % name) if args.trace_dir else "/dev/null"
    # interleaved: built as cdsgd (every buffer), the schedule says what each step runs
    # (with a 2-bit pull algorithm among them, every compressed push carries the pull flag and
    # the servers copy V := W after the one-way rounds: a little more than those cost alone)
    pull = "2bit" if args.interleaved and any(a in BOTH_WAYS for a in args.algorithms.split(",")) else "none"
    trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                               algorithm="cdsgd" if args.interleaved else args.algorithm, k=args.k,
                               warmup_steps=0 if args.interleaved else args.warmup,
                               threshold=args.threshold, trace=trace, pull_compression=pull,
                               bucket_size=args.bucket_size or None,  # None: the algorithm's default
                               fp32_sum=args.fp32_sum)
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

    if args.compute_ms is not None:
        fwd_bwd = emulated_compute(args, net, trainer)

    if args.interleaved:
        return interleaved(args, net, trainer, fwd_bwd)
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
            mark_fresh(trainer)  # the gradients are written by hand, or kept from the last step
            trainer.step(args.batch)
            mx.nd.waitall()
            stamps.append(time.perf_counter())
    cpu = []  # the process's CPU seconds at each stamp (every thread: the engine's, the communication's)
    for it in range(0 if args.comm_only else args.iterations):
        loss = fwd_bwd(it)
        trainer.step(args.batch)
        # as a training loop that logs its loss does: waits for forward(t), hence for the
        # weights it read (W(t) for ssgd/bitsgd, the local update from W(t-1) for odsgd/cdsgd)
        loss.wait_to_read()
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
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
            # with --compute-ms the compute is a sleep: this is the worker's codec, communication
            # and Python per step (with real compute it includes forward/backward)
            "worker_cpu_ms": 1e3 * (cpu[-1] - cpu[first]) / (len(cpu) - 1 - first) if cpu else None,
            "bytes_per_step": kv.bytes_pushed / args.iterations, "steps": kv.steps_done}), flush=True)


def bucket_groups(args):
    """--interleaved: [(bucket size, algorithms)], one job each, by bucket size and pull (see
    the module's doc): the one-way ones first."""
    from cdsgd_mx.worker.buckets import default_bucket_size
    groups = {}
    for a in args.algorithms.split(","):
        groups.setdefault((a in BOTH_WAYS, args.bucket_size or default_bucket_size(a.replace("_2bit", ""))), []).append(a)
    return [(size, algorithms) for (_, size), algorithms in sorted(groups.items())]


def emulated_compute(args, net, trainer):
    """--compute-ms T: forward/backward replaced by T ms of waiting. As a real step does, it
    first waits for the weights the forward would read (W(t), or CD-SGD's and OD-SGD's local
    update), then "computes" for T ms, leaving gradients of the model's real shapes (drawn once:
    the time of what follows does not depend on their values). Everything after it stays real:
    the quantize, the pushes and pulls, the servers, the local update and their overlap."""
    import mxnet as mx
    import numpy as np
    kv = trainer.kvstore
    trained = [p for p in net.collect_params().values() if p.grad_req != "null"]
    rng = np.random.RandomState(1 + kv.rank)
    for p in trained:
        p.grad()[:] = mx.nd.array(0.01 * rng.randn(*p.shape).astype(np.float32))
    weights = [p.data() for p in trained]
    done = mx.nd.zeros((1,))  # what the loop's loss.wait_to_read() waits for: ready at once

    def fwd_bwd(step):
        with kv.tracer.span("forward/backward", step=step):
            for w in weights:
                w.wait_to_read()
            time.sleep(args.compute_ms / 1e3)
            mark_fresh(trainer)  # the gradients are the drawn ones, as if backward had just written them
        return done
    return fwd_bwd


def interleaved(args, net, trainer, fwd_bwd):
    """Worker of --interleaved: cycles of tau, the rounds alone, and the four algorithms."""
    import mxnet as mx
    import numpy as np
    from cdsgd_mx.worker.schedule import InterleavedSchedule
    kv = trainer.kvstore
    schedule = kv.schedule = InterleavedSchedule(args.k)
    trained = [p for p in net.collect_params().values() if p.grad_req != "null"]
    algorithms = args.algorithms.split(",")
    block = 1 + 2 * args.k  # timed: the last 2k steps (two of CD-SGD's corrections waited)
    cycles = -(-args.iterations // (block - 1))

    def begin(algorithm):
        schedule.begin(kv.steps_done, algorithm.replace("_2bit", ""), "2bit" if algorithm in BOTH_WAYS else "none")

    def run_block(algorithm, steps, stamps=None, cpu=None):
        begin(algorithm)
        first = kv.steps_done
        for i in range(steps):
            loss = fwd_bwd(kv.steps_done)
            trainer.step(args.batch)
            loss.wait_to_read()  # as a training loop that logs its loss does (as in worker())
            if stamps is not None:
                stamps.append(time.perf_counter())
                cpu.append(time.process_time())
        return first

    def comm_round(algorithm):
        begin(algorithm)  # (cdsgd_2bit: a segment's first step is its correction)
        mark_fresh(trainer)  # the gradients are written by hand, or kept from the last step
        # together: a worker still pulling the last round (one of N out of the server's NIC
        # goes last) would count its lag into the next round's cost
        kv.barrier()
        t0 = time.perf_counter()
        trainer.step(args.batch)
        trainer.wait_all()  # (a delayed step leaves its round in flight)
        mx.nd.waitall()
        return 1e3 * (time.perf_counter() - t0)

    for algorithm in algorithms:  # untimed: every path once (first calls, allocations)
        run_block(algorithm, max(2, args.warmup))
    for _ in range(MAX_TRIAL_ROUNDS):  # untimed: the part choice's trials (its first fp32 steps) over, so
        if not kv.part_choice_pending:  # that no timed round or block is one of them
            break
        comm_round("ssgd")
    if kv.part_choice_pending:
        raise RuntimeError("the part choice was not made in %d untimed fp32 rounds" % MAX_TRIAL_ROUNDS)
    way = kv.fp32_way  # how every timed fp32 round goes (None: no bucket has parts)
    # the rounds alone: fp32 (phi), 2-bit (psi + delta), with 2-bit pulls the 2-bit round
    # both ways and, where CD-SGD both ways runs, its correction (fp32, V tracked: phi_pull)
    kinds = ("ssgd", "bitsgd") + (("bitsgd_2bit",) if kv.pull_compression == "2bit" else ()) + \
        (("cdsgd_2bit",) if "cdsgd_2bit" in algorithms else ())
    tau, comm = [], {kind: [] for kind in kinds}
    per_cycle = []
    steps_of = {a: [] for a in algorithms}
    cpu_of = {a: [] for a in algorithms}  # the worker's CPU per step (with --compute-ms: all but compute)
    for c in range(cycles):
        trainer.wait_all()  # nothing in flight while compute is timed alone
        for _ in range(args.compute_iterations):
            t0 = time.perf_counter()
            fwd_bwd(-1)
            mx.nd.waitall()
            tau.append(1e3 * (time.perf_counter() - t0))
        for p in trained:  # the rounds alone push zeros (no forward/backward)
            p.zero_grad()
        for r in range(len(kinds) * COMM_ROUNDS):
            kind = kinds[r % len(kinds)]
            comm[kind].append(comm_round(kind))
        times = {}
        for algorithm in algorithms[c % len(algorithms):] + algorithms[:c % len(algorithms)]:
            stamps, cpu = [], []
            first = run_block(algorithm, block, stamps, cpu)
            times[algorithm] = 1e3 * (stamps[-1] - stamps[0]) / (block - 1)
            cpu_of[algorithm].append(1e3 * (cpu[-1] - cpu[0]) / (block - 1))
            steps_of[algorithm] += range(first + 1, first + block)  # the timed steps
        per_cycle.append(times)
    trainer.wait_all()
    if kv.rank == 0:
        if args.trace_dir:
            trainer.save_trace()
        import statistics
        print("RESULT " + json.dumps({
            "interleaved": True, "model": args.model, "batch": args.batch, "workers": kv.num_workers,
            "bucket_size": kv.bucket_size, "algorithms": algorithms,
            "params": sum(int(np.prod(p.shape)) for p in net.collect_params().values()),
            "cycles": cycles, "block": block, "tau_ms": statistics.mean(tau), "fp32_way": way,
            "phi_ms": statistics.median(comm["ssgd"]), "psi_plus_delta_ms": statistics.median(comm["bitsgd"]),
            "psi_pull_plus_delta_ms": statistics.median(comm["bitsgd_2bit"]) if "bitsgd_2bit" in comm else None,
            "phi_pull_ms": statistics.median(comm["cdsgd_2bit"]) if "cdsgd_2bit" in comm else None,
            # the median over cycles: a cycle that another process slowed moves it least
            "iter_ms": {a: statistics.median(t[a] for t in per_cycle) for a in algorithms},
            "cycle_iter_ms": per_cycle,
            "worker_cpu_ms": {a: statistics.median(v) for a, v in cpu_of.items()},
            "bytes_per_step": {a: sum(kv.bytes_by_step[t] for t in steps) / len(steps)
                               for a, steps in steps_of.items()}, "steps": kv.steps_done}), flush=True)


def launch_cmd(args, alg, extra):
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", str(args.workers), "-s", str(args.servers),
           "--timeout", str(args.timeout)]
    if args.emulate_hosts:  # each node on an emulated host with its own NIC (cluster/emulate.py)
        cmd += ["--emulate-hosts", str(args.emulate_hosts)] + (["--nic", args.nic] if args.nic else [])
    elif args.bandwidth:
        cmd += ["--bandwidth", args.bandwidth]
    cmd += ["--", sys.executable, "-m", "cdsgd_mx.bench.overlap", "--worker", "--algorithm", alg] + extra
    for name in ("model", "params", "iterations", "batch", "k", "warmup", "threshold", "compute_iterations",
                 "algorithms", "bucket_size", "fp32_sum"):
        cmd += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.compute_ms is not None:
        cmd += ["--compute-ms", str(args.compute_ms)]
    return cmd


def run_job(cmd, name):
    """The job's RESULT, with server_cpu_ms: the busiest server's CPU per step while it served
    (every kind of round the job ran; wire/stages.py)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **{stages.ENV: "1"}))
    lines = [l for l in proc.stdout.splitlines() if "RESULT " in l]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
        sys.exit("bench.overlap: the %s job failed (exit code %d)" % (name, proc.returncode))
    result = json.loads(lines[0].split("RESULT ", 1)[1])
    for line in proc.stdout.splitlines():  # the way the job's fp32 rounds took (worker/part_choice.py)
        if "cdsgd_mx: fp32 rounds in" in line:
            sys.stderr.write("  %s job: %s\n" % (name, line[line.index("cdsgd_mx:"):]))
    served = [r["serving_cpu"] for r in stages.reports(proc.stdout) if r["serving_cpu"] is not None]
    result["server_cpu_ms"] = 1e3 * max(served) / result["steps"] if served and result.get("steps") else None
    return result


def interleaved_results(args):
    """One job per bucket size and pull (bucket_groups): per algorithm a row as separate jobs give
    (compute_ms: its job's tau), and each job's costs: its rounds alone, tau, server CPU."""
    import copy
    extra = ["--trace-dir", os.path.abspath(args.trace_dir)] if args.trace_dir else []
    results, jobs = {}, []
    for size, algorithms in bucket_groups(args):
        if not args.json:
            print("running %s in one job (buckets of %d values) ..." % (", ".join(algorithms), size), flush=True)
        group = copy.copy(args)
        group.algorithms, group.bucket_size = ",".join(algorithms), size
        r = run_job(launch_cmd(group, "cdsgd", ["--interleaved"] + extra), "interleaved")
        jobs.append({"algorithms": algorithms, "bucket_size": size, "tau_ms": r["tau_ms"], "phi_ms": r["phi_ms"],
                     "psi_plus_delta_ms": r["psi_plus_delta_ms"],
                     "psi_pull_plus_delta_ms": r.get("psi_pull_plus_delta_ms"), "phi_pull_ms": r.get("phi_pull_ms"),
                     "server_cpu_ms": r["server_cpu_ms"], "cycles": r["cycles"], "block": r["block"],
                     "fp32_way": r.get("fp32_way")})
        for alg, ms in r["iter_ms"].items():
            results[alg] = {"algorithm": alg, "model": r["model"], "batch": r["batch"], "workers": r["workers"],
                            "params": r["params"], "compute_ms": r["tau_ms"], "iter_ms": ms,
                            "bytes_per_step": r["bytes_per_step"][alg], "bucket_size": size,
                            "cycle_iter_ms": [c[alg] for c in r["cycle_iter_ms"]],
                            "worker_cpu_ms": r["worker_cpu_ms"][alg], "server_cpu_ms_job": r["server_cpu_ms"]}
    if args.json:
        for alg in args.algorithms.split(","):
            print(json.dumps(dict(results[alg], job=alg, interleaved=True, bandwidth=args.bandwidth or "loopback",
                                  nic=args.nic, emulate_hosts=args.emulate_hosts,
                                  compute_ms_emulated=args.compute_ms)), flush=True)
    return results, jobs


def job_of(jobs, algorithm):
    """The interleaved job that ran an algorithm."""
    return next(j for j in jobs if algorithm in j["algorithms"])


def predictions(jobs, k):
    """Each algorithm's time model (eqs. 2-7), calibrated by its own job's tau and rounds."""
    from cdsgd_mx.experiments import timemodel
    predicted = {}
    for j in jobs:
        costs = timemodel.calibrate(j["tau_ms"], j["phi_ms"], j["psi_plus_delta_ms"],
                                    pull_round_ms=j.get("psi_pull_plus_delta_ms"),
                                    correction_pull_round_ms=j.get("phi_pull_ms"))
        predicted.update({a: ms for a, ms in timemodel.predict(costs, k).items() if a in j["algorithms"]})
    return predicted


def separate_results(args):
    """One job per algorithm, and one per kind of round alone."""
    results = {}
    jobs = [(a, False) for a in args.algorithms.split(",")] + [("ssgd", True), ("bitsgd", True)]
    for alg, comm_only in jobs:
        extra = ["--comm-only"] if comm_only else []
        if args.trace_dir and not comm_only:
            extra += ["--trace-dir", os.path.abspath(args.trace_dir)]
        name = alg + (" (communication only)" if comm_only else "")
        if not args.json:
            print("running %s ..." % name, flush=True)
        key = alg + ("_comm" if comm_only else "")
        results[key] = run_job(launch_cmd(args, alg, extra), name)
        if args.json:
            print(json.dumps(dict(results[key], job=key, bandwidth=args.bandwidth or "loopback",
                                  nic=args.nic, emulate_hosts=args.emulate_hosts, compute_ms_emulated=args.compute_ms)),
                  flush=True)
    return results


def leader(args):
    from cdsgd_mx.experiments import timemodel
    if args.json:  # the first line: where and how these rows were made (provenance.py); the workers print none
        print(json.dumps({"provenance": provenance.record()}), flush=True)
    if args.interleaved:
        results, jobs = interleaved_results(args)
        main_job = job_of(jobs, "cdsgd") if "cdsgd" in results else jobs[-1]  # CD-SGD's rounds: the figures
        both = next((j for j in jobs if j["psi_pull_plus_delta_ms"] is not None), None)  # (the both-ways job's)
        phi, psi = main_job["phi_ms"], main_job["psi_plus_delta_ms"]
        psi_pull, phi_pull = (both["psi_pull_plus_delta_ms"], both.get("phi_pull_ms")) if both else (None, None)
        predicted = predictions(jobs, args.k)
    else:
        results = separate_results(args)
        phi, psi, psi_pull = results.pop("ssgd_comm")["iter_ms"], results.pop("bitsgd_comm")["iter_ms"], None
        tau = sum(r["compute_ms"] for r in results.values()) / len(results)
        predicted = timemodel.predict(timemodel.calibrate(tau, phi, psi), args.k)
    comm_cd = timemodel.cd_communication(phi, psi, args.k)
    if args.json:
        costs = {"phi_ms": phi, "psi_plus_delta_ms": psi, "cdsgd_comm_ms": comm_cd}
        if psi_pull is not None:
            costs["psi_pull_plus_delta_ms"] = psi_pull
        if args.interleaved and phi_pull is not None:
            costs["phi_pull_ms"] = phi_pull
        if args.interleaved:
            costs.update(jobs=jobs, model_ms=predicted)
        print(json.dumps(costs), flush=True)
        return results
    network = ("%d emulated hosts, a %s NIC each" % (args.emulate_hosts, args.nic or "unshaped")
               if args.emulate_hosts else args.bandwidth or "unshaped loopback")
    print("\nlink: %s, %d workers, %d server(s), %d parameters, batch %d, k=%d%s" % (
        network, args.workers, args.servers, next(iter(results.values()))["params"], args.batch, args.k,
        (", compute emulated: %g ms of waiting per step" % args.compute_ms if args.compute_ms is not None else "")
        + (", fp32 rounds summed in rank order" if args.fp32_sum == "rank" else "")))
    for j in jobs if args.interleaved else [None]:
        where = " (the job of %s, buckets of %d values)" % (", ".join(j["algorithms"]), j["bucket_size"]) if j else ""
        jphi, jpsi = (j["phi_ms"], j["psi_plus_delta_ms"]) if j else (phi, psi)
        print("communication per step, measured alone%s: fp32 round (phi) %.1f ms, 2-bit round (psi + delta) %.1f ms;"
              " CD-SGD mean ((k-1)(psi+delta) + phi)/k = %.1f ms" % (where, jphi, jpsi,
                                                                   timemodel.cd_communication(jphi, jpsi, args.k)))
        if j and j["psi_pull_plus_delta_ms"] is not None:
            print("2-bit round with a 2-bit pull (psi_pull + delta) %.1f ms" % j["psi_pull_plus_delta_ms"])
        if j and j.get("phi_pull_ms") is not None:
            print("CD-SGD's correction with 2-bit pulls (phi_pull: fp32, V tracked) %.1f ms" % j["phi_pull_ms"])
    print("%-11s %12s %16s %12s %16s %18s %18s" % ("algorithm", "iter ms", "model (eqs 2-7)", "compute ms",
                                                  "pushed KB/step", "worker CPU ms/step", "server CPU ms/step"))
    for alg, r in results.items():
        print("%-11s %12.1f %16.1f %12.1f %16.1f %18s %18s" % (
            alg, r["iter_ms"], predicted[alg], r["compute_ms"], r["bytes_per_step"] / 1e3,
            "%.1f" % r["worker_cpu_ms"] if r.get("worker_cpu_ms") is not None else "-",
            "%.1f" % r["server_cpu_ms"] if r.get("server_cpu_ms") is not None else "-"))
    for j in jobs if args.interleaved else []:
        if j["server_cpu_ms"] is not None:
            print("busiest server's CPU per step, over the job of %s (every algorithm and round): %.1f ms"
                  % (", ".join(j["algorithms"]), j["server_cpu_ms"]))
    if "cdsgd" in results:
        cd = results["cdsgd"]
        bound = max(cd["compute_ms"], comm_cd)
        print("cdsgd iteration / max(compute, communication) = %.2f (goal <= 1.15)" % (cd["iter_ms"] / bound))
        for other in ("bitsgd", "ssgd"):
            if other in results:
                print("cdsgd / %s iteration time = %.2f (goal < 1)" % (other, cd["iter_ms"] / results[other]["iter_ms"]))
                if args.interleaved:
                    print("    per cycle: %s" % ", ".join("%.2f" % (a / b) for a, b in zip(
                        cd["cycle_iter_ms"], results[other]["cycle_iter_ms"])))
    if "cdsgd_2bit" in results and "cdsgd" in results:  # issue 29: both ways against one way, same job
        both, one = results["cdsgd_2bit"], results["cdsgd"]
        print("cdsgd_2bit / cdsgd iteration time = %.2f (goal < 1 on a slow link)" % (both["iter_ms"] / one["iter_ms"]))
        if args.interleaved:
            print("    per cycle: %s" % ", ".join("%.2f" % (a / b) for a, b in zip(both["cycle_iter_ms"],
                                                                                  one["cycle_iter_ms"])))
    if args.interleaved:
        print("timed in %d job(s): %d cycles, each algorithm a block of %d steps per cycle (the first not timed)"
              % (len(jobs), jobs[0]["cycles"], jobs[0]["block"]))
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
    ap.add_argument("--model", default="mlp", help="mlp (default) or a model of cdsgd_mx.experiments.models")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--compute-iterations", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--trace-dir", default=None, help="write each algorithm's rank-0 chrome trace here "
                    "(--interleaved: one per job, interleaved-BUCKETSIZE.json)")
    ap.add_argument("--comm-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--interleaved", action="store_true", help="all algorithms and rounds in one job, "
                    "taking turns in blocks (--iterations: timed steps per algorithm)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bucket-size", type=int, default=0, metavar="N",
                    help="values per bucket for every algorithm (default: each algorithm's own; --interleaved: "
                         "one job per bucket size and pull)")
    ap.add_argument("--fp32-sum", default="arrival", choices=["arrival", "rank"],
                    help="how servers sum fp32 rounds (the store's fp32_sum): as they arrive (default), or "
                         "in rank order as rows")
    ap.add_argument("--compute-ms", type=float, default=None, metavar="T",
                    help="replace each worker's forward/backward with T ms of waiting (gradients of the model's "
                         "real shapes, drawn once); communication, codec, servers and local update stay real")
    ap.add_argument("--emulate-hosts", type=int, default=0, metavar="N",
                    help="run every job on N emulated hosts (python -m cdsgd_mx.cluster.emulate), a NIC each")
    ap.add_argument("--nic", default=None, help="each emulated host's NIC rate, each way (with --emulate-hosts)")
    args = ap.parse_args(argv)
    args.params = int(args.params)
    from cdsgd_mx.experiments import models
    if args.model != "mlp" and args.model not in models.INPUT_SHAPES:
        ap.error("--model must be mlp or one of %s, got %r" % (", ".join(models.INPUT_SHAPES), args.model))
    bad = [a for a in args.algorithms.split(",") if a not in ALGORITHMS + (BOTH_WAYS if args.interleaved else [])]
    if bad:
        ap.error("--algorithms: %s not one of %s" % (", ".join(bad), ", ".join(ALGORITHMS)))
    if args.bucket_size < 0:
        ap.error("--bucket-size must be >= 1 values, got %d" % args.bucket_size)
    for name in ("workers", "servers", "params", "iterations", "batch", "k"):
        if getattr(args, name) < 1:
            ap.error("--%s must be >= 1" % name)
    if not args.interleaved and args.iterations <= args.warmup + 4:
        ap.error("--iterations must exceed --warmup by at least 5")
    if args.compute_ms is not None and not args.compute_ms >= 0:
        ap.error("--compute-ms must be >= 0 milliseconds, got %r" % args.compute_ms)
    if args.emulate_hosts < 0:
        ap.error("--emulate-hosts must be >= 1, got %d" % args.emulate_hosts)
    if args.nic and not args.emulate_hosts:
        ap.error("--nic shapes emulated hosts' NICs: it needs --emulate-hosts N")
    if args.emulate_hosts and args.bandwidth:
        ap.error("--bandwidth shapes one shared loopback; with --emulate-hosts give each host's NIC with --nic")
    if args.nic:
        from cdsgd_mx.cluster.shaping import RATE_RE
        if not RATE_RE.match(args.nic):
            ap.error("--nic must be a tc rate such as 100mbit, 1gbit or 10gbit, got %r" % args.nic)
    if args.worker:
        worker(args)
    else:
        leader(args)


if __name__ == "__main__":
    main()

"""One communication round of MXNet fp32, MXNet 2-bit, S-SGD, BIT-SGD and CD-SGD side by side.

    python -m cdsgd_mx.bench.comm [--bandwidth 1gbit,10gbit,none] [--models inception_bn,resnet20,alexnet]
        [--network hosts|shared|shared,hosts] [--workers 2] [--servers 1] [--rounds 30]
        [--systems stock_fp32,stock_2bit,ssgd,bitsgd,cdsgd,bitsgd_2bit,cdsgd_2bit]
        [--repeats N] [--bucket-size N] [--timeout SEC] [--json PATH] [--trace DIR] [--busy-cores N]

Tells whether compression pays on a link. For each model and link, each system runs as its own
job under the launcher. Two network models (--network; default hosts where this machine can
emulate hosts: root, iproute2 and sshd; else shared, said in one line):
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
  ssgd_unwindowed (not in the default list) S-SGD with no window of fp32 pushes in flight
              (CDSGD_PUSH_WINDOW=0: every bucket pushed at once, as before the window); printed
              under the table with ssgd / ssgd_unwindowed (run ssgd too; with --repeats the jobs
              take turns)
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
--busy-cores N: N processes spin for the whole run, each on a core of its own at the highest
priority allowed (bench/busy.py): the jobs run on the cores left, as on a slower or shared machine.
"""
import argparse
import sys
import time

from cdsgd_mx.cluster.shaping import RATE_RE
from cdsgd_mx.cluster import emulate
from cdsgd_mx.experiments import provenance
from cdsgd_mx.bench.busy import BusyCores, check_count
from cdsgd_mx.bench.comm_check import CHECK, run_check
from cdsgd_mx.bench.comm_jobs import netns_problem, outcome, run_job, split_link
from cdsgd_mx.bench.comm_proofs import print_proof_costs
from cdsgd_mx.bench.comm_report import print_spans, print_table, write_json
from cdsgd_mx.bench.comm_systems import EXTRA_SYSTEMS, SYSTEMS, model_info
from cdsgd_mx.bench.comm_worker import worker


def median_job(done):
    """The result of one system's --repeats jobs: the job with the median time (the lower middle
    one of an even count), with every job's time in "jobs_ms"; a failed job fails the system."""
    failed = [r for r in done if "ms" not in r]
    if failed:
        return failed[0]
    ordered = sorted(done, key=lambda r: r["ms"])
    result = dict(ordered[(len(ordered) - 1) // 2])
    if len(done) > 1:
        result["jobs_ms"] = [r["ms"] for r in done]
    return result


def leader(args):
    """The run without --worker or --check: every system's job on every model and link, then the
    table, the notes, and --json's file."""
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
    runs = {}
    for rep in range(args.repeats):  # the repeats in turn, so that drift on the machine hits every system alike
        for n, (model, link, system) in enumerate(jobs, 1 + rep * len(jobs)):
            print("[%d/%d] %s %s %s ..." % (n, len(jobs) * args.repeats, model, link, system), end=" ", flush=True)
            t0 = time.time()
            r = run_job(args, model, link, system)
            runs.setdefault((model, link, system), []).append(r)
            print(outcome(r),
                  "(job %.0f s)" % (time.time() - t0), flush=True)
    for (model, link, system), done in runs.items():
        results.setdefault((model, link), {})[system] = median_job(done)
    print_table(args, infos, results)
    print_spans(args, results)
    print_proof_costs(args, results)
    if args.json:
        write_json(args, infos, results, made)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.comm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--system", default="ssgd", help=argparse.SUPPRESS)
    ap.add_argument("--bandwidth", default="1gbit,10gbit,none", help="links, tc rates or none (default %(default)s)")
    ap.add_argument("--models", default="inception_bn,resnet20,alexnet")
    ap.add_argument("--network", default=None,
                    help="hosts (a NIC per emulated host: the default where this machine can emulate hosts), "
                         "shared (one shaped loopback: the default elsewhere) or both: shared,hosts")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=1,
                    help="jobs per system, in turn; the table shows the median job, the notes every job's time "
                         "(default %(default)s)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--bucket-size", type=int, default=None, help="bucket_size of cdsgd_mx.Trainer (default: its own)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per job before it is killed")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every number to PATH")
    ap.add_argument("--trace", default=None, metavar="DIR",
                    help="the project's workers write chrome traces to DIR; span medians are printed")
    ap.add_argument("--grads", default="fixed", choices=("fixed", "fresh"),
                    help="fixed: one gradient draw pushed every round, a round waited with waitall "
                         "(docs/performance.md's per-host figures); fresh: a new draw each "
                         "round written before it (untimed), a round waited for as the next forward "
                         "waits, on the weights (default %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="the speed goals: BIT-SGD both ways / one way and our 2-bit / fp32 round (gates), ours "
                         "against stock MXNet and each round against its wire bound at 1 Gbit/s (targets), "
                         "Inception-BN and ResNet-20 at 1 and 10 Gbit/s, 3 jobs per system, fresh gradients, "
                         "2 workers + 1 server, on the default network; prints each ratio beside its goal, exits 1 "
                         "if a gate is missed (about 5 minutes on 2 cores; sets every option but --network)")
    ap.add_argument("--busy-cores", type=int, default=0, metavar="N",
                    help="N processes spin for the whole run, each on a core of its own at the highest priority "
                         "allowed: the jobs have the other cores (default %(default)s; with --check too)")
    ap.add_argument("--link", default="none", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.check:
        args.models, args.bandwidth, args.systems = (",".join(CHECK[k]) for k in ("models", "bandwidth", "systems"))
        args.rounds, args.grads = CHECK["rounds"], CHECK["grads"]
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
    if args.network is None:  # a cluster's shape where this machine can emulate it
        why = emulate.unavailable()
        args.network = "shared" if why else "hosts"
        if why:
            print("note: no emulated hosts here (%s): the shared loopback instead (--network shared)" % why, flush=True)
    networks = [v for v in args.network.split(",") if v]
    bad = [v for v in networks if v not in ("shared", "hosts")]
    if bad or not networks:
        fail("--network: unknown %r (allowed: shared, hosts)" % ",".join(bad))
    # each link on each network, as labels: '1gbit' (shared), '1gbit/hosts'
    args.bandwidth = [link if net == "shared" else link + "/hosts" for net in networks for link in args.bandwidth]
    for opt in ("workers", "servers", "rounds", "repeats", "bucket_size", "timeout"):
        value = getattr(args, opt)
        if value is not None and value < 1:
            fail("--%s must be >= 1, got %r" % (opt.replace("_", "-"), value))
    problem = check_count(args.busy_cores)
    if problem:
        fail(problem)
    print(provenance.machine_line(), flush=True)  # the figures below are this machine's
    with BusyCores(args.busy_cores) as busy:
        if args.busy_cores:
            print(busy.describe(), flush=True)
        if args.check:
            return 1 if run_check(args, {m: model_info(m) for m in args.models}) else 0
        return leader(args)


if __name__ == "__main__":
    sys.exit(main())

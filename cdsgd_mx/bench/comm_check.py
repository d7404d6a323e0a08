"""bench.comm --check: the speed goals of issue 47, before a change is submitted: each system's
job a few times, and each ratio of the median job times beside its goal."""
import statistics

from cdsgd_mx.bench.comm_jobs import run_job
from cdsgd_mx.bench.comm_systems import OPTIMIZER

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

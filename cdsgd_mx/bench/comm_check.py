"""bench.comm --check: the speed goals before a change is submitted. Each system's job a few
times, on per-host NICs where this machine can emulate hosts (else the shared loopback, said in
the output), and each ratio of the median job times beside its goal.

Two kinds of goal:
  gates    what a change must not lose (2 bits both ways against one way, our 2-bit round
           against our fp32 round); a miss makes --check exit 1
  targets  where a round should be on a cluster's network and is not yet everywhere (ours
           against stock MXNet, each round against its full-duplex wire bound, at 1 Gbit/s);
           printed beside the gates with met / NOT MET, and counted apart."""
import statistics

from cdsgd_mx.bench.comm_jobs import outcome, run_job, split_link
from cdsgd_mx.bench.comm_report import bounds
from cdsgd_mx.bench.comm_systems import OPTIMIZER

CHECK = {"models": ["inception_bn", "resnet20"], "bandwidth": ["1gbit", "10gbit"],
         "systems": ["ssgd", "bitsgd", "bitsgd_2bit"], "stock_systems": ["stock_fp32", "stock_2bit"],
         "stock_links": ["1gbit"], "rounds": 20, "grads": "fresh", "repeats": 3}
# (a, b, model or None for any, link) -> the largest a / b allowed
CHECK_GOALS = [("bitsgd_2bit", "bitsgd", "inception_bn", "1gbit", 0.15),
               ("bitsgd_2bit", "bitsgd", "resnet20", "1gbit", 0.4),
               ("bitsgd_2bit", "bitsgd", None, "10gbit", 0.9),
               ("bitsgd", "ssgd", None, "1gbit", 1.0), ("bitsgd", "ssgd", None, "10gbit", 1.0)]
# the same form; b = "bound" is the system's full-duplex wire bound (fp32 or 2-bit push)
CHECK_TARGETS = [("ssgd", "stock_fp32", None, "1gbit", 0.9), ("bitsgd", "stock_2bit", None, "1gbit", 0.9),
                 ("stock_fp32", "bound", "inception_bn", "1gbit", 1.2), ("ssgd", "bound", "inception_bn", "1gbit", 1.2),
                 ("stock_2bit", "bound", "inception_bn", "1gbit", 1.2), ("bitsgd", "bound", "inception_bn", "1gbit", 1.2)]
CHECK_NAMES = {("bitsgd_2bit", "bitsgd"): "BIT-SGD both ways / one way", ("bitsgd", "ssgd"): "our 2-bit / our fp32 round",
               ("ssgd", "stock_fp32"): "our fp32 / stock fp32", ("bitsgd", "stock_2bit"): "our 2-bit / MXNet 2-bit",
               ("stock_fp32", "bound"): "stock fp32 / bound", ("ssgd", "bound"): "our fp32 / bound",
               ("stock_2bit", "bound"): "MXNet 2-bit / bound", ("bitsgd", "bound"): "our 2-bit / bound"}
FP32_ROUNDS = ("ssgd", "stock_fp32")  # bounded by the fp32 wire bound; the others by the 2-bit push's


def check_jobs(args):
    """(model, link label, system) of every job of one repeat: our systems on every link, stock
    MXNet's on CHECK["stock_links"] only (the targets' link)."""
    jobs = []
    for model in args.models:
        for label in args.bandwidth:
            stock = CHECK["stock_systems"] if split_link(label)[0] in CHECK["stock_links"] else []
            jobs += [(model, label, system) for system in list(args.systems) + stock]
    return jobs


def verdicts(args, goals, ms, bound_of):
    """One line per goal that the run's models and links have: (line, met or None if a job
    failed)."""
    out = []
    for a, b, only, link, goal in goals:
        for model in args.models:
            labels = [l for l in args.bandwidth if split_link(l)[0] == link]
            if only not in (None, model) or not labels:
                continue
            label = labels[0]
            ta = ms.get((model, label, a))
            tb = [bound_of(model, label, a)] * len(ta or []) if b == "bound" else ms.get((model, label, b))
            name = CHECK_NAMES[(a, b)]
            if not ta or not tb or None in ta or None in tb:
                out.append(("  %-28s %-12s %-7s a job failed" % (name, model, link), None))
                continue
            ratio = statistics.median(ta) / statistics.median(tb)
            out.append(("  %-28s %-12s %-7s %5.2f (%s)  goal <= %.2f: %s" % (
                name, model, link, ratio, ", ".join("%.2f" % (x / y) for x, y in zip(ta, tb)), goal,
                "met" if ratio <= goal else "NOT MET"), ratio <= goal))
    return out


def run_check(args, infos=None):
    """Each system's job CHECK["repeats"] times, the repeats in turn (so that drift on the
    machine hits every system alike); each ratio of the medians over the jobs beside its goal.
    Separate jobs, as a user's training runs them: a job that alternates two kinds of round
    (paired_pull) starts each short both-ways round right after a long fp32 pull. `infos`:
    model -> bench.comm_systems.model_info (the bounds' sizes). Returns the number of gates
    missed (a job that failed counts as missed)."""
    jobs = check_jobs(args)
    total = len(jobs) * CHECK["repeats"]
    ms = {}
    for rep in range(CHECK["repeats"]):
        for n, (model, label, system) in enumerate(jobs, 1 + rep * len(jobs)):
            print("[%d/%d] %s %s %s ..." % (n, total, model, label, system), end=" ", flush=True)
            r = run_job(args, model, label, system)
            ms.setdefault((model, label, system), []).append(r.get("ms"))
            print(outcome(r), flush=True)
    network = split_link(args.bandwidth[0])[1]
    busy = getattr(args, "busy_cores", 0)
    print("\n--check: %d jobs of each system (%d timed rounds each, %d workers, %d server(s), %s, %s gradients, the "
          "servers' SGD with momentum %g%s); ratio of the median job times (each repeat's ratio in brackets)"
          % (CHECK["repeats"], args.rounds, args.workers, args.servers,
             "a NIC per emulated host" if network == "hosts" else "one shared loopback", args.grads,
             OPTIMIZER["momentum"], ", %d core(s) taken by spinning processes" % busy if busy else ""))

    def bound_of(model, label, system):
        fp32, push2bit, _ = bounds(infos[model], label, args.workers, args.servers)
        return fp32 if system in FP32_ROUNDS else push2bit
    gates = verdicts(args, CHECK_GOALS, ms, bound_of)
    for line, _ in gates:
        print(line)
    missed = sum(1 for _, met in gates if not met)
    targets = verdicts(args, CHECK_TARGETS, ms, bound_of) if infos and network == "hosts" else []
    if targets:
        print("targets on a cluster's network (not gates):")
        for line, _ in targets:
            print(line)
    short = sum(1 for _, met in targets if not met)
    print("--check: %s%s" % ("all goals met" if not missed else "%d goal(s) not met" % missed,
                             "; %d of %d targets not met" % (short, len(targets)) if targets else ""))
    return missed

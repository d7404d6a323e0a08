"""Several seeds: each run's final test accuracy per seed, its mean, spread and failure rate,
and a verdict on each of the paper's claims from the paired differences of runs with the same
seed (cdsgd_mx.experiments.spread), with the markdown lines that report them.
"""
import math

from cdsgd_mx.experiments import spread
from cdsgd_mx.experiments.figures import LABELS
from cdsgd_mx.experiments.runs import final_accuracy


def per_seed(results, name, workers, measure=final_accuracy):
    """{seed: measure(run)} of one run's seeds, leaving out runs without that measure."""
    values = {r.seed: measure(r) for r in results.get((name, workers), [])}
    return {s: v for s, v in values.items() if v is not None}


def mean_std(values, scale=100.0, digits=2):
    s = spread.summarize(values)
    return "%.*f ± %.*f" % (digits, scale * s.mean, digits, scale * s.std)


def judge(c, accs):
    """([(b, spread.Difference of a - b)], verdict) of one claim on {name: {seed: accuracy}}:
    pairs of runs with the same seed, the verdict rule of the claim against each b."""
    diffs, parts = [], []
    for b in c["b"] if isinstance(c["b"], list) else [c["b"]]:
        named = [x for x in (c["a"], b) if isinstance(x, str)]  # a number is a level: the same for every seed
        seeds = sorted(set.intersection(*(set(accs.get(x, {})) for x in named)))
        if not seeds:
            return [], "no test accuracy in these runs"
        d = spread.paired(*([accs[x][s] for s in seeds] if isinstance(x, str) else [x] * len(seeds)
                            for x in (c["a"], b)))
        diffs.append((b, d))
        parts.append(spread.within(d, c["margin"]) if c["rule"] == "within" else spread.exceeds(d, c["margin"]))
    return diffs, spread.all_of(parts)


def judge_claims(exp, results):
    """The experiment's claims, per number of workers: one row each, as JSON-ready dicts."""
    rows = []
    for w in sorted({w for (_, w) in results}):
        accs = {n: per_seed(results, n, w) for (n, ww) in results if ww == w}
        for c in exp.get("claims", []):
            diffs, verdict = judge(c, accs)
            rows.append({"claim": c["text"], "workers": w, "verdict": verdict, "differences": [
                dict(b=b, **{k: (v if math.isfinite(v) else None) for k, v in d._asdict().items()})
                for b, d in diffs]})
    return rows


def claims_lines(rows, quick):
    def pp(v):
        return "%+.2f" % (100 * v) if v is not None else "?"
    lines = ["## The paper's claims, judged on these runs", "",
             "Rule: for each seed, the difference a - b of the final test accuracy of two runs with that seed "
             "(the same initial weights, shard and data order); across seeds, its mean and its 95% interval "
             "from Student's t with n - 1 degrees of freedom (cdsgd_mx.experiments.spread). A claim 'a - b > m' "
             + spread.RULES["exceeds"] + ". A claim '|a - b| <= m' " + spread.RULES["within"]
             + ". A claim against several runs " + spread.RULES["all_of"] + ". One seed gives no interval.", "",
             "| claim (the paper's) | workers | a - b (pp): mean [95% interval] | n | verdict |",
             "|---|---|---|---|---|"]
    for r in rows:
        several = len(r["differences"]) > 1
        cell = "; ".join("%s%s [%s, %s]" % ("vs %s: " % LABELS[d["b"]] if several else "", pp(d["mean"]),
                                            pp(d["low"]), pp(d["high"])) for d in r["differences"]) or "-"
        n = min((d["n"] for d in r["differences"]), default=0)
        lines.append("| %s | %d | %s | %d | **%s** |" % (r["claim"].replace("|", "\\|"), r["workers"], cell, n,
                                                          r["verdict"]))  # a | would end the cell
    if quick:
        lines += ["", "The paper's claims are about full training; these verdicts are about the quick runs "
                      "above (a fraction of it)."]
    return lines


def per_seed_lines(results, names, failures):
    seeds = sorted({r.seed for runs in results.values() for r in runs})
    lines = ["Final test accuracy (%) per seed:", "",
             "| run | workers | " + " | ".join("seed %d" % s for s in seeds) + " |", "|---|---|" + "---|" * len(seeds)]
    for (n, w) in sorted(results, key=lambda key: (key[1], names.index(key[0]))):
        accs = per_seed(results, n, w)
        lines.append("| %s | %d | " % (LABELS[n], w) + " | ".join(
            "%.2f" % (100 * accs[s]) if s in accs else "failed" if (n, w, s) in failures else "-"
            for s in seeds) + " |")
    if failures:
        lines += ["", "Failed runs, left out of the means and of the paired differences (which take the seeds "
                      "where both runs finished):", ""]
        lines += ["- %s, %d workers, seed %d: %s" % (LABELS[n], w, s, why)
                  for (n, w, s), why in sorted(failures.items())]
        lines += ["", "How often each run failed, with the exact (Clopper-Pearson) 95% interval of its rate "
                      "(cdsgd_mx.experiments.spread.rate):", ""]
        lines += ["- %s, %d workers: %d of %d seeds, %.1f%% [%.1f%%, %.1f%%]" % (
            LABELS[n], w, r["failed"], r["n"], 100 * r["rate"], 100 * r["low"], 100 * r["high"])
            for (n, w), r in sorted(failure_rates(results, failures).items(),
                                     key=lambda kv: (kv[0][1], names.index(kv[0][0])))]
    return lines


def failure_rates(results, failures):
    """{(name, workers): failed runs of all seeds run, their rate and its 95% interval}."""
    keys = set(results) | {(n, w) for n, w, _ in failures}
    rates = {}
    for n, w in keys:
        failed = sum(1 for (fn, fw, _) in failures if (fn, fw) == (n, w))
        r = spread.rate(failed, failed + len(results.get((n, w), [])))
        rates[(n, w)] = {"failed": r.k, "n": r.n, "rate": r.rate, "low": r.low, "high": r.high}
    return rates


def accuracy_cells(results, name, workers):
    """(mean ± std, n, min - max) of a run's final test accuracy over its seeds, in %."""
    accs = list(per_seed(results, name, workers).values())
    if not accs:
        return "-", "0", "-"
    s = spread.summarize(accs)
    return mean_std(accs), str(s.n), "%.2f - %.2f" % (100 * s.min, 100 * s.max)

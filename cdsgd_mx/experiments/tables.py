"""The markdown tables scripts/reproduce.py writes (EXPERIMENT.md): the paper's numbers beside
ours for the accuracy curves (fig6, fig7, fig8), the k-sweep (fig9 and table2) and the speedups
with the time model (fig10); with several seeds, mean ± std, n, each seed and the verdicts
(cdsgd_mx.experiments.verdicts); and at each table's end the data, network, numerics and code
versions that made its runs.
"""
import json
import os

from cdsgd_mx.experiments.figures import ALGORITHMS, KSWEEP_RUNS, LABELS
from cdsgd_mx.experiments.runs import epoch_seconds, final_loss
from cdsgd_mx.experiments.verdicts import accuracy_cells, claims_lines, mean_std, per_seed_lines

# what a quick table is good for, at its end
CURVES_QUICK = "Quick runs stop long before the paper's epochs: compare the ordering and the curves' shape, not the " \
    "last digit."
KSWEEP_QUICK = "Quick runs use a subset and a few epochs: epochs here are much shorter than the paper's (compare " \
    "ratios between columns, not seconds)."

def table_curves(sweep, name, exp, results, quick, data, note, names):
    lines = ["# %s: %s%s" % (name, exp["title"], " (quick)" if quick else ""), "",
             "| algorithm | workers | test accuracy (ours) | paper | final training loss | mean iteration (ms) |",
             "|---|---|---|---|---|---|"]
    for (n, workers), runs in sorted(results.items(), key=lambda kv: (kv[0][1], names.index(kv[0][0]))):
        iters, epochs = runs[0].iters, runs[0].epochs
        acc = epochs[-1]["test_accuracy"] if epochs else None
        paper = exp.get("paper", {}).get(workers, {}).get(n, "-")
        tail = iters[-50:]
        lines.append("| %s | %d | %s | %s | %.4f | %.1f |" % (
            LABELS[n], workers, "%.2f%%" % (100 * acc) if acc is not None else "-", paper,
            sum(r["loss"] for r in tail) / len(tail), sum(r["iter_ms"] for r in iters) / len(iters)))
    return table_footer(sweep, lines, data, note, quick and CURVES_QUICK)


def table_footer(sweep, lines, data, note, quick_text):
    """The table's lines, then which data it used, the numerics and code that made the runs,
    the fallback note and the quick caveat."""
    lines += ["", "Data: %s." % data] + provenance_lines(sweep)
    if note:
        lines += ["", "**%s**" % note]
    if quick_text:
        lines += ["", quick_text]
    return "\n".join(lines) + "\n"


def train_network(results):
    """The network the runs' epochs were timed on, in words, from their config.json (runs made
    before the field existed ran on the shared loopback)."""
    kinds = set()
    for runs in results.values():
        for r in runs:
            try:
                cfg = json.load(open(os.path.join(r.folder, "config.json")))
            except (OSError, ValueError, TypeError):
                continue
            rate, workers, servers = cfg.get("bandwidth"), cfg.get("workers"), cfg.get("servers")
            if cfg.get("network") == "hosts":
                kinds.add("%d emulated hosts (%d workers + %d servers), a %s NIC each way per host"
                          % (workers + servers, workers, servers, rate or "unshaped"))
            else:
                kinds.add("every node on one loopback" + (" shaped to %s, shared by all nodes and both directions"
                                                         % rate if rate else ", unshaped"))
    return "Network: " + ("; ".join(sorted(kinds)) if kinds else "unknown (no config.json)") + "."


def table_ksweep(sweep, exp, results, quick, data, note):
    names = [n for n, _ in KSWEEP_RUNS]
    lines = ["# fig9 and table2: %s, k-sensitivity%s" % (exp["title"], " (quick)" if quick else ""), "",
             "## Fig. 9: final test accuracy", "",
             "| workers | " + " | ".join(LABELS[n] for n in names) + " |", "|---|" + "---|" * len(names)]
    worker_counts = sorted({w for (_, w) in results})
    for w in worker_counts:
        accs = [results[(n, w)][0].epochs[-1].get("test_accuracy") for n in names]
        lines.append("| %d | " % w + " | ".join("%.2f%%" % (100 * a) if a is not None else "-" for a in accs) + " |")
    lines += ["", exp["paper_note"], "", "## Table 2: average epoch wall-clock time (s), ours (paper, K80)", "",
              train_network(results), "", "| workers | " + " | ".join(LABELS[n] for n in names) + " |",
              "|---|" + "---|" * len(names)]
    for w in worker_counts:
        paper = exp["paper_epoch_s"].get(w, {})
        lines.append("| %d | " % w + " | ".join(
            "%.2f (%s)" % (epoch_seconds(results[(n, w)][0].iters), paper.get(n, "-")) for n in names) + " |")
    return table_footer(sweep, lines, data, note, quick and KSWEEP_QUICK)


def table_curves_seeds(sweep, name, exp, results, quick, data, note, names, claims):
    lines = ["# %s: %s%s, several seeds" % (name, exp["title"], " (quick)" if quick else ""), "",
             "| algorithm | workers | test accuracy (%), mean ± std | n | min - max | paper | final training loss, "
             "mean | mean iteration (ms) |", "|---|---|---|---|---|---|---|---|"]
    for (n, workers), runs in sorted(results.items(), key=lambda kv: (kv[0][1], names.index(kv[0][0]))):
        iters = [r for run in runs for r in run.iters]
        lines.append("| %s | %d | %s | %s | %s | %s | %.4f | %.1f |" % (
            (LABELS[n], workers) + accuracy_cells(results, n, workers)
            + (exp.get("paper", {}).get(workers, {}).get(n, "-"), sum(map(final_loss, runs)) / len(runs),
               sum(r["iter_ms"] for r in iters) / len(iters))))
    lines += [""] + per_seed_lines(results, names, sweep.failed) + [""] + claims_lines(claims, quick)
    return table_footer(sweep, lines, data, note, quick and CURVES_QUICK)


def table_ksweep_seeds(sweep, exp, results, quick, data, note, claims):
    names = [n for n, _ in KSWEEP_RUNS]
    worker_counts = sorted({w for (_, w) in results})
    head = ["| workers | " + " | ".join(LABELS[n] for n in names) + " |", "|---|" + "---|" * len(names)]
    lines = ["# fig9 and table2: %s, k-sensitivity%s, several seeds" % (exp["title"], " (quick)" if quick else ""),
             "", "## Fig. 9: final test accuracy (%), mean ± std (n)", ""] + head
    for w in worker_counts:
        cells = [accuracy_cells(results, n, w) for n in names]
        lines.append("| %d | " % w + " | ".join("%s (%s)" % (c[0], c[1]) for c in cells) + " |")
    lines += [""] + per_seed_lines(results, names, sweep.failed)
    lines += ["", exp["paper_note"], "", "## Table 2: average epoch wall-clock time (s), mean ± std over seeds "
              "(paper, K80)", "", train_network(results), ""] + head
    for w in worker_counts:
        paper = exp["paper_epoch_s"].get(w, {})
        lines.append("| %d | " % w + " | ".join("%s (%s)" % (
            mean_std([epoch_seconds(r.iters) for r in results[(n, w)]], scale=1.0), paper.get(n, "-"))
            for n in names) + " |")
    lines += [""] + claims_lines(claims, quick)
    return table_footer(sweep, lines, data, note, quick and KSWEEP_QUICK)


def provenance_lines(sweep):
    """Which code and numerics made the runs, for the table's end."""
    golden, versions = sweep.golden, sweep.code_versions()
    lines = ["", "Numerics: %s (cdsgd_mx.numerics)%s." % (sweep.numerics_used(), "; golden run (the test's pinned "
                                                         "numbers, tests/experiments/test_golden.py): loss %r, test "
                                                         "accuracy %r" % (golden["loss"], golden["test_accuracy"])
                                                         if golden else "")]
    if len(versions) == 1:
        lines += ["", "Code: every run at %s. Each run's command, commit, CPU and versions are in seeds.json "
                      "(`provenance`); `python scripts/reproduce.py verify DIR --sample N` reruns some." % next(iter(versions))]
    else:
        lines += ["", "**Mixed code versions (--allow-mixed)**: " + "; ".join(
            "%d runs at %s" % (n, cid) for cid, n in sorted(versions.items(), key=lambda kv: -kv[1])) + "."]
    return lines


def network_label(case, workers, servers):
    if case.get("network") == "hosts":
        return "%d emulated hosts, a %s NIC each way per host" % (workers + servers, case["bandwidth"])
    return "one loopback shaped to %s that every node and both directions share" % case["bandwidth"]


def table_speed(exp, cases, quick, workers):
    servers = cases[0].get("servers", 1) if cases else 1
    lines = ["# fig10: speedup over BIT-SGD%s" % (" (quick)" if quick else ""), "",
             "%d workers, synthetic data, k = 5. Speedup = T(BIT-SGD) / T(algorithm) - 1." % workers, "",
             "Network: " + "; ".join(sorted({network_label(c, workers, servers) for c in cases})) + ".", "",
             "| model | batch | link | S-SGD | OD-SGD | CD-SGD | BIT-SGD ms/iter |", "|---|---|---|---|---|---|---|"]
    for c in cases:
        s = c["speedup_over_bitsgd"]
        lines.append("| %s | %d | %s | %+.0f%% | %+.0f%% | %+.0f%% | %.1f |" % (
            c["model"], c["batch"], c["bandwidth"], 100 * s["ssgd"], 100 * s["odsgd"], 100 * s["cdsgd"],
            c["measured_ms"]["bitsgd"]))
    cycled = [c for c in cases if c.get("per_cycle_speedup_over_bitsgd")]
    if cycled:
        split = any(c.get("jobs", 1) > 1 for c in cycled)
        lines += ["", ("Timed in one job per case and bucket size, the algorithms taking turns in blocks (bench.overlap "
                       "--interleaved; the algorithms on buckets of another size or pull in a job of their own): "
                       "cycle after cycle. Cycle by cycle:") if split else
                  ("Timed in one job per case, the algorithms taking turns in blocks (bench.overlap "
                   "--interleaved): every algorithm ran on the same processes, cycle after cycle. Cycle by cycle:"), "",
                  "| model | batch | link | CD-SGD over BIT-SGD | CD-SGD over S-SGD |", "|---|---|---|---|---|"]
        for c in cycled:
            pc = c["per_cycle_speedup_over_bitsgd"]
            over_ssgd = [(1 + cd) / (1 + ss) - 1 for cd, ss in zip(pc["cdsgd"], pc["ssgd"])]
            lines.append("| %s | %d | %s | %s | %s |" % (c["model"], c["batch"], c["bandwidth"],
                                                        ", ".join("%+.0f%%" % (100 * v) for v in pc["cdsgd"]),
                                                        ", ".join("%+.0f%%" % (100 * v) for v in over_ssgd)))
    both = [c for c in cases if "cdsgd_2bit" in c["measured_ms"]]
    if both:  # --pull-compression 2bit: both ways against one way, in the same jobs
        lines += ["", "2 bits both ways (`--pull-compression 2bit`), in the same jobs: ms per iteration, and "
                  "CD-SGD both ways against CD-SGD cycle by cycle (T(CD-SGD) / T(CD-SGD both ways) - 1):", "",
                  "| model | batch | link | BIT-SGD | BIT-SGD both ways | CD-SGD | CD-SGD both ways | "
                  "CD-SGD both ways over CD-SGD | per cycle |", "|---|---|---|---|---|---|---|---|---|"]
        for c in both:
            m = c["measured_ms"]
            one, two = c["per_cycle_speedup_over_bitsgd"].get("cdsgd"), c["per_cycle_speedup_over_bitsgd"].get("cdsgd_2bit")
            cycles = ", ".join("%+.0f%%" % (100 * ((1 + b) / (1 + a) - 1)) for a, b in zip(one, two)) if one and two else "-"
            lines.append("| %s | %d | %s | %.1f | %.1f | %.1f | %.1f | %+.0f%% | %s |" % (
                c["model"], c["batch"], c["bandwidth"], m["bitsgd"], m["bitsgd_2bit"], m["cdsgd"], m["cdsgd_2bit"],
                100 * (m["cdsgd"] / m["cdsgd_2bit"] - 1), cycles))
    lines += ["", "Paper (CD-SGD over BIT-SGD, as the text lists them per panel, models in the figure's order): "
              + "; ".join("%s: %s" % kv for kv in exp["paper"].items()) + ".", "",
              "## Time model (eqs. 2-7) against measurement", "",
              "Costs calibrated per case: tau = forward/backward alone, phi = an fp32 round alone, "
              "psi + delta = a 2-bit round alone.", "",
              "| model | batch | link | tau | phi | psi+delta | " + " | ".join(
                  "%s measured / predicted" % LABELS[a] for a in ALGORITHMS) + " |",
              "|---|---|---|---|---|---|" + "---|" * len(ALGORITHMS)]
    errors = []
    for c in cases:
        cells = []
        for a in ALGORITHMS:
            m, p = c["measured_ms"][a], c["predicted_ms"][a]
            errors.append(abs(m - p) / m)
            cells.append("%.0f / %.0f" % (m, p))
        lines.append("| %s | %d | %s | %.0f | %.0f | %.0f | %s |" % (
            c["model"], c["batch"], c["bandwidth"], c["tau_ms"], c["phi_ms"], c["psi_plus_delta_ms"], " | ".join(cells)))
    lines += ["", "Mean absolute error of the model: %.0f%% (max %.0f%%)." % (
        100 * sum(errors) / len(errors), 100 * max(errors))]
    if quick:
        lines += ["", "Quick: fewer workers, one model and batch, a few iterations; the full version runs the "
                      "paper's 4 models x 3 batches x 2 links with 4 workers."]
    return "\n".join(lines) + "\n"

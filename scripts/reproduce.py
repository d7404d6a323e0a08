#!/usr/bin/env python
"""Reproduce one result of the paper's evaluation: run its set of runs, then write the raw logs,
PNG plots styled after the paper's figure and a markdown table with the paper's numbers beside
ours, all into one folder.

    python scripts/reproduce.py fig6 [--quick] [--out DIR] [--iterations N]

Implemented: fig6 (LeNet-5 on MNIST, 2 and 4 workers, all four algorithms). --quick runs 2
workers for a few hundred iterations (minutes on a 2-core machine); the full version runs
2 and 4 workers for the config's epochs.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGORITHMS = ["ssgd", "bitsgd", "odsgd", "cdsgd"]
LABELS = {"ssgd": "S-SGD", "bitsgd": "BIT-SGD", "odsgd": "OD-SGD", "cdsgd": "CD-SGD"}
EXPERIMENTS = {
    "fig6": {
        "config": "configs/fig6_lenet_mnist.yaml",
        "workers": [2, 4], "quick_workers": [2], "quick_iterations": 300,
        # the paper's final test accuracy, 2 workers (section 4, Fig. 6)
        "paper": {2: {"ssgd": "99.15%", "odsgd": "99.12%", "cdsgd": "99.14%", "bitsgd": "below 99%"}},
        "title": "LeNet-5 on MNIST",
    },
}
PENDING = ("fig7", "fig8", "fig9", "table2", "fig10")


def run_one(exp, alg, workers, out, iterations):
    overrides = ["algorithm=" + alg, "workers=%d" % workers, "out=" + out]
    if iterations:
        overrides += ["epochs=null", "iterations=%d" % iterations]
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), "--config",
           os.path.join(ROOT, exp["config"])] + overrides
    print("reproduce: %s, %d workers ..." % (LABELS[alg], workers), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    with open(os.path.join(out, "job.log") if os.path.isdir(out) else out + ".log", "w") as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit("reproduce: the %s run with %d workers failed (see %s)" % (alg, workers, out))
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics-rank0.jsonl"))]
    return [r for r in rows if "iteration" in r], [r for r in rows if "iteration" not in r]


def smooth(values, width):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= width:
            acc -= values[i - width]
        out.append(acc / min(i + 1, width))
    return out


def plot(name, exp, results, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    for workers in sorted({w for (_, w) in results}):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for alg in ALGORITHMS:
            if (alg, workers) not in results:
                continue
            iters, epochs = results[(alg, workers)]
            losses = [r["loss"] for r in iters]
            axes[0].plot([r["iteration"] for r in iters], smooth(losses, 25), label=LABELS[alg])
            accs = [(e["epoch"] + 1, 100 * e["test_accuracy"]) for e in epochs if e.get("test_accuracy") is not None]
            if accs:
                axes[1].plot([a for a, _ in accs], [b for _, b in accs], marker="o", label=LABELS[alg])
        axes[0].set(xlabel="iteration", ylabel="training loss (smoothed)", title="%s, %d workers" % (exp["title"], workers))
        axes[1].set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy")
        if max(len(results[k][1]) for k in results if k[1] == workers) <= 1:  # one evaluation: bars
            axes[1].clear()
            algs = [a for a in ALGORITHMS if (a, workers) in results]
            accs = [100 * (results[(a, workers)][1][-1]["test_accuracy"] or 0) for a in algs]
            axes[1].bar([LABELS[a] for a in algs], accs, color=["C0", "C1", "C2", "C3"][:len(algs)])
            axes[1].set(ylabel="test accuracy (%)", title="test accuracy after the run",
                        ylim=(max(0, min(accs) - 5), min(100, max(accs) + 2)))
            for i, v in enumerate(accs):
                axes[1].text(i, v, "%.2f" % v, ha="center", va="bottom")
        for ax in axes:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
        fig.tight_layout()
        path = os.path.join(out_dir, "%s_%dworkers.png" % (name, workers))
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def table(name, exp, results, quick, data):
    lines = ["# %s: %s%s" % (name, exp["title"], " (quick)" if quick else ""), "",
             "| algorithm | workers | test accuracy (ours) | paper | final training loss | mean iteration (ms) |",
             "|---|---|---|---|---|---|"]
    for (alg, workers), (iters, epochs) in sorted(results.items(), key=lambda kv: (kv[0][1], ALGORITHMS.index(kv[0][0]))):
        acc = epochs[-1]["test_accuracy"] if epochs else None
        paper = exp["paper"].get(workers, {}).get(alg, "-")
        tail = iters[-50:]
        lines.append("| %s | %d | %s | %s | %.4f | %.1f |" % (
            LABELS[alg], workers, "%.2f%%" % (100 * acc) if acc is not None else "-", paper,
            sum(r["loss"] for r in tail) / len(tail), sum(r["iter_ms"] for r in iters) / len(iters)))
    lines += ["", "Data: %s." % data,
              "Quick runs stop long before the paper's epochs: compare the ordering and the curves' shape, "
              "not the last digit." if quick else ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="scripts/reproduce.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", help="one of %s" % ", ".join(list(EXPERIMENTS) + list(PENDING)))
    ap.add_argument("--quick", action="store_true", help="a reduced version that finishes in minutes")
    ap.add_argument("--out", default=None, help="results folder (default results/EXPERIMENT[-quick])")
    ap.add_argument("--iterations", type=int, default=None, help="override the iterations of each run")
    args = ap.parse_args(argv)
    if args.experiment in PENDING:
        ap.error("experiment %s: not reproducible by this version yet (implemented: %s)"
                 % (args.experiment, ", ".join(EXPERIMENTS)))
    if args.experiment not in EXPERIMENTS:
        ap.error("experiment must be one of %s, got %r" % (", ".join(EXPERIMENTS), args.experiment))
    if args.iterations is not None and args.iterations < 1:
        ap.error("--iterations must be >= 1")
    exp = EXPERIMENTS[args.experiment]
    out_dir = os.path.abspath(args.out or os.path.join("results", args.experiment + ("-quick" if args.quick else "")))
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    iterations = args.iterations or (exp["quick_iterations"] if args.quick else None)
    results = {}
    for workers in (exp["quick_workers"] if args.quick else exp["workers"]):
        for alg in ALGORITHMS:
            run_dir = os.path.join(out_dir, "logs", "%s-%dworkers" % (alg, workers))
            results[(alg, workers)] = run_one(exp, alg, workers, run_dir, iterations)
    data = json.load(open(os.path.join(out_dir, "logs", "cdsgd-%dworkers" % min(w for _, w in results),
                                       "config.json")))["data"]
    plots = plot(args.experiment, exp, results, out_dir)
    md = table(args.experiment, exp, results, args.quick, data)
    md += "\n" + "\n".join("![%s](%s)" % (os.path.basename(p), os.path.basename(p)) for p in plots) + "\n"
    with open(os.path.join(out_dir, "%s.md" % args.experiment), "w") as f:
        f.write(md)
    print(md)
    print("reproduce: results in %s" % out_dir)


if __name__ == "__main__":
    main()

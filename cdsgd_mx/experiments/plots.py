"""The PNG plots scripts/reproduce.py writes, styled after the paper's figures: training loss and
test accuracy per number of workers (Figs. 6-8), test accuracy per k (Fig. 9), speedups over
BIT-SGD and the time model against measurement (Fig. 10); with several seeds, each curve is the
mean inside its min-max band. matplotlib is loaded (headless) only when a plot is drawn.
"""
import os

import numpy as np

from cdsgd_mx.cluster.shaping import rate_bits
from cdsgd_mx.experiments.figures import ALGORITHMS, KSWEEP_RUNS, LABELS


def smooth(values, width):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= width:
            acc -= values[i - width]
        out.append(acc / min(i + 1, width))
    return out


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def band(ax, x, rows, label, **style):
    """The mean over seeds of rows (one list per seed, along x) and, with several seeds, the
    band from their minimum to their maximum."""
    n = min(len(x), min(len(r) for r in rows))
    values = np.array([r[:n] for r in rows], dtype=float)
    line, = ax.plot(x[:n], values.mean(axis=0), label=label if len(rows) == 1 else "%s (n=%d)" % (label, len(rows)),
                    **style)
    if len(rows) > 1:
        ax.fill_between(x[:n], values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2, linewidth=0)


def test_accuracies(epochs):
    """(epoch number from 1, test accuracy in %) of each evaluated epoch."""
    return [(e["epoch"] + 1, 100 * e["test_accuracy"]) for e in epochs if e.get("test_accuracy") is not None]


def plot_accuracy(ax, runs, label, **style):
    """Test accuracy per epoch: the mean over seeds, with the min-max band."""
    per_seed = [test_accuracies(r.epochs) for r in runs]
    if per_seed[0]:
        band(ax, [a for a, _ in per_seed[0]], [[b for _, b in accs] for accs in per_seed], label, marker="o", **style)


def seeds_title(results):
    n = max(len(runs) for runs in results.values())
    return "" if n == 1 else "\nmean of %d seeds, band: min to max" % n  # a line of its own: long titles


def plot_curves(name, exp, results, out_dir, names):
    """Per number of workers: training loss and test accuracy, as the paper's Figs. 6-8; with
    several seeds, the mean curve of each algorithm inside its min-max band."""
    plt = _pyplot()
    paths = []
    for workers in sorted({w for (_, w) in results}):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        present = [n for n in names if (n, workers) in results]
        for n in present:
            runs = results[(n, workers)]
            band(axes[0], [r["iteration"] for r in runs[0].iters],
                 [smooth([r["loss"] for r in run.iters], 25) for run in runs], LABELS[n])
            plot_accuracy(axes[1], runs, LABELS[n])
        axes[0].set(xlabel="iteration", ylabel="training loss (smoothed)",
                    title="%s, %d workers%s" % (exp["title"], workers, seeds_title(results)))
        axes[1].set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy")
        axes[1].xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        if max(len(run.epochs) for n in present for run in results[(n, workers)]) <= 1:  # one evaluation: bars
            axes[1].clear()
            per_seed = [[100 * (run.epochs[-1]["test_accuracy"] or 0) for run in results[(n, workers)]]
                        for n in present]
            accs = [sum(v) / len(v) for v in per_seed]
            axes[1].bar([LABELS[n] for n in present], accs, color=["C%d" % i for i in range(len(present))])
            if max(len(v) for v in per_seed) > 1:  # each seed a dot, the bar their mean, the whisker min to max
                for i, v in enumerate(per_seed):
                    axes[1].errorbar(i, accs[i], yerr=[[accs[i] - min(v)], [max(v) - accs[i]]], color="k", capsize=4)
                    axes[1].scatter([i] * len(v), v, color="k", s=8, zorder=3)
            low, high = min(min(v) for v in per_seed), max(max(v) for v in per_seed)
            axes[1].set(ylabel="test accuracy (%)", title="test accuracy after the run",
                        ylim=(max(0, low - 5), min(100, high + 2)))
            for i, v in enumerate(accs):
                axes[1].text(i, max(per_seed[i]), "%.2f" % v, ha="center", va="bottom")
        for ax in axes:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
        path = save_figure(plt, fig, out_dir, "%s_%dworkers.png" % (name, workers))
        paths.append(path)
    return paths


def save_figure(plt, fig, out_dir, name):
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ksweep(exp, results, out_dir):
    """Fig. 9: test accuracy per epoch for each k beside S-SGD and BIT-SGD, one panel per
    number of workers."""
    plt = _pyplot()
    worker_counts = sorted({w for (_, w) in results})
    fig, axes = plt.subplots(1, len(worker_counts), figsize=(5.5 * len(worker_counts), 4), squeeze=False)
    for ax, workers in zip(axes[0], worker_counts):
        for n, _ in KSWEEP_RUNS:
            if (n, workers) in results:
                plot_accuracy(ax, results[(n, workers)], LABELS[n], linestyle="--" if n in ("ssgd", "bitsgd") else "-")
        ax.set(xlabel="epoch", ylabel="test accuracy (%)",
               title="%s, %d workers%s" % (exp["title"], workers, seeds_title(results)))
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    path = save_figure(plt, fig, out_dir, "fig9.png")
    return [path]


def plot_speed(cases, out_dir):
    plt = _pyplot()
    # panels from the slowest link up
    panels = sorted({(c["batch"], c["bandwidth"]) for c in cases}, key=lambda p: (rate_bits(p[1]), p[0]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (batch, bw) in zip(axes[0], panels):
        sel = [c for c in cases if (c["batch"], c["bandwidth"]) == (batch, bw)]
        x = np.arange(len(sel))
        shown = [a for a in ["ssgd", "odsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit"] if a in sel[0]["speedup_over_bitsgd"]]
        width = 0.8 / len(shown)
        for i, alg in enumerate(shown):
            vals = [100 * c["speedup_over_bitsgd"][alg] for c in sel]
            bars = ax.bar(x + (i - (len(shown) - 1) / 2) * width, vals, width, label=LABELS[alg])
            ax.bar_label(bars, fmt="%+.0f%%", fontsize=8)
        ax.axhline(0, color="k", linewidth=0.8)
        ax.margins(y=0.25)  # room for the bar labels above the legend
        ax.set_xticks(x)
        ax.set_xticklabels([c["model"] for c in sel])
        ax.set(ylabel="speedup over BIT-SGD (%)", title="batch %d per worker, %s link" % (batch, bw))
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    p1 = save_figure(plt, fig, out_dir, "fig10.png")
    fig, ax = plt.subplots(figsize=(5, 5))
    top = 0
    for i, alg in enumerate(ALGORITHMS):
        xs = [c["predicted_ms"][alg] for c in cases]
        ys = [c["measured_ms"][alg] for c in cases]
        top = max([top] + xs + ys)
        ax.scatter(xs, ys, label=LABELS[alg], color="C%d" % i)
    ax.plot([0, top * 1.05], [0, top * 1.05], "k--", linewidth=0.8, label="measured = predicted")
    ax.set(xlabel="predicted iteration time (ms), eqs. 2-7", ylabel="measured iteration time (ms)",
           title="time model vs measurement")
    ax.grid(alpha=0.3)
    ax.legend()
    p2 = save_figure(plt, fig, out_dir, "fig10_model.png")
    return [p1, p2]


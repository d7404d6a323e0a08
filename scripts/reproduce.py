#!/usr/bin/env python
"""Reproduce one result of the paper's evaluation: run its set of runs, then write the raw logs,
PNG plots styled after the paper's figure and a markdown table with the paper's numbers beside
ours, all into one folder.

    python scripts/reproduce.py EXPERIMENT [--quick] [--out DIR] [--iterations N] [--data-dir D]

EXPERIMENT: fig6 (LeNet-5/MNIST), fig7 (Inception-BN/CIFAR-10), fig8 (ResNet-50/ImageNet),
fig9 and table2 (ResNet-20 k-sensitivity: the same runs), fig10 (speedups over BIT-SGD on
synthetic data, with the time model's predictions). --quick is a reduced version that finishes
in minutes on a 2-core machine (fewer workers, samples, epochs or cases); the full version is
what a user with a cluster runs. Where CIFAR-10 is not on disk the CIFAR experiments fall back
to Fashion-MNIST, and where ImageNet is missing fig8 --quick runs on synthetic data; every
result says which data it used.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ALGORITHMS = ["ssgd", "bitsgd", "odsgd", "cdsgd"]
LABELS = {"ssgd": "S-SGD", "bitsgd": "BIT-SGD", "odsgd": "OD-SGD", "cdsgd": "CD-SGD",
          "k2": "CD-SGD k=2", "k5": "CD-SGD k=5", "k10": "CD-SGD k=10", "k20": "CD-SGD k=20"}
CURVE_RUNS = [(a, ["algorithm=" + a]) for a in ALGORITHMS]
KSWEEP_RUNS = [("ssgd", ["algorithm=ssgd"]), ("bitsgd", ["algorithm=bitsgd"])] + \
    [("k%d" % k, ["algorithm=cdsgd", "k=%d" % k]) for k in (2, 5, 10, 20)]

EXPERIMENTS = {
    "fig6": {
        "kind": "curves", "config": "configs/fig6_lenet_mnist.yaml", "title": "LeNet-5 on MNIST",
        "workers": [2, 4], "quick_workers": [2], "quick": ["epochs=null", "iterations=300"],
        # the paper's final test accuracy (section 4.2, Fig. 6)
        "paper": {2: {"ssgd": "99.15%", "odsgd": "99.12%", "cdsgd": "99.14%", "bitsgd": "below 99%"}},
    },
    "fig7": {
        "kind": "curves", "config": "configs/fig7_inception_bn_cifar10.yaml", "title": "Inception-BN on CIFAR-10",
        "workers": [2, 4], "quick_workers": [2],
        "quick": ["epochs=3", "train_samples=1024", "test_samples=1000", "warmup_steps=10"],
        "fallback": ("cifar10", "fashion_mnist"),
        "paper": {2: {"cdsgd": "94.15%", "odsgd": "93.99%", "ssgd": "94.00%", "bitsgd": "92.69%"},
                  4: {"cdsgd": "93.50%", "odsgd": "93.30% or 91.83% (unattributed)", "ssgd": "-",
                      "bitsgd": "93.30% or 91.83% (unattributed)"}},
    },
    "fig8": {
        "kind": "curves", "config": "configs/fig8_resnet50_imagenet.yaml", "title": "ResNet-50 on ImageNet",
        "workers": [4], "quick_workers": [2],
        "quick": ["epochs=null", "iterations=8", "batch_size=4", "servers=1", "warmup_steps=2",
                  "test_samples=64", "checkpoint=false"],
        "needs_imagenet": True,
        # the four top-1 accuracies in the text's order (CD, OD, S, BIT; section 4.2)
        "paper": {4: {"cdsgd": "72.4%", "odsgd": "72.6%", "ssgd": "72.7%", "bitsgd": "72.0%"}},
    },
    "fig9": {
        "kind": "ksweep", "config": "configs/fig9_resnet20_cifar10.yaml", "title": "ResNet-20 on CIFAR-10",
        "workers": [2, 4], "quick_workers": [2],
        "quick": ["epochs=3", "train_samples=2048", "test_samples=1000", "warmup_steps=10", "lr_steps=[]"],
        "fallback": ("cifar10", "fashion_mnist"),
        # Table 2: average epoch wall-clock time (s) on the K80 cluster
        "paper_epoch_s": {4: {"ssgd": 2.24, "bitsgd": 2.22, "k2": 1.79, "k5": 1.78, "k10": 1.78, "k20": 1.76},
                          2: {"ssgd": 4.32, "bitsgd": 3.61, "k2": 3.48, "k5": 3.44, "k10": 3.46, "k20": 3.44}},
        "paper_note": "Paper, Fig. 9b (4 workers): k=20 reaches 89.68%, BIT-SGD 88.81%; k=2 is best and beats "
                      "S-SGD; k=5 is close to S-SGD.",
    },
    "fig10": {
        "kind": "speed", "config": "configs/fig10_speedup.yaml", "title": "Speedup over BIT-SGD",
        "quick": {"models": ["inception_bn"], "batches": [32], "bandwidths": ["1gbit", "10gbit"], "workers": 2,
                  "iterations": 40, "warmup": 2},  # interleaved: 4 cycles of 2k timed steps
        # CD-SGD's speedup ratios as the text lists them per panel (section 4.4), K80 and V100
        "paper": {"K80, batch 32": "0%, 43%, 33%, 32%", "V100, batch 32": "24%, 43%, 39%, 44%",
                  "V100, batch 64": "28%, 35%, 71%, 89%", "V100, batch 128": "3%, 45%, 2%, 89%"},
    },
}
EXPERIMENTS["table2"] = EXPERIMENTS["fig9"]


def say(msg):
    print("reproduce: " + msg, flush=True)


# ---- running ---------------------------------------------------------------------------------

REPLOT = False  # --replot: read the logs already in --out instead of running


def run_train(exp, name, overrides, workers, out):
    if REPLOT:
        return read_metrics(out)
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), "--config", os.path.join(ROOT, exp["config"])] \
        + overrides + ["workers=%d" % workers, "out=" + out]
    say("%s, %d workers ..." % (LABELS[name], workers))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "job.log"), "w") as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit("reproduce: the %s run with %d workers failed (see %s):\n%s"
                 % (LABELS[name], workers, os.path.join(out, "job.log"), (proc.stdout + proc.stderr)[-1500:]))
    return read_metrics(out)


def read_metrics(out):
    """(per-iteration rows, per-epoch rows) of rank 0's log in a run folder."""
    path = os.path.join(out, "metrics-rank0.jsonl")
    if not os.path.exists(path):
        sys.exit("reproduce: no log at %s (--replot needs the folder of an earlier run)" % path)
    rows = [json.loads(line) for line in open(path)]
    return [r for r in rows if "iteration" in r], [r for r in rows if "iteration" not in r]


def data_overrides(exp, quick, data_dir):
    """Overrides that pick the data: data_dir, and the fallback where the data set is missing.
    Returns (overrides, note); with a fallback, exp's title names the data really used."""
    from cdsgd_mx import data
    from cdsgd_mx.experiments import config as C
    cfg = C.load(os.path.join(ROOT, exp["config"]), ["data_dir=" + data_dir] if data_dir else [])
    out = ["data_dir=" + data_dir] if data_dir else []
    if "fallback" in exp and data.find_cifar10(cfg.data_dir) is None:
        out.append("dataset=" + exp["fallback"][1])
        exp["title"] = exp["title"].replace("CIFAR-10", "Fashion-MNIST (no CIFAR-10 here)")
        return out, "CIFAR-10 was not found on this machine: these runs use Fashion-MNIST instead."
    if exp.get("needs_imagenet") and data.find_imagenet(cfg.data_dir) is None:
        if not quick:
            sys.exit("reproduce: %s needs ImageNet: data_dir must hold train.rec, train.idx, val.rec and val.idx "
                     "(MXNet's im2rec), e.g. --data-dir /data/imagenet; --quick runs a synthetic pipeline check"
                     % exp["config"])
        out.append("dataset=synthetic")
        exp["title"] = exp["title"].replace("ImageNet", "synthetic data (no ImageNet here)")
        return out, ("ImageNet was not found on this machine: a pipeline check on synthetic ImageNet-shaped data "
                     "(speed and plumbing only; accuracies mean nothing).")
    return out, ""


def ensure_data(exp, overrides):
    """The runs' data on disk before the first job (each job would fetch it too, but one line
    here beats the same failure in every run)."""
    from cdsgd_mx import data
    from cdsgd_mx.experiments import config as C
    cfg = C.load(os.path.join(ROOT, exp["config"]), overrides)
    try:
        data.ensure(cfg.dataset, cfg.data_dir)
    except data.DataMissing as e:
        sys.exit("reproduce: %s" % e)


def run_curves(exp, quick, out_dir, iterations, data_dir, runs):
    extra, note = data_overrides(exp, quick, data_dir)
    if not REPLOT:
        ensure_data(exp, extra)
    extra += exp["quick"] if quick else []
    if iterations:
        extra += ["epochs=null", "iterations=%d" % iterations]
    results = {}
    for workers in (exp["quick_workers"] if quick else exp["workers"]):
        for name, overrides in runs:
            run_dir = os.path.join(out_dir, "logs", "%s-%dworkers" % (name, workers))
            results[(name, workers)] = run_train(exp, name, overrides + extra, workers, run_dir)
    first = os.path.join(out_dir, "logs", "%s-%dworkers" % (runs[-1][0], min(w for _, w in results)), "config.json")
    return results, json.load(open(first))["data"], note


# ---- curves: fig6, fig7, fig8 --------------------------------------------------------------------

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


def plot_curves(name, exp, results, out_dir, names):
    """Per number of workers: training loss and test accuracy, as the paper's Figs. 6-8."""
    plt = _pyplot()
    paths = []
    for workers in sorted({w for (_, w) in results}):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        present = [n for n in names if (n, workers) in results]
        for n in present:
            iters, epochs = results[(n, workers)]
            axes[0].plot([r["iteration"] for r in iters], smooth([r["loss"] for r in iters], 25), label=LABELS[n])
            accs = [(e["epoch"] + 1, 100 * e["test_accuracy"]) for e in epochs if e.get("test_accuracy") is not None]
            if accs:
                axes[1].plot([a for a, _ in accs], [b for _, b in accs], marker="o", label=LABELS[n])
        axes[0].set(xlabel="iteration", ylabel="training loss (smoothed)", title="%s, %d workers" % (exp["title"], workers))
        axes[1].set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy")
        axes[1].xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        if max(len(results[(n, workers)][1]) for n in present) <= 1:  # one evaluation: bars
            axes[1].clear()
            accs = [100 * (results[(n, workers)][1][-1]["test_accuracy"] or 0) for n in present]
            axes[1].bar([LABELS[n] for n in present], accs, color=["C%d" % i for i in range(len(present))])
            axes[1].set(ylabel="test accuracy (%)", title="test accuracy after the run",
                        ylim=(max(0, min(accs) - 5), min(100, max(accs) + 2)))
            for i, v in enumerate(accs):
                axes[1].text(i, v, "%.2f" % v, ha="center", va="bottom")
        for ax in axes:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
        path = save_figure(plt, fig, out_dir, "%s_%dworkers.png" % (name, workers))
        paths.append(path)
    return paths


def epoch_seconds(iters):
    """Mean training wall time per epoch (s): the sum of iteration times of each epoch (data
    loading and steps; evaluation excluded), averaged over the epochs."""
    per = {}
    for r in iters:
        per.setdefault(r["epoch"], []).append(r["iter_ms"])
    return sum(sum(v) for v in per.values()) / 1e3 / len(per)


def table_curves(name, exp, results, quick, data, note, names):
    lines = ["# %s: %s%s" % (name, exp["title"], " (quick)" if quick else ""), "",
             "| algorithm | workers | test accuracy (ours) | paper | final training loss | mean iteration (ms) |",
             "|---|---|---|---|---|---|"]
    for (n, workers), (iters, epochs) in sorted(results.items(), key=lambda kv: (kv[0][1], names.index(kv[0][0]))):
        acc = epochs[-1]["test_accuracy"] if epochs else None
        paper = exp.get("paper", {}).get(workers, {}).get(n, "-")
        tail = iters[-50:]
        lines.append("| %s | %d | %s | %s | %.4f | %.1f |" % (
            LABELS[n], workers, "%.2f%%" % (100 * acc) if acc is not None else "-", paper,
            sum(r["loss"] for r in tail) / len(tail), sum(r["iter_ms"] for r in iters) / len(iters)))
    return table_footer(lines, data, note, quick and "Quick runs stop long before the paper's epochs: compare "
                                                      "the ordering and the curves' shape, not the last digit.")


def table_footer(lines, data, note, quick_text):
    """The table's lines, then which data it used, the fallback note and the quick caveat."""
    lines += ["", "Data: %s." % data]
    if note:
        lines += ["", "**%s**" % note]
    if quick_text:
        lines += ["", quick_text]
    return "\n".join(lines) + "\n"


def save_figure(plt, fig, out_dir, name):
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---- k-sweep: fig9 and table2 --------------------------------------------------------------------

def plot_ksweep(exp, results, out_dir):
    """Fig. 9: test accuracy per epoch for each k beside S-SGD and BIT-SGD, one panel per
    number of workers."""
    plt = _pyplot()
    worker_counts = sorted({w for (_, w) in results})
    fig, axes = plt.subplots(1, len(worker_counts), figsize=(5.5 * len(worker_counts), 4), squeeze=False)
    for ax, workers in zip(axes[0], worker_counts):
        for i, (n, _) in enumerate(KSWEEP_RUNS):
            if (n, workers) not in results:
                continue
            epochs = results[(n, workers)][1]
            accs = [(e["epoch"] + 1, 100 * e["test_accuracy"]) for e in epochs if e.get("test_accuracy") is not None]
            ax.plot([a for a, _ in accs], [b for _, b in accs], marker="o", label=LABELS[n],
                    linestyle="--" if n in ("ssgd", "bitsgd") else "-")
        ax.set(xlabel="epoch", ylabel="test accuracy (%)", title="%s, %d workers" % (exp["title"], workers))
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    path = save_figure(plt, fig, out_dir, "fig9.png")
    return [path]


def table_ksweep(exp, results, quick, data, note):
    names = [n for n, _ in KSWEEP_RUNS]
    lines = ["# fig9 and table2: %s, k-sensitivity%s" % (exp["title"], " (quick)" if quick else ""), "",
             "## Fig. 9: final test accuracy", "",
             "| workers | " + " | ".join(LABELS[n] for n in names) + " |", "|---|" + "---|" * len(names)]
    worker_counts = sorted({w for (_, w) in results})
    for w in worker_counts:
        accs = [results[(n, w)][1][-1].get("test_accuracy") for n in names]
        lines.append("| %d | " % w + " | ".join("%.2f%%" % (100 * a) if a is not None else "-" for a in accs) + " |")
    lines += ["", exp["paper_note"], "", "## Table 2: average epoch wall-clock time (s), ours (paper, K80)", "",
              "| workers | " + " | ".join(LABELS[n] for n in names) + " |", "|---|" + "---|" * len(names)]
    for w in worker_counts:
        paper = exp["paper_epoch_s"].get(w, {})
        lines.append("| %d | " % w + " | ".join(
            "%.2f (%s)" % (epoch_seconds(results[(n, w)][0]), paper.get(n, "-")) for n in names) + " |")
    return table_footer(lines, data, note, quick and "Quick runs use a subset and a few epochs: epochs here are "
                                                      "much shorter than the paper's (compare ratios between "
                                                      "columns, not seconds).")


# ---- speed: fig10 -----------------------------------------------------------------------------

SPEED_FIELDS = ("models", "batches", "bandwidths", "workers", "servers", "iterations", "warmup", "k", "threshold",
                "timing")
TIMINGS = ("interleaved", "separate")


def load_speed_config(path, quick, workers=None):
    """The YAML config of fig10, checked field by field; quick: a dict of fields that replace
    the config's. A bad config exits with one line naming the field."""
    import yaml
    from cdsgd_mx import models
    from cdsgd_mx.experiments.config import RATE_RE, _is_int, _is_num
    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    if quick:
        cfg.update(quick)
    if workers:
        cfg["workers"] = workers
    unknown = sorted(set(cfg) - set(SPEED_FIELDS))
    missing = [f for f in SPEED_FIELDS if f not in cfg]
    if unknown or missing:
        sys.exit("reproduce: %s: %s (fields: %s)" % (path, "unknown fields " + ", ".join(unknown) if unknown
                                                     else "missing fields " + ", ".join(missing), ", ".join(SPEED_FIELDS)))

    def ints(values, low):
        return isinstance(values, list) and bool(values) and all(_is_int(v) and v >= low for v in values)
    checks = [
        ("models", isinstance(cfg["models"], list) and cfg["models"] and all(m in models.INPUT_SHAPES for m in cfg["models"]),
         "a list of models among " + ", ".join(models.INPUT_SHAPES)),
        ("batches", ints(cfg["batches"], 1), "a list of integers >= 1"),
        ("bandwidths", isinstance(cfg["bandwidths"], list) and cfg["bandwidths"]
         and all(isinstance(b, str) and RATE_RE.match(b) for b in cfg["bandwidths"]), "a list of tc rates such as 1gbit"),
        ("workers", ints([cfg["workers"]], 1), "an integer >= 1"),
        ("servers", ints([cfg["servers"]], 1), "an integer >= 1"),
        ("iterations", ints([cfg["iterations"]], 1), "an integer >= 1"),
        ("warmup", ints([cfg["warmup"]], 0), "an integer >= 0"),
        ("k", ints([cfg["k"]], 1), "an integer >= 1"),
        ("threshold", _is_num(cfg["threshold"]) and cfg["threshold"] > 0, "a number > 0"),
        ("timing", cfg["timing"] in TIMINGS, "one of " + ", ".join(TIMINGS)),
    ]
    for field, ok, allowed in checks:
        if not ok:
            sys.exit("reproduce: %s: %s must be %s, got %r" % (path, field, allowed, cfg[field]))
    return cfg


def run_speed(cfg, out_dir, iterations):
    """One bench.overlap run per (model, batch, bandwidth): the four algorithms plus the
    communication-only rounds that calibrate phi and psi + delta, all in one job taking turns
    (timing: interleaved) or one job each (separate)."""
    cases = []
    total = len(cfg["models"]) * len(cfg["batches"]) * len(cfg["bandwidths"])
    for model in cfg["models"]:
        for batch in cfg["batches"]:
            for bw in cfg["bandwidths"]:
                say("case %d/%d: %s, batch %d, %s, %d workers ..." % (len(cases) + 1, total, model, batch, bw,
                                                                        cfg["workers"]))
                cmd = [sys.executable, "-m", "cdsgd_mx.bench.overlap", "--json", "--model", model,
                       "--batch", str(batch), "--bandwidth", bw, "--workers", str(cfg["workers"]),
                       "--servers", str(cfg["servers"]), "--iterations", str(iterations or cfg["iterations"]),
                       "--warmup", str(cfg["warmup"]), "--k", str(cfg["k"]), "--threshold", str(cfg["threshold"]),
                       "--compute-iterations", "3"] + (["--interleaved"] if cfg["timing"] == "interleaved" else [])
                log = os.path.join(out_dir, "logs", "%s-b%d-%s.jsonl" % (model, batch, bw))
                if REPLOT:
                    if not os.path.exists(log):
                        sys.exit("reproduce: no log at %s (--replot needs the folder of an earlier run)" % log)
                    stdout = open(log).read()
                else:
                    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
                    stdout = proc.stdout
                    with open(log, "w") as f:
                        f.write(stdout)
                    if proc.returncode != 0:
                        sys.exit("reproduce: the %s/batch %d/%s case failed:\n%s" % (model, batch, bw,
                                                                                    (proc.stdout + proc.stderr)[-1500:]))
                cases.append(summarize_case(model, batch, bw, [json.loads(l) for l in stdout.splitlines()
                                                               if l.startswith("{")], cfg["k"]))
    return cases


def summarize_case(model, batch, bandwidth, rows, k):
    """Measured iteration times, speedups over BIT-SGD (T_bit / T - 1) and the time model's
    prediction from costs calibrated in the same case (tau: forward/backward alone; phi and
    psi + delta: the communication-only rounds)."""
    from cdsgd_mx import timemodel
    comm = next(r for r in rows if "phi_ms" in r)
    runs = {r["job"]: r for r in rows if r.get("job") in ALGORITHMS}
    tau = sum(r["compute_ms"] for r in runs.values()) / len(runs)
    costs = timemodel.calibrate(tau, comm["phi_ms"], comm["psi_plus_delta_ms"])
    predicted = timemodel.predict(costs, k)
    measured = {a: runs[a]["iter_ms"] for a in ALGORITHMS if a in runs}
    # interleaved: the same speedup cycle by cycle (each cycle ran every algorithm once)
    cycles = {a: r["cycle_iter_ms"] for a, r in runs.items() if "cycle_iter_ms" in r}
    per_cycle = {a: [b / t - 1 for b, t in zip(cycles["bitsgd"], ts)] for a, ts in cycles.items() if a != "bitsgd"}
    return {"per_cycle_speedup_over_bitsgd": per_cycle, "timing": "interleaved" if cycles else "separate",
            "model": model, "batch": batch, "bandwidth": bandwidth, "params": next(iter(runs.values()))["params"],
            "tau_ms": tau, "phi_ms": comm["phi_ms"], "psi_plus_delta_ms": comm["psi_plus_delta_ms"],
            "measured_ms": measured, "predicted_ms": predicted,
            "speedup_over_bitsgd": {a: measured["bitsgd"] / t - 1 for a, t in measured.items() if a != "bitsgd"}}


def rate_bits(rate):
    """'10gbit' -> 1e10 (tc's units), to order links by speed."""
    import re
    value, unit = re.match(r"^([\d.]+)([a-z]*)$", rate.lower()).groups()
    return float(value) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[unit]


def plot_speed(cases, out_dir):
    plt = _pyplot()
    import numpy as np
    panels = sorted({(c["batch"], c["bandwidth"]) for c in cases}, key=lambda p: (rate_bits(p[1]), p[0]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (batch, bw) in zip(axes[0], panels):
        sel = [c for c in cases if (c["batch"], c["bandwidth"]) == (batch, bw)]
        x = np.arange(len(sel))
        for i, alg in enumerate(["ssgd", "odsgd", "cdsgd"]):
            vals = [100 * c["speedup_over_bitsgd"][alg] for c in sel]
            bars = ax.bar(x + (i - 1) * 0.27, vals, 0.27, label=LABELS[alg])
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


def table_speed(exp, cases, quick, workers):
    lines = ["# fig10: speedup over BIT-SGD%s" % (" (quick)" if quick else ""), "",
             "%d workers, synthetic data, k = 5. Speedup = T(BIT-SGD) / T(algorithm) - 1." % workers, "",
             "| model | batch | link | S-SGD | OD-SGD | CD-SGD | BIT-SGD ms/iter |", "|---|---|---|---|---|---|---|"]
    for c in cases:
        s = c["speedup_over_bitsgd"]
        lines.append("| %s | %d | %s | %+.0f%% | %+.0f%% | %+.0f%% | %.1f |" % (
            c["model"], c["batch"], c["bandwidth"], 100 * s["ssgd"], 100 * s["odsgd"], 100 * s["cdsgd"],
            c["measured_ms"]["bitsgd"]))
    cycled = [c for c in cases if c.get("per_cycle_speedup_over_bitsgd")]
    if cycled:
        lines += ["", "Timed in one job per case, the algorithms taking turns in blocks (bench.overlap "
                  "--interleaved): every algorithm ran on the same processes, cycle after cycle. Cycle by cycle:", "",
                  "| model | batch | link | CD-SGD over BIT-SGD | CD-SGD over S-SGD |", "|---|---|---|---|---|"]
        for c in cycled:
            pc = c["per_cycle_speedup_over_bitsgd"]
            over_ssgd = [(1 + cd) / (1 + ss) - 1 for cd, ss in zip(pc["cdsgd"], pc["ssgd"])]
            lines.append("| %s | %d | %s | %s | %s |" % (c["model"], c["batch"], c["bandwidth"],
                                                        ", ".join("%+.0f%%" % (100 * v) for v in pc["cdsgd"]),
                                                        ", ".join("%+.0f%%" % (100 * v) for v in over_ssgd)))
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


# ---- main ---------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(prog="scripts/reproduce.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", help="one of %s" % ", ".join(EXPERIMENTS))
    ap.add_argument("--quick", action="store_true", help="a reduced version that finishes in minutes")
    ap.add_argument("--out", default=None, help="results folder (default results/EXPERIMENT[-quick])")
    ap.add_argument("--iterations", type=int, default=None, help="override the iterations of each run")
    ap.add_argument("--data-dir", default=None, help="where the data sets' standard files are")
    ap.add_argument("--workers", default=None, help="comma-separated numbers of workers instead of the "
                    "experiment's (e.g. 2)")
    ap.add_argument("--replot", action="store_true", help="redo the plots and the table from the logs "
                    "already in --out (same experiment and options), without running anything")
    args = ap.parse_args(argv)
    global REPLOT
    REPLOT = args.replot
    if args.experiment not in EXPERIMENTS:
        ap.error("experiment must be one of %s, got %r" % (", ".join(EXPERIMENTS), args.experiment))
    if args.iterations is not None and args.iterations < 1:
        ap.error("--iterations must be >= 1")
    exp = dict(EXPERIMENTS[args.experiment])
    if args.workers:
        try:
            counts = [int(w) for w in args.workers.split(",")]
            assert all(w >= 1 for w in counts)
        except (ValueError, AssertionError):
            ap.error("--workers must be comma-separated integers >= 1, got %r" % args.workers)
        exp["workers"] = exp["quick_workers"] = counts
    name = "fig9" if args.experiment == "table2" else args.experiment
    out_dir = os.path.abspath(args.out or os.path.join("results", name + ("-quick" if args.quick else "")))
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    if exp["kind"] == "speed":
        cfg = load_speed_config(os.path.join(ROOT, exp["config"]), args.quick and exp["quick"],
                                exp["workers"][0] if args.workers else None)
        cases = run_speed(cfg, out_dir, args.iterations)
        with open(os.path.join(out_dir, "fig10.json"), "w") as f:
            json.dump(cases, f, indent=1)
        plots = plot_speed(cases, out_dir)
        md = table_speed(exp, cases, args.quick, cfg["workers"])
    elif exp["kind"] == "ksweep":
        results, data, note = run_curves(exp, args.quick, out_dir, args.iterations, args.data_dir, KSWEEP_RUNS)
        plots = plot_ksweep(exp, results, out_dir)
        md = table_ksweep(exp, results, args.quick, data, note)
    else:
        results, data, note = run_curves(exp, args.quick, out_dir, args.iterations, args.data_dir, CURVE_RUNS)
        plots = plot_curves(name, exp, results, out_dir, ALGORITHMS)
        md = table_curves(name, exp, results, args.quick, data, note, ALGORITHMS)
    md += "\n" + "\n".join("![%s](%s)" % (os.path.basename(p), os.path.basename(p)) for p in plots) + "\n"
    with open(os.path.join(out_dir, "%s.md" % name), "w") as f:
        f.write(md)
    print(md)
    say("results in %s" % out_dir)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Reproduce one result of the paper's evaluation: run its set of runs, then write the raw logs,
PNG plots styled after the paper's figure and a markdown table with the paper's numbers beside
ours, all into one folder.

    python scripts/reproduce.py EXPERIMENT [--quick] [--seeds N] [--out DIR] [--iterations N] [--data-dir D]

EXPERIMENT: fig6 (LeNet-5/MNIST), fig7 (Inception-BN/CIFAR-10), fig8 (ResNet-50/ImageNet),
fig9 and table2 (ResNet-20 k-sensitivity: the same runs), fig10 (speedups over BIT-SGD on
synthetic data, with the time model's predictions). --quick is a reduced version that finishes
in minutes on a 2-core machine (fewer workers, samples, epochs or cases); the full version is
what a user with a cluster runs. Where CIFAR-10 is not on disk the CIFAR experiments fall back
to Fashion-MNIST, and where ImageNet is missing fig8 --quick runs on synthetic data; every
result says which data it used.

--seeds N (or `seeds: N` in the experiment's config) runs every algorithm with seeds seed, ...,
seed + N - 1 of the config (each seed fixes init, shard, data order and augmentation) and
reports the mean, standard deviation and n of each, the paired differences that the paper's
claims are about with their 95% intervals, and a verdict on each claim (cdsgd_mx.experiments.spread). A run
already finished in --out with the same settings is reused, so a stopped sweep resumes with
the same command (--rerun runs everything again).

Every run is made with portable numerics (--numerics native: this CPU's fastest kernels, whose
numbers hold on this CPU type only; cdsgd_mx.numerics) and records how it was made: commit,
exact command, numerics, CPU, versions (seeds.json, each run's `provenance`). Beside a sweep runs
the golden run, whose numbers tests/experiments/test_golden.py pins. A sweep never mixes code
versions: resuming it from another commit or a changed tree stops and names both
(--rerun runs the old runs again, --allow-mixed takes them and the table says so).

    python scripts/reproduce.py verify RESULTS_DIR [--runs ALG:SEED,...] [--sample N]

reruns recorded runs by their recorded commands into a scratch folder and prints, for each,
`same` or the first metric that differs with both values and what explains it (another commit,
other numerics settings, another CPU instruction set); it exits 0 only when all are the same.
"""
import argparse
import json
import os
import subprocess
import sys
from collections import namedtuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ALGORITHMS = ["ssgd", "bitsgd", "odsgd", "cdsgd"]
LABELS = {"ssgd": "S-SGD", "bitsgd": "BIT-SGD", "odsgd": "OD-SGD", "cdsgd": "CD-SGD",
          "bitsgd_2bit": "BIT-SGD 2-bit both ways", "cdsgd_2bit": "CD-SGD 2-bit both ways",
          "k2": "CD-SGD k=2", "k5": "CD-SGD k=5", "k10": "CD-SGD k=10", "k20": "CD-SGD k=20"}
CURVE_RUNS = [(a, ["algorithm=" + a]) for a in ALGORITHMS]
# --pull-compression 2bit (issue 29): BIT-SGD and CD-SGD with 2 bits both ways against without
BOTH_WAYS = ["bitsgd", "bitsgd_2bit", "cdsgd", "cdsgd_2bit"]
BOTH_WAYS_RUNS = [(a, ["algorithm=" + a.replace("_2bit", "")] + (["pull_compression=2bit"] if a.endswith("_2bit")
                                                                 else [])) for a in BOTH_WAYS]
KSWEEP_RUNS = [("ssgd", ["algorithm=ssgd"]), ("bitsgd", ["algorithm=bitsgd"])] + \
    [("k%d" % k, ["algorithm=cdsgd", "k=%d" % k]) for k in (2, 5, 10, 20)]
PP = 0.01  # one percentage point of accuracy, which the runs log as a fraction


def claim(text, a, b, rule="exceeds", margin=0.0):
    """One of the paper's claims about final test accuracy, judged on a - b paired by seed
    (cdsgd_mx.experiments.spread): rule 'exceeds' (a - b > margin) or 'within' (|a - b| <= margin); b a list:
    the claim holds against each of them; a or b a number: a level of accuracy ("below 99%")."""
    return {"text": text, "a": a, "b": b, "rule": rule, "margin": margin}


BOTH_WAYS_CLAIMS = [claim("2-bit pulls keep BIT-SGD's accuracy: BIT-SGD both ways - BIT-SGD within ±0.2 pp",
                          "bitsgd_2bit", "bitsgd", "within", 0.2 * PP),
                    claim("2-bit pulls keep CD-SGD's accuracy: CD-SGD both ways - CD-SGD within ±0.2 pp",
                          "cdsgd_2bit", "cdsgd", "within", 0.2 * PP)]


CD_VS_S = "CD-SGD keeps S-SGD's accuracy (%s against %s): CD-SGD >= S-SGD - 0.1 pp"
CD_VS_BIT = "CD-SGD beats BIT-SGD (%s against %s): CD-SGD > BIT-SGD"

EXPERIMENTS = {
    "fig6": {
        "kind": "curves", "config": "configs/fig6_lenet_mnist.yaml", "title": "LeNet-5 on MNIST",
        "workers": [2, 4], "quick_workers": [2], "quick": ["epochs=null", "iterations=300"],
        # the paper's final test accuracy (section 4.2, Fig. 6)
        "paper": {2: {"ssgd": "99.15%", "odsgd": "99.12%", "cdsgd": "99.14%", "bitsgd": "below 99%"}},
        "claims": [claim(CD_VS_S % ("99.14%", "99.15%"), "cdsgd", "ssgd", margin=-0.1 * PP),
                   claim(CD_VS_BIT % ("99.14%", "below 99%"), "cdsgd", "bitsgd"),
                   claim("OD-SGD keeps S-SGD's accuracy (99.12% against 99.15%): OD-SGD >= S-SGD - 0.1 pp",
                         "odsgd", "ssgd", margin=-0.1 * PP),
                   claim("2-bit compression alone loses accuracy (BIT-SGD below 99%, S-SGD 99.15%): "
                         "S-SGD > BIT-SGD", "ssgd", "bitsgd"),
                   claim("BIT-SGD stays below 99%: 99% - BIT-SGD > 0", 0.99, "bitsgd")],
    },
    "fig7": {
        "kind": "curves", "config": "configs/fig7_inception_bn_cifar10.yaml", "title": "Inception-BN on CIFAR-10",
        "workers": [2, 4], "quick_workers": [2],
        "quick": ["epochs=3", "train_samples=1024", "test_samples=1000", "warmup_steps=10"],
        "fallback": ("cifar10", "fashion_mnist"),
        "paper": {2: {"cdsgd": "94.15%", "odsgd": "93.99%", "ssgd": "94.00%", "bitsgd": "92.69%"},
                  4: {"cdsgd": "93.50%", "odsgd": "93.30% or 91.83% (unattributed)", "ssgd": "-",
                      "bitsgd": "93.30% or 91.83% (unattributed)"}},
        "claims": [claim(CD_VS_S % ("94.15%", "94.00%"), "cdsgd", "ssgd", margin=-0.1 * PP),
                   claim(CD_VS_BIT % ("94.15%", "92.69%"), "cdsgd", "bitsgd"),
                   claim("CD-SGD keeps OD-SGD's accuracy (94.15% against 93.99%): CD-SGD >= OD-SGD - 0.1 pp",
                         "cdsgd", "odsgd", margin=-0.1 * PP)],
    },
    "fig8": {
        "kind": "curves", "config": "configs/fig8_resnet50_imagenet.yaml", "title": "ResNet-50 on ImageNet",
        "workers": [4], "quick_workers": [2],
        "quick": ["epochs=null", "iterations=8", "batch_size=4", "servers=1", "warmup_steps=2",
                  "test_samples=64", "checkpoint=false"],
        "needs_imagenet": True,
        # the four top-1 accuracies in the text's order (CD, OD, S, BIT; section 4.2)
        "paper": {4: {"cdsgd": "72.4%", "odsgd": "72.6%", "ssgd": "72.7%", "bitsgd": "72.0%"}},
        "claims": [claim("CD-SGD is within 0.3 pp of S-SGD (72.4% against 72.7%): CD-SGD >= S-SGD - 0.3 pp",
                         "cdsgd", "ssgd", margin=-0.3 * PP),
                   claim(CD_VS_BIT % ("72.4%", "72.0%"), "cdsgd", "bitsgd")],
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
        # "about" and "close to" read as within 1 pp: the paper's own k = 20 and BIT-SGD are 0.87 pp apart
        "claims": [claim("k = 2 is the best k: CD-SGD k=2 > k=5, k=10 and k=20", "k2", ["k5", "k10", "k20"]),
                   claim("k = 2 beats S-SGD: CD-SGD k=2 > S-SGD", "k2", "ssgd"),
                   claim("k = 5 is close to S-SGD: k=5 - S-SGD within ±1 pp", "k5", "ssgd", "within", PP),
                   claim("k = 20 is about BIT-SGD (89.68% against 88.81%): k=20 - BIT-SGD within ±1 pp",
                         "k20", "bitsgd", "within", PP),
                   claim("CD-SGD beats BIT-SGD: CD-SGD k=2 > BIT-SGD", "k2", "bitsgd")],
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
RERUN = False  # --rerun: run again where a finished run with the same settings is in --out
ALLOW_MIXED = False  # --allow-mixed: reuse finished runs made by another code version (the table says so)
DONE = "reproduce.json"  # written into a run's folder once it finished: what it ran
CODE = None  # this checkout's code version (cdsgd_mx.experiments.provenance.code_version), once known
CODE_OF = {}  # run folder -> the code version that made it (cdsgd_mx.experiments.provenance.code_id)
MODE_OF = {}  # run folder -> the numerics mode it recorded (None: recorded before provenance)


def this_code():
    global CODE
    if CODE is None:
        from cdsgd_mx.experiments import provenance
        CODE = provenance.code_version()
    return CODE


def check_same_code(label, out, before):
    """A finished run is reused only when this checkout's code made it: else stop, naming both
    versions (--rerun runs it again, --allow-mixed takes it as it is and the table says so)."""
    from cdsgd_mx.experiments import provenance
    theirs, ours = provenance.code_id(before.get("code")), provenance.code_id(this_code())
    CODE_OF[out] = theirs
    code_that_ran(out)  # its numerics mode
    if theirs != ours and not ALLOW_MIXED and not REPLOT:
        sys.exit("reproduce: %s in %s was made by code %s, and this checkout is %s: a sweep must not mix code "
                 "versions; run it again with --rerun (or in a checkout of %s), or accept the mix with --allow-mixed"
                 % (label, out, theirs or "of unknown version (recorded before provenance)", ours,
                    (theirs or "?")[:12]))


FAILED = {}  # (name, workers, seed) -> why: runs of a sweep over seeds that failed (diverged)
FAILED_HOW = {}  # (name, workers, seed) -> {"code", "command"} of a failed run, as its marker says


class RunFailed(Exception):
    """A run of a sweep over seeds failed; the message says why in one line."""


def failure_reason(output, code):
    """The last error line of a job's output, without its node prefix."""
    errors = [line.split(" | ", 1)[-1].strip() for line in output.splitlines() if "Error" in line]
    return errors[-1] if errors else "exit code %d" % code


def run_train(exp, name, overrides, workers, out, what="", keep_going=False):
    """One run of scripts/train.py into `out`, or the finished one already there when it ran
    the same overrides (a stopped sweep resumes where it stopped). keep_going (a sweep over
    seeds): a failing run is recorded as failed, in its folder too, and raises RunFailed; a
    seed that diverges is a result, and would diverge again at every resume."""
    marker = os.path.join(out, DONE)
    done = {"config": exp["config"], "overrides": overrides, "workers": workers}
    label = "%s, %d workers%s" % (LABELS.get(name, name), workers, what)
    try:
        before = json.load(open(marker)) if os.path.exists(marker) else None
    except ValueError:
        before = None  # cut short while written: run again
    same = before is not None and {k: before.get(k) for k in done} == done
    if REPLOT or (not RERUN and same):
        if before is not None:
            check_same_code(label, out, before)
        if before is not None and before.get("failed"):
            say("%s: failed in an earlier sweep (%s)" % (label, before["failed"]))
            raise RunFailed(before["failed"])
        if not REPLOT:
            say("%s: reusing the finished run in %s" % (label, out))
        return read_metrics(out)
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), "--config", os.path.join(ROOT, exp["config"])] \
        + overrides + ["workers=%d" % workers, "out=" + out]
    from cdsgd_mx.experiments import provenance
    done.update(command=provenance.command(cmd))
    say("%s ..." % label)
    if os.path.exists(os.path.join(out, DONE)):
        os.remove(os.path.join(out, DONE))  # a run stopped midway must not pass for the finished one
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "job.log"), "w") as f:
        f.write(proc.stdout + proc.stderr)
    code = code_that_ran(out)
    done["code"] = code
    CODE_OF[out] = provenance.code_id(code)
    if proc.returncode != 0 and keep_going:
        why = failure_reason(proc.stdout + proc.stderr, proc.returncode)
        with open(marker, "w") as f:
            json.dump(dict(done, failed=why), f)
        stop_if_code_changed(label, out, code)
        say("%s failed (%s; see %s): recorded as failed, the sweep goes on"
            % (label, why, os.path.join(out, "job.log")))
        raise RunFailed(why)
    if proc.returncode != 0:
        sys.exit("reproduce: the %s run failed (see %s):\n%s"
                 % (label, os.path.join(out, "job.log"), (proc.stdout + proc.stderr)[-1500:]))
    with open(marker, "w") as f:
        json.dump(done, f)
    stop_if_code_changed(label, out, code)
    return read_metrics(out)


def code_that_ran(out):
    """The code version the run itself loaded (its config.json's provenance, written by
    scripts/train.py as it started), else this checkout's. Notes its numerics mode too."""
    try:
        made = json.load(open(os.path.join(out, "config.json"))).get("provenance") or {}
    except (OSError, ValueError):
        made = {}
    from cdsgd_mx.experiments import provenance
    MODE_OF[out] = (made.get("numerics") or {}).get("mode")
    before = made.get("before") or {}
    if before.get("commit") and provenance.code_id(before) != provenance.code_id(made):
        made = dict(made, code_changed=True, changes_sha256="resumed-across-code-versions")  # made by two
    if "commit" not in made:
        return this_code()
    return {k: made[k] for k in ("commit", "dirty", "changes", "code_changed", "changes_sha256") if k in made}


def stop_if_code_changed(label, out, code):
    """A commit or an edit while the sweep runs changes the code its next runs load: stop
    (the run is kept, marked with its code) unless --allow-mixed."""
    from cdsgd_mx.experiments import provenance
    theirs, ours = provenance.code_id(code), provenance.code_id(this_code())
    if theirs != ours and not ALLOW_MIXED:
        sys.exit("reproduce: the code changed while the sweep ran: %s in %s was made by %s, and the sweep began at "
                 "%s; go on with --rerun (or --allow-mixed to keep both)" % (label, out, theirs, ours))


def read_marker(out):
    """What a run's folder says it ran (its reproduce.json), {} where there is none."""
    try:
        return json.load(open(os.path.join(out, DONE)))
    except (OSError, ValueError):
        return {}


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
    from cdsgd_mx.experiments import data
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
    from cdsgd_mx.experiments import data
    from cdsgd_mx.experiments import config as C
    try:
        cfg = C.load(os.path.join(ROOT, exp["config"]), overrides)
        data.ensure(cfg.dataset, cfg.data_dir)
    except (C.ConfigError, data.DataMissing) as e:
        sys.exit("reproduce: %s" % e)


def run_folder(out_dir, name, workers, seed):
    """logs/NAME-Wworkers, and -seedS after it in a sweep over seeds."""
    return os.path.join(out_dir, "logs", "%s-%dworkers%s" % (name, workers, "" if seed is None else "-seed%d" % seed))


Run = namedtuple("Run", "seed iters epochs folder", defaults=(None,))  # folder: where its logs are
NUMERICS = "portable"  # --numerics: every training run's numerics mode (cdsgd_mx.numerics)
GOLDEN = None  # the golden run's numbers, run beside a portable sweep (cdsgd_mx.experiments.golden)


def run_golden(out_dir, data_dir=None):
    """The golden run (tests/experiments/test_golden.py pins its numbers), with the sweep's code
    and numerics, its numbers also in OUT/golden.json: a sweep whose golden numbers differ from
    the test's was made by other numerics. --replot of a folder recorded without one: None."""
    from cdsgd_mx.experiments import golden
    out = os.path.join(out_dir, "logs", "golden")
    if REPLOT and not os.path.exists(os.path.join(out, "metrics-rank0.jsonl")):
        return None
    overrides = list(golden.OVERRIDES) + (["data_dir=" + data_dir] if data_dir else [])
    run_train({"config": golden.CONFIG}, "golden", overrides, golden.WORKERS, out, " (numerics check)")
    numbers = golden.fingerprint(out)
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(numbers, f, indent=1)
    return numbers


def run_curves(exp, quick, out_dir, iterations, data_dir, runs, seeds=(None,)):
    """Every run of the experiment, seed after seed (a sweep stopped midway leaves whole seeds
    behind). seeds: (None,) runs the config's seed into the folders without a seed suffix.
    Returns ({(name, workers): [Run per seed]}, the data used, the fallback note)."""
    global GOLDEN
    if not REPLOT:
        this_code()  # the sweep's code version, as it begins
    extra, note = data_overrides(exp, quick, data_dir)
    extra += exp["quick"] if quick else []
    extra += ["numerics=" + NUMERICS]
    if NUMERICS == "portable":
        # MNIST's data_dir only: the golden run is fig6's (MNIST also comes with the install)
        GOLDEN = run_golden(out_dir, data_dir if exp["config"] == "configs/fig6_lenet_mnist.yaml" else None)
    if iterations:
        extra += ["epochs=null", "iterations=%d" % iterations]
    if not REPLOT:  # with every override: fig8's synthetic fallback is valid only with the quick ones
        ensure_data(exp, extra)
    results = {}
    worker_counts = exp["quick_workers"] if quick else exp["workers"]
    total, count = len(worker_counts) * len(seeds) * len(runs), 0
    for workers in worker_counts:
        for seed in seeds:
            for name, overrides in runs:
                count += 1
                what = "" if seed is None else ", seed %d (run %d of %d)" % (seed, count, total)
                seeded = overrides + extra + ([] if seed is None else ["seed=%d" % seed])
                if NUMERICS == "portable" and workers >= 3:  # arrival-order sums of 3+ pushes repeat no run
                    seeded.append("fp32_sum=rank")
                try:
                    iters, epochs = run_train(exp, name, seeded, workers, run_folder(out_dir, name, workers, seed),
                                              what, keep_going=seed is not None)
                except RunFailed as e:
                    FAILED[(name, workers, seed)] = str(e)
                    how = read_marker(run_folder(out_dir, name, workers, seed))
                    if how.get("command"):
                        FAILED_HOW[(name, workers, seed)] = {"code": how.get("code"), "command": how["command"]}
                    continue
                results.setdefault((name, workers), []).append(
                    Run(seed, iters, epochs, run_folder(out_dir, name, workers, seed)))
    first = os.path.join(run_folder(out_dir, runs[-1][0], min(worker_counts), seeds[0]), "config.json")
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


def band(ax, x, rows, label, **style):
    """The mean over seeds of rows (one list per seed, along x) and, with several seeds, the
    band from their minimum to their maximum."""
    import numpy as np
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
    for (n, workers), runs in sorted(results.items(), key=lambda kv: (kv[0][1], names.index(kv[0][0]))):
        iters, epochs = runs[0].iters, runs[0].epochs
        acc = epochs[-1]["test_accuracy"] if epochs else None
        paper = exp.get("paper", {}).get(workers, {}).get(n, "-")
        tail = iters[-50:]
        lines.append("| %s | %d | %s | %s | %.4f | %.1f |" % (
            LABELS[n], workers, "%.2f%%" % (100 * acc) if acc is not None else "-", paper,
            sum(r["loss"] for r in tail) / len(tail), sum(r["iter_ms"] for r in iters) / len(iters)))
    return table_footer(lines, data, note, quick and "Quick runs stop long before the paper's epochs: compare "
                                                      "the ordering and the curves' shape, not the last digit.")


def table_footer(lines, data, note, quick_text):
    """The table's lines, then which data it used, the numerics and code that made the runs,
    the fallback note and the quick caveat."""
    lines += ["", "Data: %s." % data] + provenance_lines()
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


def table_ksweep(exp, results, quick, data, note):
    names = [n for n, _ in KSWEEP_RUNS]
    lines = ["# fig9 and table2: %s, k-sensitivity%s" % (exp["title"], " (quick)" if quick else ""), "",
             "## Fig. 9: final test accuracy", "",
             "| workers | " + " | ".join(LABELS[n] for n in names) + " |", "|---|" + "---|" * len(names)]
    worker_counts = sorted({w for (_, w) in results})
    for w in worker_counts:
        accs = [results[(n, w)][0].epochs[-1].get("test_accuracy") for n in names]
        lines.append("| %d | " % w + " | ".join("%.2f%%" % (100 * a) if a is not None else "-" for a in accs) + " |")
    lines += ["", exp["paper_note"], "", "## Table 2: average epoch wall-clock time (s), ours (paper, K80)", "",
              train_network(results), "", "| workers | " + " | ".join(LABELS[n] for n in names) + " |", "|---|" + "---|" * len(names)]
    for w in worker_counts:
        paper = exp["paper_epoch_s"].get(w, {})
        lines.append("| %d | " % w + " | ".join(
            "%.2f (%s)" % (epoch_seconds(results[(n, w)][0].iters), paper.get(n, "-")) for n in names) + " |")
    return table_footer(lines, data, note, quick and "Quick runs use a subset and a few epochs: epochs here are "
                                                      "much shorter than the paper's (compare ratios between "
                                                      "columns, not seconds).")


# ---- several seeds: spread, and a verdict on each of the paper's claims ----------------------

def final_accuracy(run):
    return run.epochs[-1].get("test_accuracy") if run.epochs else None


def final_loss(run):
    tail = run.iters[-50:]
    return sum(r["loss"] for r in tail) / len(tail)


def per_seed(results, name, workers, measure=final_accuracy):
    """{seed: measure(run)} of one run's seeds, leaving out runs without that measure."""
    values = {r.seed: measure(r) for r in results.get((name, workers), [])}
    return {s: v for s, v in values.items() if v is not None}


def mean_std(values, scale=100.0, digits=2):
    from cdsgd_mx.experiments import spread  # in the functions: importing cdsgd_mx loads MXNet (seconds)
    s = spread.summarize(values)
    return "%.*f ± %.*f" % (digits, scale * s.mean, digits, scale * s.std)


def judge(c, accs):
    """([(b, spread.Difference of a - b)], verdict) of one claim on {name: {seed: accuracy}}:
    pairs of runs with the same seed, the verdict rule of the claim against each b."""
    from cdsgd_mx.experiments import spread
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
    import math
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
    from cdsgd_mx.experiments import spread
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


def per_seed_lines(results, names):
    seeds = sorted({r.seed for runs in results.values() for r in runs})
    lines = ["Final test accuracy (%) per seed:", "",
             "| run | workers | " + " | ".join("seed %d" % s for s in seeds) + " |", "|---|---|" + "---|" * len(seeds)]
    for (n, w) in sorted(results, key=lambda key: (key[1], names.index(key[0]))):
        accs = per_seed(results, n, w)
        lines.append("| %s | %d | " % (LABELS[n], w) + " | ".join(
            "%.2f" % (100 * accs[s]) if s in accs else "failed" if (n, w, s) in FAILED else "-" for s in seeds) + " |")
    if FAILED:
        lines += ["", "Failed runs, left out of the means and of the paired differences (which take the seeds "
                      "where both runs finished):", ""]
        lines += ["- %s, %d workers, seed %d: %s" % (LABELS[n], w, s, why) for (n, w, s), why in sorted(FAILED.items())]
        lines += ["", "How often each run failed, with the exact (Clopper-Pearson) 95% interval of its rate "
                      "(cdsgd_mx.experiments.spread.rate):", ""]
        lines += ["- %s, %d workers: %d of %d seeds, %.1f%% [%.1f%%, %.1f%%]" % (
            LABELS[n], w, r["failed"], r["n"], 100 * r["rate"], 100 * r["low"], 100 * r["high"])
            for (n, w), r in sorted(failure_rates(results).items(), key=lambda kv: (kv[0][1], names.index(kv[0][0])))]
    return lines


def failure_rates(results):
    """{(name, workers): failed runs of all seeds run, their rate and its 95% interval}."""
    from cdsgd_mx.experiments import spread
    keys = set(results) | {(n, w) for n, w, _ in FAILED}
    rates = {}
    for n, w in keys:
        failed = sum(1 for (fn, fw, _) in FAILED if (fn, fw) == (n, w))
        r = spread.rate(failed, failed + len(results.get((n, w), [])))
        rates[(n, w)] = {"failed": r.k, "n": r.n, "rate": r.rate, "low": r.low, "high": r.high}
    return rates


def accuracy_cells(results, name, workers):
    """(mean ± std, n, min - max) of a run's final test accuracy over its seeds, in %."""
    from cdsgd_mx.experiments import spread
    accs = list(per_seed(results, name, workers).values())
    if not accs:
        return "-", "0", "-"
    s = spread.summarize(accs)
    return mean_std(accs), str(s.n), "%.2f - %.2f" % (100 * s.min, 100 * s.max)


def table_curves_seeds(name, exp, results, quick, data, note, names, claims):
    lines = ["# %s: %s%s, several seeds" % (name, exp["title"], " (quick)" if quick else ""), "",
             "| algorithm | workers | test accuracy (%), mean ± std | n | min - max | paper | final training loss, "
             "mean | mean iteration (ms) |", "|---|---|---|---|---|---|---|---|"]
    for (n, workers), runs in sorted(results.items(), key=lambda kv: (kv[0][1], names.index(kv[0][0]))):
        iters = [r for run in runs for r in run.iters]
        lines.append("| %s | %d | %s | %s | %s | %s | %.4f | %.1f |" % (
            (LABELS[n], workers) + accuracy_cells(results, n, workers)
            + (exp.get("paper", {}).get(workers, {}).get(n, "-"), sum(map(final_loss, runs)) / len(runs),
               sum(r["iter_ms"] for r in iters) / len(iters))))
    lines += [""] + per_seed_lines(results, names) + [""] + claims_lines(claims, quick)
    return table_footer(lines, data, note, quick and "Quick runs stop long before the paper's epochs: compare "
                                                      "the ordering and the curves' shape, not the last digit.")


def table_ksweep_seeds(exp, results, quick, data, note, claims):
    names = [n for n, _ in KSWEEP_RUNS]
    worker_counts = sorted({w for (_, w) in results})
    head = ["| workers | " + " | ".join(LABELS[n] for n in names) + " |", "|---|" + "---|" * len(names)]
    lines = ["# fig9 and table2: %s, k-sensitivity%s, several seeds" % (exp["title"], " (quick)" if quick else ""),
             "", "## Fig. 9: final test accuracy (%), mean ± std (n)", ""] + head
    for w in worker_counts:
        cells = [accuracy_cells(results, n, w) for n in names]
        lines.append("| %d | " % w + " | ".join("%s (%s)" % (c[0], c[1]) for c in cells) + " |")
    lines += [""] + per_seed_lines(results, names)
    lines += ["", exp["paper_note"], "", "## Table 2: average epoch wall-clock time (s), mean ± std over seeds "
              "(paper, K80)", "", train_network(results), ""] + head
    for w in worker_counts:
        paper = exp["paper_epoch_s"].get(w, {})
        lines.append("| %d | " % w + " | ".join("%s (%s)" % (
            mean_std([epoch_seconds(r.iters) for r in results[(n, w)]], scale=1.0), paper.get(n, "-"))
            for n in names) + " |")
    lines += [""] + claims_lines(claims, quick)
    return table_footer(lines, data, note, quick and "Quick runs use a subset and a few epochs: epochs here are "
                                                      "much shorter than the paper's (compare ratios between "
                                                      "columns, not seconds).")


def run_record(r):
    """One run's numbers, and how to make it again (its provenance: commit, command, numerics,
    CPU, versions; scripts/train.py wrote it into the run's config.json)."""
    last = r.epochs[-1] if r.epochs else {}
    out = {"test_accuracy": final_accuracy(r), "final_loss": final_loss(r), "epoch_s": epoch_seconds(r.iters),
           "last_epoch_loss": last.get("loss"), "weights_sha256": last.get("weights_sha256")}
    path = os.path.join(r.folder or "", "config.json")
    out["provenance"] = json.load(open(path)).get("provenance") if r.folder and os.path.exists(path) else None
    return out


def failed_record(n, w, s, why):
    out = {"run": n, "workers": w, "seed": s, "why": why}
    if (n, w, s) in FAILED_HOW:
        out["provenance"] = FAILED_HOW[(n, w, s)]
    return out


def code_versions():
    """{code id: number of runs} over every run used (cdsgd_mx.experiments.provenance.code_id)."""
    counts = {}
    for cid in CODE_OF.values():
        counts[cid or "unknown"] = counts.get(cid or "unknown", 0) + 1
    return counts


def numerics_used():
    """The numerics mode the runs recorded: one mode, 'mixed: ...', or NUMERICS where no run
    recorded one (logs from before provenance)."""
    modes = sorted({m for m in MODE_OF.values() if m})
    return modes[0] if len(modes) == 1 else "mixed: " + ", ".join(modes) if modes else NUMERICS


def provenance_lines():
    """Which code and numerics made the runs, for the table's end."""
    versions = code_versions()
    lines = ["", "Numerics: %s (cdsgd_mx.numerics)%s." % (numerics_used(), "; golden run (the test's pinned numbers, "
                                                           "tests/experiments/test_golden.py): loss %r, test accuracy "
                                                           "%r" % (GOLDEN["loss"], GOLDEN["test_accuracy"])
                                                           if GOLDEN else "")]
    if len(versions) == 1:
        lines += ["", "Code: every run at %s. Each run's command, commit, CPU and versions are in seeds.json "
                      "(`provenance`); `python scripts/reproduce.py verify DIR --sample N` reruns some." % next(iter(versions))]
    else:
        lines += ["", "**Mixed code versions (--allow-mixed)**: " + "; ".join(
            "%d runs at %s" % (n, cid) for cid, n in sorted(versions.items(), key=lambda kv: -kv[1])) + "."]
    return lines


def seeds_record(name, quick, data, results, claims):
    """Every seed's numbers, how each was made, and the verdicts, for later comparisons and
    `verify` to read (seeds.json)."""
    runs = {"%s-%dworkers" % key: {str(r.seed): run_record(r) for r in rs} for key, rs in results.items()}
    failed = [failed_record(n, w, s, why) for (n, w, s), why in sorted(FAILED.items())]
    rates = [dict(run=n, workers=w, **r) for (n, w), r in sorted(failure_rates(results).items())]
    versions = code_versions()
    from cdsgd_mx.experiments import provenance
    return {"experiment": name, "quick": quick, "data": data, "numerics": numerics_used(), "golden": GOLDEN,
            "reproduce": provenance.record(with_mxnet=False),  # this command, here and now
            "code_versions": versions, "mixed": len(versions) > 1, "runs": runs, "claims": claims,
            "failed": failed, "failure_rates": rates}


# ---- speed: fig10 -----------------------------------------------------------------------------

SPEED_FIELDS = ("models", "batches", "bandwidths", "workers", "servers", "iterations", "warmup", "k", "threshold",
                "timing", "network")
TIMINGS = ("interleaved", "separate")


def load_speed_config(path, quick, workers=None):
    """The YAML config of fig10, checked field by field; quick: a dict of fields that replace
    the config's. A bad config exits with one line naming the field."""
    import yaml
    from cdsgd_mx.experiments import models
    from cdsgd_mx.experiments.config import NETWORKS, RATE_RE, _is_int, _is_num
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
        # the training configs' networks (cdsgd_mx.experiments.config): hosts (a NIC per node) or shared
        ("network", cfg["network"] in NETWORKS, "one of " + ", ".join(NETWORKS)),
    ]
    for field, ok, allowed in checks:
        if not ok:
            sys.exit("reproduce: %s: %s must be %s, got %r" % (path, field, allowed, cfg[field]))
    return cfg


SPEED_BOTH_WAYS = ALGORITHMS + ["bitsgd_2bit", "cdsgd_2bit"]  # fig10 --pull-compression 2bit


def run_speed(cfg, out_dir, iterations, algorithms=ALGORITHMS):
    """One bench.overlap run per (model, batch, bandwidth): the algorithms (the four, or with
    --pull-compression 2bit also BIT-SGD and CD-SGD both ways) plus the communication-only
    rounds that calibrate phi and psi + delta, all in one job taking turns (timing:
    interleaved) or one job each (separate)."""
    if algorithms != ALGORITHMS and cfg["timing"] != "interleaved":
        sys.exit("reproduce: --pull-compression 2bit times fig10 interleaved only (timing: interleaved), "
                 "got timing: %s" % cfg["timing"])
    network = cfg["network"]
    if network == "hosts" and not REPLOT:
        from cdsgd_mx.cluster import emulate
        if emulate.unavailable():  # no namespaces here: the shared link, and the tables say so
            say("emulated hosts are not available here (%s): timing on one shared loopback instead"
                % emulate.unavailable())
            network = "shared"
    cases = []
    total = len(cfg["models"]) * len(cfg["batches"]) * len(cfg["bandwidths"])
    for model in cfg["models"]:
        for batch in cfg["batches"]:
            for bw in cfg["bandwidths"]:
                say("case %d/%d: %s, batch %d, %s, %d workers ..." % (len(cases) + 1, total, model, batch, bw,
                                                                        cfg["workers"]))
                link = (["--emulate-hosts", str(cfg["workers"] + cfg["servers"]), "--nic", bw] if network == "hosts"
                        else ["--bandwidth", bw])
                cmd = [sys.executable, "-m", "cdsgd_mx.bench.overlap", "--json", "--model", model,
                       "--batch", str(batch)] + link + ["--workers", str(cfg["workers"]),
                       "--servers", str(cfg["servers"]), "--iterations", str(iterations or cfg["iterations"]),
                       "--warmup", str(cfg["warmup"]), "--k", str(cfg["k"]), "--threshold", str(cfg["threshold"]),
                       "--compute-iterations", "3", "--algorithms", ",".join(algorithms)] + \
                    (["--interleaved"] if cfg["timing"] == "interleaved" else [])
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
                rows = [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]
                cases.append(dict(summarize_case(model, batch, bw, rows, cfg["k"], algorithms),
                                  network=network_of(rows), servers=cfg["servers"]))
    return cases


def network_of(rows):
    """The network model a case's jobs ran on, read from their rows (bench.overlap records
    emulate_hosts): 'hosts' or 'shared' (and 'shared' for logs made before it was recorded)."""
    return "hosts" if any(r.get("emulate_hosts") for r in rows if "job" in r) else "shared"


def network_label(case, workers, servers):
    if case.get("network") == "hosts":
        return "%d emulated hosts, a %s NIC each way per host" % (workers + servers, case["bandwidth"])
    return "one loopback shaped to %s that every node and both directions share" % case["bandwidth"]


def summarize_case(model, batch, bandwidth, rows, k, algorithms=ALGORITHMS):
    """Measured iteration times, speedups over BIT-SGD (T_bit / T - 1) and the time model's
    prediction from costs calibrated in the same case (tau: forward/backward alone; phi and
    psi + delta: the communication-only rounds)."""
    from cdsgd_mx.experiments import timemodel
    comm = next(r for r in rows if "phi_ms" in r)
    runs = {r["job"]: r for r in rows if r.get("job") in algorithms}
    tau = sum(runs[a]["compute_ms"] for a in ALGORITHMS) / len(ALGORITHMS)
    costs = timemodel.calibrate(tau, comm["phi_ms"], comm["psi_plus_delta_ms"])
    predicted = timemodel.predict(costs, k)
    measured = {a: runs[a]["iter_ms"] for a in algorithms if a in runs}
    # interleaved: the same speedup cycle by cycle (each cycle ran every algorithm once)
    cycles = {a: r["cycle_iter_ms"] for a, r in runs.items() if "cycle_iter_ms" in r}
    per_cycle = {a: [b / t - 1 for b, t in zip(cycles["bitsgd"], ts)] for a, ts in cycles.items() if a != "bitsgd"}
    made = next((r["provenance"] for r in rows if "provenance" in r), None)  # bench.overlap's first line
    return {"per_cycle_speedup_over_bitsgd": per_cycle, "timing": "interleaved" if cycles else "separate",
            "provenance": made,
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
        lines += ["", "Timed in one job per case, the algorithms taking turns in blocks (bench.overlap "
                  "--interleaved): every algorithm ran on the same processes, cycle after cycle. Cycle by cycle:", "",
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


# ---- verify: rerun recorded runs by their recorded commands -----------------------------------------

METRICS = ("test_accuracy", "last_epoch_loss", "final_loss", "weights_sha256")  # compared in this order


def recorded_runs(results_dir):
    """[(label, key, seed, record)] of every run in RESULTS_DIR/seeds.json, failed ones too
    (their record is {'failed': why, 'provenance': ...})."""
    path = os.path.join(results_dir, "seeds.json")
    if not os.path.exists(path):
        sys.exit("reproduce verify: no seeds.json in %s (a folder written by reproduce.py --seeds N)" % results_dir)
    try:
        sweep = json.load(open(path))
        sweep["runs"].items()
    except (ValueError, KeyError, AttributeError, TypeError) as e:
        sys.exit("reproduce verify: %s is not a sweep's seeds.json (%s: %s)" % (path, type(e).__name__, e))
    runs = [("%s seed %s" % (key, seed), key, int(seed), rec)
            for key, seeds in sweep["runs"].items() for seed, rec in seeds.items()]
    runs += [("%s-%dworkers seed %d" % (f["run"], f["workers"], f["seed"]), "%s-%dworkers" % (f["run"], f["workers"]),
              f["seed"], {"failed": f["why"], "provenance": f.get("provenance")}) for f in sweep.get("failed", [])]
    return sorted(runs, key=lambda r: (r[1], r[2]))


def select_runs(runs, names, sample, rng):
    """The runs named ALG:SEED or ALG-Wworkers:SEED (comma-separated), or `sample` at random."""
    if names:
        chosen = []
        for item in names.split(","):
            alg, _, seed = item.strip().rpartition(":")
            match = [r for r in runs if seed.isdigit() and r[2] == int(seed) and (r[1] == alg or r[1].split("-")[0] == alg)]
            if not match:
                sys.exit("reproduce verify: --runs %r names no recorded run (recorded: %s, each ALG:SEED or "
                         "ALG-Wworkers:SEED)" % (item, ", ".join(sorted({r[1] for r in runs}))))
            chosen += [r for r in match if r not in chosen]
        return chosen
    return sorted(rng.sample(runs, min(sample, len(runs))), key=lambda r: (r[1], r[2]))


def rerun_command(recorded, out):
    """The recorded command with this interpreter and its out= pointed at `out`."""
    cmd = [sys.executable if i == 0 else a for i, a in enumerate(recorded)]
    return [a for a in cmd if not a.startswith("out=")] + ["out=" + out]


def first_difference(then, now):
    """None when the recorded and the rerun run agree on every metric, else 'metric: A
    (recorded) vs B (now)' of the first that differs."""
    if bool(then.get("failed")) != bool(now.get("failed")):
        return "outcome: %s (recorded) vs %s (now)" % (then.get("failed") or "finished", now.get("failed") or "finished")
    if then.get("failed"):
        return None if then["failed"] == now["failed"] else "failure: %r (recorded) vs %r (now)" % (then["failed"], now["failed"])
    for m in METRICS:
        if m in then and then[m] != now.get(m):
            return "%s: %r (recorded) vs %r (now)" % (m, then[m], now.get(m))
    return None


def explain(then, now):
    """What differs between two runs' provenance that can move numbers."""
    from cdsgd_mx.experiments import provenance
    if not then:
        return ["the recorded run has no provenance (recorded before it was kept)"]
    why = []
    a, b = provenance.code_id(then.get("code", then)), provenance.code_id(now)
    if a != b:
        why.append("another code version: recorded at %s, now %s" % (a, b))
    if "numerics" in then:
        tn, nn = then["numerics"], now["numerics"]
        if tn != nn:
            changed = sorted(k for k in set(tn["env"]) | set(nn["env"]) if tn["env"].get(k) != nn["env"].get(k))
            why.append("other numerics settings: %s (recorded) vs %s (now)%s" % (
                tn["mode"], nn["mode"], "; " + ", ".join("%s %s -> %s" % (k, tn["env"].get(k), nn["env"].get(k))
                                                         for k in changed) if changed else ""))
        if tn["mode"] == "native" and nn["mode"] == "native":
            if then["cpu"]["isa_flags"] != now["cpu"]["isa_flags"]:
                why.append("another CPU instruction set (native numerics follow it): %s (recorded) vs %s (now)" % (
                    " ".join(then["cpu"]["isa_flags"]), " ".join(now["cpu"]["isa_flags"])))
            if then["cpu"]["cores_usable"] != now["cpu"]["cores_usable"]:
                why.append("another core count (native numerics split sums by it): %s (recorded) vs %s (now)"
                           % (then["cpu"]["cores_usable"], now["cpu"]["cores_usable"]))
    if "libraries" in then:
        changed = sorted(k for k in set(then["libraries"]) | set(now["libraries"])
                         if then["libraries"].get(k) != now["libraries"].get(k))
        if changed:
            why.append("other library versions: " + ", ".join("%s %s -> %s" % (
                k, then["libraries"].get(k), now["libraries"].get(k)) for k in changed))
    return why


def verify(argv):
    import random
    import tempfile
    ap = argparse.ArgumentParser(prog="scripts/reproduce.py verify", description="Rerun recorded runs of a sweep "
                                 "by their recorded commands and say, for each, `same` or the first metric that "
                                 "differs (exit 0 only when all are the same).")
    ap.add_argument("results_dir", help="a folder written by reproduce.py --seeds N (with seeds.json)")
    ap.add_argument("--runs", default=None, help="comma-separated ALG:SEED or ALG-Wworkers:SEED, e.g. cdsgd:19")
    ap.add_argument("--sample", type=int, default=None, help="rerun N runs drawn at random")
    ap.add_argument("--sample-seed", type=int, default=None, help="the draw's seed (default: a new draw each time)")
    ap.add_argument("--scratch", default=None, help="where the reruns write (default: a new temporary folder)")
    args = ap.parse_args(argv)
    if (args.runs is None) == (args.sample is None):
        ap.error("name the runs to rerun with --runs ALG:SEED,... or draw some with --sample N (one of the two)")
    if args.sample is not None and args.sample < 1:
        ap.error("--sample must be an integer >= 1, got %d" % args.sample)
    runs = recorded_runs(args.results_dir)
    chosen = select_runs(runs, args.runs, args.sample, random.Random(args.sample_seed))
    if not chosen:
        sys.exit("reproduce verify: %s holds no recorded run: nothing to check" % args.results_dir)
    scratch = args.scratch or tempfile.mkdtemp(prefix="cdsgd-verify-")
    say("verify: rerunning %d of %d recorded runs into %s: %s" % (len(chosen), len(runs), scratch,
                                                                  ", ".join(r[0] for r in chosen)))
    differ = 0
    for i, (label, key, seed, then) in enumerate(chosen):
        prov = then.get("provenance") or {}
        if not prov.get("command"):
            say("%s: cannot rerun: no recorded command (recorded before provenance was kept)" % label)
            differ += 1
            continue
        out = os.path.join(scratch, "%s-seed%d" % (key, seed))
        say("(%d/%d) %s: %s" % (i + 1, len(chosen), label, " ".join(prov["command"])))
        proc = subprocess.run(rerun_command(prov["command"], out), cwd=ROOT, capture_output=True, text=True)
        with open(os.path.join(scratch, "%s-seed%d.log" % (key, seed)), "w") as f:
            f.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            now = {"failed": failure_reason(proc.stdout + proc.stderr, proc.returncode)}
        else:
            iters, epochs = read_metrics(out)
            now = run_record(Run(seed, iters, epochs, out))
        diff = first_difference(then, now)
        if diff is None:
            print("%s: same" % label, flush=True)
            continue
        differ += 1
        now_prov = now.get("provenance")
        if now_prov is None:
            from cdsgd_mx.experiments import provenance
            now_prov = provenance.record()
        why = explain(prov, now_prov)
        print("%s: differs, %s; %s" % (label, diff, "explained by: " + "; ".join(why) if why else
                                       "not explained: same code, numerics, CPU instruction set and versions"),
              flush=True)
    print("verify: %d of %d the same%s" % (len(chosen) - differ, len(chosen), "" if differ else " (all)"), flush=True)
    return 0 if differ == 0 else 1


# ---- main ---------------------------------------------------------------------------------------

def seed_list(exp, count):
    """The seeds to run: count of them from the config's seed (count None: the config's
    `seeds`); (None,) for one run of the config's seed, into the folders without a seed suffix."""
    from cdsgd_mx.experiments import config as C
    try:
        cfg = C.load(os.path.join(ROOT, exp["config"]))
    except C.ConfigError as e:
        sys.exit("reproduce: %s" % e)
    count = count or (cfg.seeds if cfg.seeds > 1 else None)
    return (None,) if count is None else tuple(range(cfg.seed, cfg.seed + count))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["verify"]:
        sys.exit(verify(argv[1:]))
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
    ap.add_argument("--seeds", type=int, default=None, help="run every algorithm with N seeds (the config's "
                    "seed and the next N - 1) and judge the paper's claims across them (default: the config's "
                    "`seeds`, else one run of its seed)")
    ap.add_argument("--rerun", action="store_true", help="run again even where --out holds a finished run "
                    "with the same settings (without it such runs are reused)")
    ap.add_argument("--pull-compression", default="none", choices=("none", "2bit"),
                    help="2bit: run BIT-SGD and CD-SGD with 2 bits both ways against without, instead of the "
                         "four algorithms (fig6, fig7, fig8, fig9); fig10: time them beside the four, in the same jobs")
    ap.add_argument("--numerics", default="portable", choices=("portable", "native"),
                    help="portable (default): every run pins its numerics, so the same run gives the same weights "
                         "on any x86-64 CPU with AVX2 and any core count; native: this CPU's fastest kernels "
                         "(cdsgd_mx.numerics)")
    ap.add_argument("--allow-mixed", action="store_true", help="reuse finished runs made by another commit or "
                    "changed tree (without it such a sweep stops); the table then says which runs came from which")
    args = ap.parse_args(argv)
    global REPLOT, RERUN, ALLOW_MIXED, NUMERICS
    REPLOT, RERUN, ALLOW_MIXED, NUMERICS = args.replot, args.rerun, args.allow_mixed, args.numerics
    if args.experiment not in EXPERIMENTS:
        ap.error("experiment must be one of %s, got %r" % (", ".join(EXPERIMENTS), args.experiment))
    if args.iterations is not None and args.iterations < 1:
        ap.error("--iterations must be >= 1")
    if args.seeds is not None and args.seeds < 1:
        ap.error("--seeds must be an integer >= 1, got %d" % args.seeds)
    exp = dict(EXPERIMENTS[args.experiment])
    if exp["kind"] == "speed" and args.seeds is not None:
        ap.error("--seeds applies to the accuracy experiments (fig6, fig7, fig8, fig9, table2), not %s"
                 % args.experiment)
    if args.workers:
        try:
            counts = [int(w) for w in args.workers.split(",")]
            assert all(w >= 1 for w in counts)
        except (ValueError, AssertionError):
            ap.error("--workers must be comma-separated integers >= 1, got %r" % args.workers)
        exp["workers"] = exp["quick_workers"] = counts
    name = "fig9" if args.experiment == "table2" else args.experiment
    names, curve_runs, both = ALGORITHMS, CURVE_RUNS, args.pull_compression == "2bit"
    if both and exp["kind"] in ("curves", "ksweep"):  # fig9 too: its ResNet-20 trains with momentum (issue 40)
        exp["kind"] = "curves"
        names, curve_runs, exp["claims"] = BOTH_WAYS, BOTH_WAYS_RUNS, BOTH_WAYS_CLAIMS
    out_dir = os.path.abspath(args.out or os.path.join("results", name + ("-quick" if args.quick else "") +
                                                       ("-both-ways" if both else "")))
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    if exp["kind"] == "speed":
        cfg = load_speed_config(os.path.join(ROOT, exp["config"]), args.quick and exp["quick"],
                                exp["workers"][0] if args.workers else None)
        cases = run_speed(cfg, out_dir, args.iterations, SPEED_BOTH_WAYS if both else ALGORITHMS)
        with open(os.path.join(out_dir, "fig10.json"), "w") as f:
            json.dump(cases, f, indent=1)
        plots = plot_speed(cases, out_dir)
        md = table_speed(exp, cases, args.quick, cfg["workers"])
    else:
        seeds = seed_list(exp, args.seeds)
        ksweep = exp["kind"] == "ksweep"
        results, data, note = run_curves(exp, args.quick, out_dir, args.iterations, args.data_dir,
                                         KSWEEP_RUNS if ksweep else curve_runs, seeds)
        plots = plot_ksweep(exp, results, out_dir) if ksweep else plot_curves(name, exp, results, out_dir, names)
        if seeds == (None,):
            md = table_ksweep(exp, results, args.quick, data, note) if ksweep else \
                table_curves(name, exp, results, args.quick, data, note, names)
        else:
            claims = judge_claims(exp, results)
            md = table_ksweep_seeds(exp, results, args.quick, data, note, claims) if ksweep else \
                table_curves_seeds(name, exp, results, args.quick, data, note, names, claims)
            with open(os.path.join(out_dir, "seeds.json"), "w") as f:
                json.dump(seeds_record(name, args.quick, data, results, claims), f, indent=1)
    md += "\n" + "\n".join("![%s](%s)" % (os.path.basename(p), os.path.basename(p)) for p in plots) + "\n"
    with open(os.path.join(out_dir, "%s.md" % name), "w") as f:
        f.write(md)
    print(md)
    say("results in %s" % out_dir)


if __name__ == "__main__":
    main()

"""Running a sweep's training jobs: each run of scripts/train.py into its folder, with a marker
(reproduce.json) once it finished so that a stopped sweep resumes where it stopped; the guard
that a sweep never mixes code versions; seeds; the data each experiment runs on (and its
fallback); the golden run beside a portable sweep; and the logs read back as a `Run` with its
measures (final test accuracy and loss, seconds per epoch). `Sweep` holds one
command's settings (its options) and what its runs recorded as they went, which the tables
and seeds.json report (cdsgd_mx.experiments.tables, records).
"""
import json
import os
import subprocess
import sys
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Optional

from cdsgd_mx.experiments import config as C
from cdsgd_mx.experiments import data, golden, provenance
from cdsgd_mx.experiments.figures import LABELS

ROOT = provenance.ROOT  # the checkout: scripts/train.py and configs/ are under it
DONE = "reproduce.json"  # written into a run's folder once it finished: what it ran


def say(msg):
    print("reproduce: " + msg, flush=True)


@dataclass
class Sweep:
    """One reproduce.py command: the settings its options give, and what its runs recorded as
    they went (passed to the functions that run and report them)."""
    # the command's options
    replot: bool = False  # --replot: read the logs already in --out instead of running
    rerun: bool = False  # --rerun: run again where a finished run with the same settings is in --out
    allow_mixed: bool = False  # --allow-mixed: reuse finished runs made by another code version (the table says so)
    numerics: str = "portable"  # --numerics: every training run's numerics mode (cdsgd_mx.numerics)
    # what the runs recorded
    code: Optional[dict] = None  # this checkout's code version (provenance.code_version), once known
    # run folder -> the code version that made it (provenance.code_id)
    code_of: dict = field(default_factory=dict)
    # run folder -> the numerics mode it recorded (None: recorded before provenance)
    mode_of: dict = field(default_factory=dict)
    # (name, workers, seed) -> why: runs of a sweep over seeds that failed (diverged)
    failed: dict = field(default_factory=dict)
    # (name, workers, seed) -> {"code", "command"} of a failed run, as its marker says
    failed_how: dict = field(default_factory=dict)
    golden: Optional[dict] = None  # the golden run's numbers, run beside a portable sweep (experiments.golden)

    def this_code(self):
        if self.code is None:
            self.code = provenance.code_version()
        return self.code

    def code_versions(self):
        """{code id: number of runs} over every run used (provenance.code_id)."""
        counts = {}
        for cid in self.code_of.values():
            counts[cid or "unknown"] = counts.get(cid or "unknown", 0) + 1
        return counts

    def numerics_used(self):
        """The numerics mode the runs recorded: one mode, 'mixed: ...', or the --numerics option
        where no run recorded one (logs from before provenance)."""
        modes = sorted({m for m in self.mode_of.values() if m})
        return modes[0] if len(modes) == 1 else "mixed: " + ", ".join(modes) if modes else self.numerics


Run = namedtuple("Run", "seed iters epochs folder", defaults=(None,))  # folder: where its logs are


def final_accuracy(run):
    return run.epochs[-1].get("test_accuracy") if run.epochs else None


def final_loss(run):
    tail = run.iters[-50:]
    return sum(r["loss"] for r in tail) / len(tail)


def epoch_seconds(iters):
    """Mean training wall time per epoch (s): the sum of iteration times of each epoch (data
    loading and steps; evaluation excluded), averaged over the epochs."""
    per = {}
    for r in iters:
        per.setdefault(r["epoch"], []).append(r["iter_ms"])
    return sum(sum(v) for v in per.values()) / 1e3 / len(per)


def check_same_code(sweep, label, out, before):
    """A finished run is reused only when this checkout's code made it: else stop, naming both
    versions (--rerun runs it again, --allow-mixed takes it as it is and the table says so)."""
    theirs, ours = provenance.code_id(before.get("code")), provenance.code_id(sweep.this_code())
    sweep.code_of[out] = theirs
    code_that_ran(sweep, out)  # its numerics mode
    if theirs != ours and not sweep.allow_mixed and not sweep.replot:
        sys.exit("reproduce: %s in %s was made by code %s, and this checkout is %s: a sweep must not mix code "
                 "versions; run it again with --rerun (or in a checkout of %s), or accept the mix with --allow-mixed"
                 % (label, out, theirs or "of unknown version (recorded before provenance)", ours,
                    (theirs or "?")[:12]))


class RunFailed(Exception):
    """A run of a sweep over seeds failed; the message says why in one line."""


def failure_reason(output, code):
    """The last error line of a job's output, without its node prefix."""
    errors = [line.split(" | ", 1)[-1].strip() for line in output.splitlines() if "Error" in line]
    return errors[-1] if errors else "exit code %d" % code


def run_train(sweep, exp, name, overrides, workers, out, what="", keep_going=False):
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
    if sweep.replot or (not sweep.rerun and same):
        if before is not None:
            check_same_code(sweep, label, out, before)
        if before is not None and before.get("failed"):
            say("%s: failed in an earlier sweep (%s)" % (label, before["failed"]))
            raise RunFailed(before["failed"])
        if not sweep.replot:
            say("%s: reusing the finished run in %s" % (label, out))
        return read_metrics(out)
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), "--config", os.path.join(ROOT, exp["config"])] \
        + overrides + ["workers=%d" % workers, "out=" + out]
    done.update(command=provenance.command(cmd))
    say("%s ..." % label)
    if os.path.exists(os.path.join(out, DONE)):
        os.remove(os.path.join(out, DONE))  # a run stopped midway must not pass for the finished one
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "job.log"), "w") as f:
        f.write(proc.stdout + proc.stderr)
    code = code_that_ran(sweep, out)
    done["code"] = code
    sweep.code_of[out] = provenance.code_id(code)
    if proc.returncode != 0 and keep_going:
        why = failure_reason(proc.stdout + proc.stderr, proc.returncode)
        with open(marker, "w") as f:
            json.dump(dict(done, failed=why), f)
        stop_if_code_changed(sweep, label, out, code)
        say("%s failed (%s; see %s): recorded as failed, the sweep goes on"
            % (label, why, os.path.join(out, "job.log")))
        raise RunFailed(why)
    if proc.returncode != 0:
        sys.exit("reproduce: the %s run failed (see %s):\n%s"
                 % (label, os.path.join(out, "job.log"), (proc.stdout + proc.stderr)[-1500:]))
    with open(marker, "w") as f:
        json.dump(done, f)
    stop_if_code_changed(sweep, label, out, code)
    return read_metrics(out)


def code_that_ran(sweep, out):
    """The code version the run itself loaded (its config.json's provenance, written by
    scripts/train.py as it started), else this checkout's. Notes its numerics mode too."""
    try:
        made = json.load(open(os.path.join(out, "config.json"))).get("provenance") or {}
    except (OSError, ValueError):
        made = {}
    sweep.mode_of[out] = (made.get("numerics") or {}).get("mode")
    before = made.get("before") or {}
    if before.get("commit") and provenance.code_id(before) != provenance.code_id(made):
        made = dict(made, code_changed=True, changes_sha256="resumed-across-code-versions")  # made by two
    if "commit" not in made:
        return sweep.this_code()
    return {k: made[k] for k in ("commit", "dirty", "changes", "code_changed", "changes_sha256") if k in made}


def stop_if_code_changed(sweep, label, out, code):
    """A commit or an edit while the sweep runs changes the code its next runs load: stop
    (the run is kept, marked with its code) unless --allow-mixed."""
    theirs, ours = provenance.code_id(code), provenance.code_id(sweep.this_code())
    if theirs != ours and not sweep.allow_mixed:
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
    try:
        cfg = C.load(os.path.join(ROOT, exp["config"]), overrides)
        data.ensure(cfg.dataset, cfg.data_dir)
    except (C.ConfigError, data.DataMissing) as e:
        sys.exit("reproduce: %s" % e)


def run_folder(out_dir, name, workers, seed):
    """logs/NAME-Wworkers, and -seedS after it in a sweep over seeds."""
    return os.path.join(out_dir, "logs", "%s-%dworkers%s" % (name, workers, "" if seed is None else "-seed%d" % seed))


def run_golden(sweep, out_dir, data_dir=None):
    """The golden run (tests/experiments/test_golden.py pins its numbers), with the sweep's code
    and numerics, its numbers also in OUT/golden.json: a sweep whose golden numbers differ from
    the test's was made by other numerics. --replot of a folder recorded without one: None."""
    out = os.path.join(out_dir, "logs", "golden")
    if sweep.replot and not os.path.exists(os.path.join(out, "metrics-rank0.jsonl")):
        return None
    overrides = list(golden.OVERRIDES) + (["data_dir=" + data_dir] if data_dir else [])
    run_train(sweep, {"config": golden.CONFIG}, "golden", overrides, golden.WORKERS, out, " (numerics check)")
    numbers = golden.fingerprint(out)
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(numbers, f, indent=1)
    return numbers


def run_curves(sweep, exp, quick, out_dir, iterations, data_dir, runs, seeds=(None,)):
    """Every run of the experiment, seed after seed (a sweep stopped midway leaves whole seeds
    behind). seeds: (None,) runs the config's seed into the folders without a seed suffix.
    Returns ({(name, workers): [Run per seed]}, the data used, the fallback note)."""
    if not sweep.replot:
        sweep.this_code()  # the sweep's code version, as it begins
    extra, note = data_overrides(exp, quick, data_dir)
    extra += exp["quick"] if quick else []
    extra += ["numerics=" + sweep.numerics]
    if sweep.numerics == "portable":
        # MNIST's data_dir only: the golden run is fig6's (MNIST also comes with the install)
        sweep.golden = run_golden(sweep, out_dir,
                                  data_dir if exp["config"] == "configs/fig6_lenet_mnist.yaml" else None)
    if iterations:
        extra += ["epochs=null", "iterations=%d" % iterations]
    if not sweep.replot:  # with every override: fig8's synthetic fallback is valid only with the quick ones
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
                if sweep.numerics == "portable" and workers >= 3:  # arrival-order sums of 3+ pushes repeat no run
                    seeded.append("fp32_sum=rank")
                try:
                    iters, epochs = run_train(sweep, exp, name, seeded, workers,
                                              run_folder(out_dir, name, workers, seed), what,
                                              keep_going=seed is not None)
                except RunFailed as e:
                    sweep.failed[(name, workers, seed)] = str(e)
                    how = read_marker(run_folder(out_dir, name, workers, seed))
                    if how.get("command"):
                        sweep.failed_how[(name, workers, seed)] = {"code": how.get("code"), "command": how["command"]}
                    continue
                results.setdefault((name, workers), []).append(
                    Run(seed, iters, epochs, run_folder(out_dir, name, workers, seed)))
    first = os.path.join(run_folder(out_dir, runs[-1][0], min(worker_counts), seeds[0]), "config.json")
    return results, json.load(open(first))["data"], note


def seed_list(exp, count):
    """The seeds to run: count of them from the config's seed (count None: the config's
    `seeds`); (None,) for one run of the config's seed, into the folders without a seed suffix."""
    try:
        cfg = C.load(os.path.join(ROOT, exp["config"]))
    except C.ConfigError as e:
        sys.exit("reproduce: %s" % e)
    count = count or (cfg.seeds if cfg.seeds > 1 else None)
    return (None,) if count is None else tuple(range(cfg.seed, cfg.seed + count))

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
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from cdsgd_mx.experiments import verify  # noqa: E402  (this checkout's package, after the path above)
from cdsgd_mx.experiments.figures import EXPERIMENTS  # noqa: E402
from cdsgd_mx.experiments.reproduce import reproduce  # noqa: E402
from cdsgd_mx.experiments.runs import Sweep  # noqa: E402


def verify_command(argv):
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
    return verify.run(args.results_dir, args.runs, args.sample, args.sample_seed, args.scratch)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["verify"]:
        sys.exit(verify_command(argv[1:]))
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
    if args.experiment not in EXPERIMENTS:
        ap.error("experiment must be one of %s, got %r" % (", ".join(EXPERIMENTS), args.experiment))
    if args.iterations is not None and args.iterations < 1:
        ap.error("--iterations must be >= 1")
    if args.seeds is not None and args.seeds < 1:
        ap.error("--seeds must be an integer >= 1, got %d" % args.seeds)
    if EXPERIMENTS[args.experiment]["kind"] == "speed" and args.seeds is not None:
        ap.error("--seeds applies to the accuracy experiments (fig6, fig7, fig8, fig9, table2), not %s"
                 % args.experiment)
    counts = None
    if args.workers:
        try:
            counts = [int(w) for w in args.workers.split(",")]
            assert all(w >= 1 for w in counts)
        except (ValueError, AssertionError):
            ap.error("--workers must be comma-separated integers >= 1, got %r" % args.workers)
    sweep = Sweep(replot=args.replot, rerun=args.rerun, allow_mixed=args.allow_mixed, numerics=args.numerics)
    reproduce(sweep, args.experiment, quick=args.quick, out=args.out, iterations=args.iterations,
              data_dir=args.data_dir, workers=counts, seeds=args.seeds, pull_compression=args.pull_compression)


if __name__ == "__main__":
    main()

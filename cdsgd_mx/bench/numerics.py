"""What portable numerics cost: fig6 runs with native and with portable numerics, taking turns
(native, portable, native, ...), each pair on the same machine under the same load, and the
seconds per epoch of each (the sum of its iteration times: data, step; evaluation excluded).

    python -m cdsgd_mx.bench.numerics [--pairs 3] [--epochs 1 | --iterations N] [--algorithm cdsgd] [--workers 2] [--json]

Runs scripts/train.py of this checkout with configs/fig6_lenet_mnist.yaml. Prints each pair and
the ratio portable / native per pair, their mean and range.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from cdsgd_mx.experiments import provenance

ROOT = provenance.ROOT
TRAIN = os.path.join(ROOT, "scripts", "train.py")
CONFIG = os.path.join(ROOT, "configs", "fig6_lenet_mnist.yaml")


def epoch_seconds(out):
    """Mean over epochs of the sum of rank 0's iteration times (s)."""
    per = {}
    with open(os.path.join(out, "metrics-rank0.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if "iteration" in row:
                per[row["epoch"]] = per.get(row["epoch"], 0.0) + row["iter_ms"] / 1e3
    return sum(per.values()) / len(per)


def run(mode, args, out):
    from cdsgd_mx import numerics  # native must not inherit a portable caller's pins
    env = {k: v for k, v in os.environ.items() if k != numerics.ENV and k not in numerics.PINS}
    cmd = [sys.executable, TRAIN, "--config", CONFIG, "algorithm=" + args.algorithm, "workers=%d" % args.workers,
           "seed=%d" % args.seed, "checkpoint=false", "numerics=" + mode, "out=" + out]
    cmd += ["epochs=null", "iterations=%d" % args.iterations] if args.iterations else ["epochs=%d" % args.epochs]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("bench.numerics: the %s run failed:\n%s" % (mode, (proc.stdout + proc.stderr)[-1500:]))
    return epoch_seconds(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.numerics", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=None, help="instead of --epochs: this many steps (one epoch)")
    ap.add_argument("--algorithm", default="cdsgd", choices=("ssgd", "bitsgd", "odsgd", "cdsgd"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="one JSON object per line (the first: provenance)")
    args = ap.parse_args(argv)
    for name in ("pairs", "epochs", "workers", "iterations"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error("--%s must be an integer >= 1, got %d" % (name, getattr(args, name)))
    if not os.path.exists(TRAIN):
        sys.exit("bench.numerics: needs a checkout of cdsgd-mx (scripts/train.py, looked at %s)" % TRAIN)
    if args.json:
        print(json.dumps({"provenance": provenance.record()}), flush=True)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="cdsgd-numerics-") as scratch:
        for i in range(args.pairs):
            native = run("native", args, os.path.join(scratch, "native%d" % i))
            portable = run("portable", args, os.path.join(scratch, "portable%d" % i))
            ratios.append(portable / native)
            row = {"pair": i, "native_epoch_s": native, "portable_epoch_s": portable, "ratio": portable / native}
            print(json.dumps(row) if args.json else "pair %d: native %.2f s/epoch, portable %.2f s/epoch, "
                  "portable / native %.3f" % (i + 1, native, portable, portable / native), flush=True)
    summary = {"algorithm": args.algorithm, "workers": args.workers, "epochs": args.epochs, "pairs": args.pairs,
               "ratio_mean": sum(ratios) / len(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
    print(json.dumps(summary) if args.json else "portable / native, %d pairs: mean %.3f (%.3f - %.3f)" % (
        args.pairs, summary["ratio_mean"], summary["ratio_min"], summary["ratio_max"]), flush=True)


if __name__ == "__main__":
    main()

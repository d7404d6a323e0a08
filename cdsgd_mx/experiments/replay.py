"""Replay a recorded run against the simulation: is a divergence the algorithm's, or ours?

    CDSGD_RECORD=DIR python scripts/train.py --config configs/fig6_lenet_mnist.yaml seed=3
    python -m cdsgd_mx.experiments.replay DIR

The run (any script that trains with cdsgd_mx.Trainer) writes each worker's forward weights
x(t) and gradient g(t) at every step (cdsgd_mx.worker.recorder). The replay feeds those same
gradients to the independent simulation of Algorithm 1 (simulation.py) and compares, at every
step and on every worker, the simulation's x(t) with the run's, bit for bit. It prints the
first step where they differ, or that they are identical through the last recorded step, and
where the first non-finite gradient came. Identical weights up to a non-finite gradient mean
the algorithm, at those settings and on those gradients, diverged: not the implementation.
"""
import argparse
import glob
import os
import sys

import numpy as np

from cdsgd_mx.experiments.simulation import simulate
from cdsgd_mx.worker import recorder

SUPPORTED = {"optimizer": ("sgd",), "local_optimizer": ("sgd",), "pull_compression": ("none",),
             "clip_gradient": (None,)}
SAME = ("algorithm", "k", "warmup_steps", "threshold", "workers", "momentum", "wd", "names", "shapes",
        "multipliers", "nonfinite")


class Unsupported(Exception):
    """A record the simulation does not model: said in one line."""


class Differ(Exception):
    """The simulation's weights left the run's."""


def load(folder):
    """(meta, [records of each rank]) with the steps every rank recorded."""
    files = sorted(glob.glob(os.path.join(folder, "rank*.json")))
    if not files:
        raise Unsupported("%s holds no record (rank<r>.json): run the job with %s=%s" % (folder, recorder.ENV, folder))
    metas, recs = zip(*[recorder.read(folder, r) for r in range(len(files))])
    meta = metas[0]
    if len(files) != meta["workers"]:
        raise Unsupported("%s: %d workers' records, the run had %d" % (folder, len(files), meta["workers"]))
    for m in metas[1:]:
        for field in SAME:
            if m[field] != meta[field]:
                raise Unsupported("rank %d's %s is %r, rank 0's %r" % (m["rank"], field, m[field], meta[field]))
    for field, allowed in SUPPORTED.items():
        if meta[field] not in allowed:
            raise Unsupported("%s: %r; the simulation models %s" % (field, meta[field], " or ".join(map(repr, allowed))))
    if any(m != [1.0, 1.0] for m in meta["multipliers"]):
        raise Unsupported("multipliers: lr_mult and wd_mult must be 1 (the simulation models one rate)")
    steps = min(len(r) for r in recs)
    return meta, [r[:steps] for r in recs]


def constant_rates(recs):
    """Steps while the batch size and both rates stay as at step 0 (the simulation runs one)."""
    heads = recs[0]["head"][:, 1:]
    changed = np.nonzero((heads != heads[0]).any(axis=1))[0]
    return int(changed[0]) if len(changed) else len(heads)


def replay(folder, out=sys.stdout, every=500):
    """Compare; returns a dict: steps compared, first differing step (or None), first
    non-finite gradient (step, rank, parameter) or None."""
    meta, recs = load(folder)
    steps = constant_rates(recs)
    head = recs[0]["head"][0] if steps else None
    sizes = [int(np.prod(s)) for s in meta["shapes"]]
    offsets = np.cumsum([0] + sizes).tolist()
    names, W = meta["names"], meta["workers"]

    def run_x(r, s, i):
        return recs[r]["x"][s, offsets[i]:offsets[i + 1]]

    def grad_fn(x, r, s, i):
        mine = run_x(r, s, i)
        ours = np.asarray(x, np.float32).reshape(-1)
        if not np.array_equal(ours.view(np.uint32), mine.view(np.uint32)):
            diff = np.abs(ours.astype(np.float64) - mine)
            raise Differ("step %d, worker %d, %s: %d of %d weights differ, the largest by %.3g (simulation %r, run %r "
                         "at index %d)" % (s, r, names[i], int((ours != mine).sum()), ours.size, np.nanmax(diff),
                                           float(ours[np.nanargmax(diff)]), float(mine[np.nanargmax(diff)]),
                                           int(np.nanargmax(diff))))
        if r == W - 1 and i == len(names) - 1 and s % every == 0:
            out.write("replay: step %d of %d identical; largest |x| %s\n"
                      % (s, steps, ", ".join("%.3g" % float(np.abs(recs[q]["x"][s]).max()) for q in range(W))))
            out.flush()
        return recs[r]["g"][s, offsets[i]:offsets[i + 1]].reshape(meta["shapes"][i])

    nonfinite = None
    for s in range(steps):
        bad = [r for r in range(W) if not np.isfinite(recs[r]["g"][s]).all()]
        if bad:
            r = bad[0]
            i = next(i for i in range(len(names)) if not np.isfinite(recs[r]["g"][s, offsets[i]:offsets[i + 1]]).all())
            nonfinite = (s, r, names[i])
            break
    poisoned = ()
    if nonfinite and meta["nonfinite"] == "skip":  # such steps were dropped on every worker
        poisoned = [(r, s) for s in range(steps) for r in range(W) if not np.isfinite(recs[r]["g"][s]).all()]
    # up to the first non-finite gradient (included: its x is compared), unless the run skipped them
    upto = steps if poisoned or nonfinite is None else nonfinite[0] + 1
    result = {"steps": upto, "differs": None, "nonfinite": nonfinite, "recorded": len(recs[0])}
    if not upto:
        return result
    init = [recs[0]["x"][0, offsets[i]:offsets[i + 1]].reshape(meta["shapes"][i]).copy() for i in range(len(names))]
    try:
        simulate(meta["algorithm"], W, upto, meta["warmup_steps"], meta["k"], meta["threshold"], init, grad_fn,
                 float(head[2]), meta["momentum"], float(head[3]), float(head[1]), poisoned=poisoned, wd=meta["wd"])
    except Differ as e:
        result["differs"] = str(e)
    return result


def describe(result):
    lines = []
    if result["differs"]:
        lines.append("the simulation and the run differ first at %s" % result["differs"])
    else:
        lines.append("identical: every worker's weights equal the simulation's, bit for bit, at each of the %d steps "
                     "compared" % result["steps"])
    if result["nonfinite"]:
        s, r, name = result["nonfinite"]
        lines.append("first non-finite gradient: step %d, worker %d, %s%s" % (
            s, r, name, "" if result["differs"] else
            ": the algorithm itself diverged on these gradients, not the implementation"))
    elif result["steps"] < result["recorded"]:
        lines.append("compared %d of %d recorded steps: the batch size or a rate changed at step %d"
                     % (result["steps"], result["recorded"], result["steps"]))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="the folder given as %s to the recorded run" % recorder.ENV)
    ap.add_argument("--every", type=int, default=500, help="progress line every N steps")
    args = ap.parse_args(argv)
    try:
        result = replay(args.folder, every=args.every)
    except Unsupported as e:
        sys.exit("replay: %s" % e)
    print(describe(result))
    return 1 if result["differs"] else 0


if __name__ == "__main__":
    sys.exit(main())

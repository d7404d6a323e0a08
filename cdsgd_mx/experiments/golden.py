"""The golden run: a short fig6 run whose final numbers are pinned exactly in
tests/experiments/test_golden.py, and recorded beside every sweep of scripts/reproduce.py.

Its numbers move only when the numerics move (code, libraries, or a pin that did not hold), so a
sweep recorded with other golden numbers than the test pins was made by other numerics: the test
fails until such a sweep is re-recorded or listed as stale in docs/reproduction/STALE.md.
"""
import json
import os

CONFIG = "configs/fig6_lenet_mnist.yaml"
OVERRIDES = ["algorithm=cdsgd", "seed=0", "epochs=null", "iterations=300", "numerics=portable", "checkpoint=false"]
WORKERS = 2


def fingerprint(out):
    """The numbers the test pins, from a finished golden run's folder: the last epoch's mean
    training loss and test accuracy (rank 0), and every rank's weights digest."""
    ranks = sorted(int(f[len("metrics-rank"):-len(".jsonl")]) for f in os.listdir(out)
                   if f.startswith("metrics-rank") and f.endswith(".jsonl"))
    last = []
    for r in ranks:
        with open(os.path.join(out, "metrics-rank%d.jsonl" % r)) as f:
            epochs = [json.loads(line) for line in f if '"iteration"' not in line]
        if not epochs or "weights_sha256" not in epochs[-1]:
            raise ValueError("the golden run in %s has no finished epoch with a weights digest (rank %d)" % (out, r))
        last.append(epochs[-1])
    return {"loss": last[0]["loss"], "test_accuracy": last[0]["test_accuracy"],
            "weights_sha256": [e["weights_sha256"] for e in last]}

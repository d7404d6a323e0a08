"""seeds.json, the record of a sweep over seeds: every run's numbers and how it was made (its
provenance), the failed runs and their rates, the verdicts, the golden run's numbers and the
code versions; what `reproduce.py verify` (cdsgd_mx.experiments.verify) reruns and compares.
"""
import json
import os

from cdsgd_mx.experiments import provenance
from cdsgd_mx.experiments.runs import epoch_seconds, final_accuracy, final_loss
from cdsgd_mx.experiments.verdicts import failure_rates


def run_record(r):
    """One run's numbers, and how to make it again (its provenance: commit, command, numerics,
    CPU, versions; scripts/train.py wrote it into the run's config.json)."""
    last = r.epochs[-1] if r.epochs else {}
    out = {"test_accuracy": final_accuracy(r), "final_loss": final_loss(r), "epoch_s": epoch_seconds(r.iters),
           "last_epoch_loss": last.get("loss"), "weights_sha256": last.get("weights_sha256")}
    path = os.path.join(r.folder or "", "config.json")
    out["provenance"] = json.load(open(path)).get("provenance") if r.folder and os.path.exists(path) else None
    return out


def failed_record(sweep, n, w, s, why):
    out = {"run": n, "workers": w, "seed": s, "why": why}
    if (n, w, s) in sweep.failed_how:
        out["provenance"] = sweep.failed_how[(n, w, s)]
    return out


def seeds_record(sweep, name, quick, data, results, claims):
    """Every seed's numbers, how each was made, and the verdicts, for later comparisons and
    `verify` to read (seeds.json)."""
    runs = {"%s-%dworkers" % key: {str(r.seed): run_record(r) for r in rs} for key, rs in results.items()}
    failed = [failed_record(sweep, n, w, s, why) for (n, w, s), why in sorted(sweep.failed.items())]
    rates = [dict(run=n, workers=w, **r) for (n, w), r in sorted(failure_rates(results, sweep.failed).items())]
    versions = sweep.code_versions()
    return {"experiment": name, "quick": quick, "data": data, "numerics": sweep.numerics_used(), "golden": sweep.golden,
            "reproduce": provenance.record(with_mxnet=False),  # this command, here and now
            "code_versions": versions, "mixed": len(versions) > 1, "runs": runs, "claims": claims,
            "failed": failed, "failure_rates": rates}

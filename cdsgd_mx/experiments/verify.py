"""`reproduce.py verify`: rerun recorded runs of a sweep (seeds.json) by their recorded commands
into a scratch folder and say, for each, `same` or the first metric that differs with both
values and what in their provenance explains it (another commit, other numerics settings,
another CPU instruction set or core count, other library versions).
"""
import json
import os
import random
import subprocess
import sys
import tempfile

from cdsgd_mx.experiments import provenance
from cdsgd_mx.experiments.records import run_record
from cdsgd_mx.experiments.runs import ROOT, Run, failure_reason, read_metrics, say

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



def run(results_dir, names=None, sample=None, sample_seed=None, scratch=None):
    """Rerun the runs of RESULTS_DIR/seeds.json named ALG:SEED,... (names) or `sample` drawn at
    random (with sample_seed; None: a new draw) into `scratch` (None: a new temporary folder),
    printing `same` or what differs for each. Returns the exit status: 0 only when all are the
    same."""
    runs = recorded_runs(results_dir)
    chosen = select_runs(runs, names, sample, random.Random(sample_seed))
    if not chosen:
        sys.exit("reproduce verify: %s holds no recorded run: nothing to check" % results_dir)
    scratch = scratch or tempfile.mkdtemp(prefix="cdsgd-verify-")
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
            now_prov = provenance.record()
        why = explain(prov, now_prov)
        print("%s: differs, %s; %s" % (label, diff, "explained by: " + "; ".join(why) if why else
                                       "not explained: same code, numerics, CPU instruction set and versions"),
              flush=True)
    print("verify: %d of %d the same%s" % (len(chosen) - differ, len(chosen), "" if differ else " (all)"), flush=True)
    return 0 if differ == 0 else 1

"""Fig. 10, the timed runs: its config (models x batches x links), one bench.overlap job per case
timing the algorithms (taking turns in one job, or one job each) beside the communication-only
rounds that calibrate the time model, and each case's measured iteration times, speedups over
BIT-SGD and the model's prediction (cdsgd_mx.experiments.timemodel).
"""
import json
import os
import subprocess
import sys

import yaml

from cdsgd_mx.experiments import timemodel
from cdsgd_mx.experiments.config import NETWORKS, RATE_RE, _is_int, _is_num
from cdsgd_mx.experiments.figures import ALGORITHMS
from cdsgd_mx.experiments.runs import ROOT, say


SPEED_FIELDS = ("models", "batches", "bandwidths", "workers", "servers", "iterations", "warmup", "k", "threshold",
                "timing", "network")
TIMINGS = ("interleaved", "separate")


def load_speed_config(path, quick, workers=None):
    """The YAML config of fig10, checked field by field; quick: a dict of fields that replace
    the config's. A bad config exits with one line naming the field."""
    from cdsgd_mx.experiments import models
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


def run_speed(sweep, cfg, out_dir, iterations, algorithms=ALGORITHMS):
    """One bench.overlap run per (model, batch, bandwidth): the algorithms (the four, or with
    --pull-compression 2bit also BIT-SGD and CD-SGD both ways) plus the communication-only
    rounds that calibrate phi and psi + delta, all in one job taking turns (timing:
    interleaved) or one job each (separate)."""
    if algorithms != ALGORITHMS and cfg["timing"] != "interleaved":
        sys.exit("reproduce: --pull-compression 2bit times fig10 interleaved only (timing: interleaved), "
                 "got timing: %s" % cfg["timing"])
    network = cfg["network"]
    if network == "hosts" and not sweep.replot:
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
                if sweep.replot:
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


def summarize_case(model, batch, bandwidth, rows, k, algorithms=ALGORITHMS):
    """Measured iteration times, speedups over BIT-SGD (T_bit / T - 1) and the time model's
    prediction from costs calibrated in the same case (tau: forward/backward alone; phi and
    psi + delta: the communication-only rounds)."""
    comm = next(r for r in rows if "phi_ms" in r)
    runs = {r["job"]: r for r in rows if r.get("job") in algorithms}
    tau = sum(runs[a]["compute_ms"] for a in ALGORITHMS) / len(ALGORITHMS)
    costs = timemodel.calibrate(tau, comm["phi_ms"], comm["psi_plus_delta_ms"])
    # interleaved: a job per bucket size, each algorithm's model from its own job's rounds
    predicted = comm.get("model_ms") or timemodel.predict(costs, k)
    measured = {a: runs[a]["iter_ms"] for a in algorithms if a in runs}
    # interleaved: the same speedup cycle by cycle (each cycle ran every algorithm once)
    cycles = {a: r["cycle_iter_ms"] for a, r in runs.items() if "cycle_iter_ms" in r}
    per_cycle = {a: [b / t - 1 for b, t in zip(cycles["bitsgd"], ts)] for a, ts in cycles.items() if a != "bitsgd"}
    made = next((r["provenance"] for r in rows if "provenance" in r), None)  # bench.overlap's first line
    return {"per_cycle_speedup_over_bitsgd": per_cycle, "timing": "interleaved" if cycles else "separate",
            "jobs": len(comm.get("jobs", [None])),  # interleaved: one job per bucket size
            "provenance": made,
            "model": model, "batch": batch, "bandwidth": bandwidth, "params": next(iter(runs.values()))["params"],
            "tau_ms": tau, "phi_ms": comm["phi_ms"], "psi_plus_delta_ms": comm["psi_plus_delta_ms"],
            "measured_ms": measured, "predicted_ms": predicted,
            "speedup_over_bitsgd": {a: measured["bitsgd"] / t - 1 for a, t in measured.items() if a != "bitsgd"}}


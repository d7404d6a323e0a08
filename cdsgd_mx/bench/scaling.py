"""CD-SGD's speed by worker count on a cluster's network (issue 48): the scaling table.

    python -m cdsgd_mx.bench.scaling [--models resnet50,inception_bn] [--workers 2,4,8,16]
        [--servers 1,1,2,4] [--nic 1gbit] [--compute-ms resnet50=90,inception_bn=25]
        [--k 5] [--blocks 3] [--json FILE] [--plot FILE.png]

Each cell (a model, W workers, S servers) is one job of `python -m cdsgd_mx.bench.overlap
--interleaved` on W + S emulated hosts, a NIC of --nic each way per host, each worker's
forward/backward replaced by --compute-ms of waiting (gradients of the model's real shapes;
communication, codec, servers and local update real). In the job the algorithms take turns:
S-SGD, BIT-SGD, OD-SGD, CD-SGD (k = --k) and, with 2-bit pulls, BIT-SGD and CD-SGD both ways,
beside the fp32 round (phi), the 2-bit round (psi + delta) and the both-ways round alone; each
algorithm on the buckets it gets by default (2^20 values for all; the both-ways ones, whose
store pulls codes, in a job of their own). Each algorithm's iteration
time is printed beside the time model's (cdsgd_mx.experiments.timemodel, eqs. 2-7, calibrated
by its job's tau and rounds alone; the cell's phi and psi are CD-SGD's). Each algorithm runs --blocks timed
blocks of 2k steps, in turns with the others; its time is the median block's, and the table
shows the spread (fastest and slowest block), so a block that another process slowed neither
moves the figure nor hides.

Stock MXNet in the same cell, on the same hosts: `python -m cdsgd_mx.bench.comm --network hosts`
times a round of gluon's Trainer on `dist_sync` (stock_fp32) and of MXNet's own 2-bit
(stock_2bit) on MXNet's own servers, and the row is the measured compute (tau) plus that round:
a step of stock MXNet waits for its round as S-SGD's does (eq. 2). An emulated step cannot show
what stock MXNet hides behind a real backward (the last layers' pushes start while the first
layers still compute); neither can it for ours.

The goal per cell where the model says communication dominates (CD-SGD's mean communication
((k-1)(psi+delta) + phi)/k above tau): CD-SGD within 15% of max(tau, that communication), and
faster than BIT-SGD and S-SGD. The cell's line says which goal it misses, and whether the
cell was bound by this machine's cores (its nodes kept 80% or more of them busy: on a cluster
each node has its own), which an emulated network cannot hide.

--compute-ms: the paper gives no per-iteration compute times; the defaults are estimates (see
docs/performance.md, "Scaling: CD-SGD against BIT-SGD and S-SGD"). --json writes every cell's rows; --plot draws time per step against
workers, one line per algorithm, a panel per model.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from cdsgd_mx.experiments import provenance, timemodel

ALGORITHMS = ["ssgd", "bitsgd", "odsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit"]
STOCK = ["stock_fp32", "stock_2bit"]  # stock MXNet: gluon dist_sync fp32, MXNet's own 2-bit (bench.comm)
DEFAULT_COMPUTE_MS = {"resnet50": 90.0, "inception_bn": 25.0}
CPU_BOUND = 0.8  # a cell whose nodes keep this share of the cores busy is limited by them


def stock_rounds(model, workers, servers, nic, rounds, repeats, timeout):
    """{system: [ms per round of each job]} of stock MXNet on the cell's hosts: bench.comm,
    --repeats jobs per system, the systems in turn."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "stock.json")
        cmd = [sys.executable, "-m", "cdsgd_mx.bench.comm", "--models", model, "--bandwidth", nic, "--network", "hosts",
               "--systems", ",".join(STOCK), "--workers", str(workers), "--servers", str(servers),
               "--rounds", str(rounds), "--repeats", str(repeats), "--timeout", str(timeout), "--json", path]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        runs = json.load(open(path))["runs"] if os.path.exists(path) else []
    systems = runs[0].get("systems", {}) if runs else {}
    if proc.returncode != 0 or any("ms" not in systems.get(s, {}) for s in STOCK):
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        why = "; ".join("%s: %s" % (s, systems[s]["error"]) for s in STOCK if "error" in systems.get(s, {}))
        raise RuntimeError("stock MXNet's jobs of the %s cell with %d workers and %d servers failed (exit code %d%s)"
                           % (model, workers, servers, proc.returncode, "; " + why if why else ""))
    return {s: systems[s].get("jobs_ms", [systems[s]["ms"]]) for s in STOCK}


def run_cell(model, workers, servers, nic, compute_ms, k, blocks, timeout):
    cmd = [sys.executable, "-m", "cdsgd_mx.bench.overlap", "--interleaved", "--json", "--model", model,
           "--workers", str(workers), "--servers", str(servers), "--emulate-hosts", str(workers + servers),
           "--nic", nic, "--compute-ms", str(compute_ms), "--k", str(k), "--iterations", str(blocks * 2 * k),
           "--algorithms", ",".join(ALGORITHMS), "--timeout", str(timeout)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    rows = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    jobs = {r["job"]: r for r in rows if "job" in r}
    costs = next((r for r in rows if "phi_ms" in r), None)
    if proc.returncode != 0 or costs is None or set(jobs) != set(ALGORITHMS):
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-3000:])
        raise RuntimeError("the %s cell with %d workers and %d servers failed (exit code %d)"
                           % (model, workers, servers, proc.returncode))
    tau = sum(j["tau_ms"] for j in costs["jobs"]) / len(costs["jobs"])
    comm_cd = timemodel.cd_communication(costs["phi_ms"], costs["psi_plus_delta_ms"], k)
    served = [j["server_cpu_ms"] for j in costs["jobs"]]
    cell = {"model": model, "workers": workers, "servers": servers, "nic": nic, "compute_ms_emulated": compute_ms,
            "k": k, "tau_ms": tau, "phi_ms": costs["phi_ms"], "psi_plus_delta_ms": costs["psi_plus_delta_ms"],
            "psi_pull_plus_delta_ms": costs.get("psi_pull_plus_delta_ms"), "cdsgd_comm_ms": comm_cd,
            "phi_pull_ms": costs.get("phi_pull_ms"),  # CD-SGD both ways' correction round alone
            # each algorithm on its own default buckets: a job per bucket size, its own rounds alone
            "jobs": costs["jobs"],
            "server_cpu_ms": None if None in served else max(served),  # the busier job's
            "iter_ms": {a: jobs[a]["iter_ms"] for a in ALGORITHMS},  # the median block's
            "blocks_ms": {a: jobs[a]["cycle_iter_ms"] for a in ALGORITHMS},
            "model_ms": {a: costs["model_ms"][a] for a in ALGORITHMS if a in costs["model_ms"]},
            "worker_cpu_ms": {a: jobs[a].get("worker_cpu_ms") for a in ALGORITHMS}}
    jobs_ms = stock_rounds(model, workers, servers, nic, max(2 * k, 10), blocks, timeout)
    cell["stock_round_ms"] = {s: statistics.median(ms) for s, ms in jobs_ms.items()}
    cell["iter_ms"].update({s: tau + ms for s, ms in cell["stock_round_ms"].items()})
    cell["blocks_ms"].update({s: [tau + m for m in ms] for s, ms in jobs_ms.items()})
    cell["cores"] = provenance.cpu()["cores_usable"]
    cell["cpu_busy"] = cpu_busy(cell)
    cell["verdict"] = verdict(cell)
    return cell


def cpu_busy(cell):
    """Per algorithm, the share of this machine's cores the cell's nodes kept busy a step: the W
    workers' CPU and S times the busiest server's (over the whole job that ran the algorithm:
    an upper bound) over cores x the step's time. Near 1 the cell measures this machine's cores,
    not the network: on a cluster every node has cores of its own. None where a node's CPU was
    not reported."""
    busy = {}
    for a in ALGORITHMS:
        job = next((j for j in cell.get("jobs", []) if a in j["algorithms"]), None)
        server = job["server_cpu_ms"] if job else cell["server_cpu_ms"]
        worker = cell["worker_cpu_ms"].get(a)
        busy[a] = None if server is None or worker is None else \
            (cell["workers"] * worker + cell["servers"] * server) / (cell["cores"] * cell["iter_ms"][a])
    return busy


def verdict(cell):
    """The goal's outcome in one phrase: met, missed (which part), or not asked (compute dominates)."""
    t = cell["iter_ms"]
    bound = max(cell["tau_ms"], cell["cdsgd_comm_ms"])
    misses = []
    if t["cdsgd"] > 1.15 * bound:
        misses.append("CD-SGD %.2fx max(compute, comm)" % (t["cdsgd"] / bound))
    for other in ("bitsgd", "ssgd"):
        if t["cdsgd"] >= t[other]:
            misses.append("CD-SGD not faster than %s" % other)
    busy = cell.get("cpu_busy", {}).get("cdsgd")
    if busy is not None and busy >= CPU_BOUND:
        misses.append("CPU-bound here (%.0f%% of %d cores busy)" % (100 * busy, cell["cores"]))
    if cell["cdsgd_comm_ms"] <= cell["tau_ms"]:
        return "compute dominates (goal not asked)" + ("; " + ", ".join(misses) if misses else "")
    return "goal met" if not misses else "missed: " + ", ".join(misses)


def spread(cell, name):
    """The fastest and slowest timed block of an algorithm (or stock job), and their count."""
    ms = cell.get("blocks_ms", {}).get(name)
    return "%.1f-%.1f (%d)" % (min(ms), max(ms), len(ms)) if ms else "-"


def print_cell(cell):
    print("\n%s, %d workers + %d servers on %d hosts, %s NICs, compute %.0f ms (measured %.1f)" % (
        cell["model"], cell["workers"], cell["servers"], cell["workers"] + cell["servers"], cell["nic"],
        cell["compute_ms_emulated"], cell["tau_ms"]))
    print("  rounds alone: fp32 (phi) %.1f ms, 2-bit (psi + delta) %.1f ms, 2-bit both ways %s ms; "
          "busiest server's CPU %s ms per step" % (
              cell["phi_ms"], cell["psi_plus_delta_ms"],
              "%.1f" % cell["psi_pull_plus_delta_ms"] if cell["psi_pull_plus_delta_ms"] is not None else "-",
              "%.1f" % cell["server_cpu_ms"] if cell["server_cpu_ms"] is not None else "-"))
    if cell.get("phi_pull_ms") is not None:
        print("  CD-SGD both ways' correction alone (fp32, V tracked: phi_pull) %.1f ms" % cell["phi_pull_ms"])
    for j in cell.get("jobs", []):
        if "cdsgd" not in j["algorithms"]:
            print("  %s in a job of their own (buckets of %d values): fp32 round alone %.1f ms" % (
                ", ".join(j["algorithms"]), j["bucket_size"], j["phi_ms"]))
    print("  %-12s %10s %15s %10s %8s %14s %10s" % ("algorithm", "iter ms", "blocks min-max", "model ms", "/model",
                                                     "worker CPU ms", "cores busy"))
    for a in ALGORITHMS:
        m = cell["model_ms"].get(a)
        cpu = cell["worker_cpu_ms"].get(a)
        busy = cell.get("cpu_busy", {}).get(a)
        print("  %-12s %10.1f %15s %10s %8s %14s %10s" % (a, cell["iter_ms"][a], spread(cell, a),
                                                          "%.1f" % m if m else "-",
                                                          "%.2f" % (cell["iter_ms"][a] / m) if m else "-",
                                                          "%.1f" % cpu if cpu is not None else "-",
                                                          "%.0f%%" % (100 * busy) if busy is not None else "-"))
    for s in STOCK:
        if s in cell["iter_ms"]:
            print("  %-12s %10.1f %15s %10s %8s %14s %10s   (compute + its round of %.1f ms, MXNet's own servers)" % (
                s, cell["iter_ms"][s], spread(cell, s), "-", "-", "-", "-", cell["stock_round_ms"][s]))
    t = cell["iter_ms"]
    if all(s in t for s in STOCK):
        print("  against stock MXNet: S-SGD / stock fp32 %.2f, BIT-SGD / MXNet 2-bit %.2f, CD-SGD / stock fp32 %.2f, "
              "CD-SGD / MXNet 2-bit %.2f" % (t["ssgd"] / t["stock_fp32"], t["bitsgd"] / t["stock_2bit"],
                                             t["cdsgd"] / t["stock_fp32"], t["cdsgd"] / t["stock_2bit"]))
    gain = t["bitsgd"] / t["cdsgd"] - 1  # the paper's speed-up ratio over BIT-SGD
    print("  CD-SGD / BIT-SGD %.2f (%.0f%% %s), / S-SGD %.2f, / max(compute, comm) %.2f; both ways: "
          "CD-SGD / BIT-SGD %.2f; %s" % (
              t["cdsgd"] / t["bitsgd"], 100 * abs(gain), "faster" if gain >= 0 else "slower", t["cdsgd"] / t["ssgd"],
              t["cdsgd"] / max(cell["tau_ms"], cell["cdsgd_comm_ms"]), t["cdsgd_2bit"] / t["bitsgd_2bit"],
              cell["verdict"]), flush=True)


def plot(cells, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = sorted({c["model"] for c in cells})
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = sorted((c for c in cells if c["model"] == model), key=lambda c: c["workers"])
        ws = [c["workers"] for c in mine]
        for a in ALGORITHMS:
            ax.plot(ws, [c["iter_ms"][a] for c in mine], marker="o", label=a,
                    linestyle="--" if a.endswith("_2bit") else "-")
        for s in STOCK:
            if all(s in c["iter_ms"] for c in mine):
                ax.plot(ws, [c["iter_ms"][s] for c in mine], marker="s", color="black", label=s + " (MXNet)",
                        linestyle="-." if s.endswith("2bit") else ":")
        ax.plot(ws, [c["tau_ms"] for c in mine], color="grey", linestyle=":", label="compute (tau)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ws)
        ax.set_xticklabels([str(w) + "w/" + str(c["servers"]) + "s" for w, c in zip(ws, mine)])
        ax.set_xlabel("workers / servers (a host each, %s NICs)" % mine[0]["nic"])
        ax.set_ylabel("time per step (ms)")
        ax.set_title("%s, compute %.0f ms emulated" % (model, mine[0]["compute_ms_emulated"]))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_list(text, name, cast=int):
    try:
        values = [cast(v) for v in text.split(",") if v.strip()]
        if not values or min(values) < 1:
            raise ValueError
        return values
    except ValueError:
        sys.exit("bench.scaling: --%s takes comma-separated numbers >= 1, got %r" % (name, text))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.scaling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,inception_bn")
    ap.add_argument("--workers", default="2,4,8,16")
    ap.add_argument("--servers", default="1,1,2,4", help="servers of each --workers entry")
    ap.add_argument("--nic", default="1gbit", help="each host's NIC, each way (tc rate)")
    ap.add_argument("--compute-ms", default=",".join("%s=%g" % kv for kv in DEFAULT_COMPUTE_MS.items()),
                    help="MODEL=MS,... (default: estimates, see docs/performance.md)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=3,
                    help="timed blocks of 2k steps per algorithm (and stock jobs per system); the median is shown")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a cell's job may run")
    ap.add_argument("--json", help="write the cells here")
    ap.add_argument("--plot", help="draw time per step against workers here (PNG)")
    args = ap.parse_args(argv)
    from cdsgd_mx.cluster import emulate
    from cdsgd_mx.cluster.shaping import RATE_RE
    from cdsgd_mx.experiments import models as known
    workers, servers = parse_list(args.workers, "workers"), parse_list(args.servers, "servers")
    if len(workers) != len(servers):
        sys.exit("bench.scaling: --servers needs one entry per --workers entry (%d), got %d"
                 % (len(workers), len(servers)))
    models = [m for m in args.models.split(",") if m]
    bad = [m for m in models if m not in known.INPUT_SHAPES]
    if bad or not models:
        sys.exit("bench.scaling: --models must be some of %s, got %r" % (", ".join(known.INPUT_SHAPES), args.models))
    compute = dict(DEFAULT_COMPUTE_MS)
    try:
        for item in filter(None, args.compute_ms.split(",")):
            name, ms = item.split("=")
            compute[name] = float(ms)
            if not compute[name] >= 0:
                raise ValueError
    except ValueError:
        sys.exit("bench.scaling: --compute-ms takes MODEL=MS,... with MS >= 0, got %r" % args.compute_ms)
    missing = [m for m in models if m not in compute]
    if missing:
        sys.exit("bench.scaling: --compute-ms has no time for %s (give MODEL=MS)" % ", ".join(missing))
    if not RATE_RE.match(args.nic):
        sys.exit("bench.scaling: --nic must be a tc rate such as 100mbit or 1gbit, got %r" % args.nic)
    if args.k < 1 or args.blocks < 1:
        sys.exit("bench.scaling: --k and --blocks must be >= 1")
    if emulate.unavailable():
        sys.exit("bench.scaling: emulated hosts are not available here: %s" % emulate.unavailable())
    record = {"provenance": provenance.record(), "cells": []}
    print(provenance.machine_line(record["provenance"]["cpu"]), flush=True)  # the cells below are this machine's
    grid = [(m, w, s) for m in models for w, s in zip(workers, servers)]
    start = time.time()
    for i, (model, w, s) in enumerate(grid):
        print("bench.scaling: (%d/%d) %s, %d workers + %d servers, %.0f s so far ..."
              % (i + 1, len(grid), model, w, s, time.time() - start), flush=True)
        try:
            cell = run_cell(model, w, s, args.nic, compute[model], args.k, args.blocks, args.timeout)
        except RuntimeError as e:
            sys.exit("bench.scaling: %s" % e)
        record["cells"].append(cell)
        print_cell(cell)
        if args.json:  # after every cell: a long grid keeps what it measured
            with open(args.json, "w") as f:
                json.dump(record, f, indent=1)
    if args.plot:
        plot(record["cells"], args.plot)
        print("bench.scaling: plot written to %s" % args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

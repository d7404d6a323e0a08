"""bench.comm's jobs: one system's job on a link of either network model, run under the
launcher, its workers' RESULT lines read into one result (the slowest worker, the spans of
their traces, the busiest server's stages, the servers' proof checks), or why it failed; and
whether a link can be shaped here at all."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from cdsgd_mx.cluster.shaping import netns_prelude, netns_unavailable
from cdsgd_mx.wire import stages
from cdsgd_mx.bench.comm_systems import ALTERNATING, OUR_JOBS, UNWINDOWED, WARMUP_ROUNDS
from cdsgd_mx.worker.config import PUSH_WINDOW_ENV


def netns_problem(link):
    """None if the launcher can shape `link` here, else why not (the launcher's own check, then
    its shaping commands tried once)."""
    why = netns_unavailable()
    if why:
        return why
    script = netns_prelude(argparse.Namespace(bandwidth=link, latency=None))
    proc = subprocess.run(["unshare", "-n", "bash", "-c", script], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return "cannot create a shaped network namespace: %s" % (lines[-1] if lines else "exit %d" % proc.returncode)
    return None


def failure_reason(proc):
    """One line saying why a job failed: the last exception line, else the launcher's word."""
    lines = [l.strip() for l in (proc.stdout + "\n" + proc.stderr).splitlines() if l.strip()]
    for pattern in (r"\b\w*(Error|Exception|Interrupt)\b:", r"^launch \|", r"."):
        hits = [l for l in lines if re.search(pattern, l)]
        if hits:
            m = re.match(r"^(\w+(?: \d+)?) \| (.*)$", hits[-1])  # the launcher's "worker 1 | " prefix
            where, text = (m.group(1) + ", ", m.group(2)) if m else ("", hits[-1])
            return "%s (%sexit %d)" % (text[:300], where, proc.returncode)
    return "exit code %d" % proc.returncode


def split_link(label):
    """'1gbit' -> ('1gbit', 'shared'); '1gbit/hosts' -> ('1gbit', 'hosts')."""
    link, _, network = label.partition("/")
    return link, network or "shared"


def run_job(args, model, label, system):
    py = sys.executable
    link, network = split_link(label)
    cmd = [py, "-m", "cdsgd_mx.launch", "-n", str(args.workers), "-s", str(args.servers),
           "--timeout", str(args.timeout)]
    if network == "hosts":  # each server and worker on a host of its own
        cmd += ["--emulate-hosts", str(args.workers + args.servers)] + (["--nic", link] if link != "none" else [])
    elif link != "none":
        cmd += ["--bandwidth", link]
    if system.startswith("stock"):
        cmd.append("--stock-server")
    cmd += ["--", py, "-m", "cdsgd_mx.bench.comm", "--worker", "--system", system, "--models", model,
            "--rounds", str(args.rounds), "--grads", args.grads]
    if args.bucket_size:
        cmd += ["--bucket-size", str(args.bucket_size)]
    if args.trace and system in OUR_JOBS:
        cmd += ["--trace", os.path.abspath(args.trace), "--link", label.replace("/", "-")]
    env = dict(os.environ, MXNET_KVSTORE_BIGARRAY_BOUND="1000000", CDSGD_PROOF_STATS="1", **{stages.ENV: "1"})
    if system in UNWINDOWED:
        env[PUSH_WINDOW_ENV] = "0"
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    found = [json.loads(l.split("RESULT ", 1)[1]) for l in proc.stdout.splitlines() if "RESULT " in l]
    if proc.returncode != 0 or len(found) < args.workers:
        return {"error": failure_reason(proc)}
    worst = max(found, key=lambda r: r.get("ratio", r["ms"]))
    result = {"ms": worst["ms"], "workers": sorted(found, key=lambda r: r["rank"]),
              "bytes_per_round": worst["bytes_per_round"]}
    warmup = worst.get("warmup_rounds", WARMUP_ROUNDS)  # (more where the part choice's trials ran on: comm_worker)
    if worst.get("way"):  # how its fp32 rounds went (worker/part_choice.py), where its buckets have parts
        result["way"] = worst["way"]
        result["trials"] = worst.get("trials")  # (the same on every worker: their times are shared)
    if "ratio" in worst:  # paired: the worker with the larger ratio, and the mean over the workers
        result.update({k: v for k, v in worst.items() if k.endswith("_ms") or k in ("ratio", "rank")})
        result["mean_ratio"] = statistics.mean(r["ratio"] for r in found)
    if args.trace and system in OUR_JOBS:  # where the timed rounds went, worker by worker
        traces = [trace_path(args.trace, model, label.replace("/", "-"), system, r["rank"]) for r in result["workers"]]
        result["spans"] = [span_medians(path, warmup) for path in traces]
        result["pull_spread"] = pull_spread(traces, warmup)  # how far apart the workers' rounds end
    found_stages = stages.reports(proc.stdout)
    if found_stages:  # the busiest server's compressed rounds, stage by stage: ms per round of the job
        rounds = warmup + args.rounds * (2 if system in ALTERNATING else 1)
        busiest = max(found_stages, key=lambda st: sum(st["wall"].values()))
        result["server_stages"] = {name: {"ms": 1e3 * busiest["wall"][name] / rounds,
                                          "cpu_ms": 1e3 * busiest["cpu"][name] / rounds}
                                   for name in busiest["wall"]}
    proofs = [json.loads(l.split("PROOF_STATS ", 1)[1]) for l in proc.stdout.splitlines() if "PROOF_STATS " in l]
    if proofs:  # the servers' proof checks, per round of one bucket, measured in the job itself
        result["server_proof_us"] = 1e6 * sum(p["seconds"] for p in proofs) / sum(p["rounds"] for p in proofs)
        result["server_proof_cpu_us"] = 1e6 * sum(p["cpu_seconds"] for p in proofs) / sum(p["rounds"] for p in proofs)
    return result


def outcome(r):
    """A job's line of progress: its time (and the way its fp32 rounds took), or why it failed."""
    if "ms" not in r:
        return "failed: " + r["error"]
    if "way" not in r:
        return "%.1f ms" % r["ms"]
    trials = r.get("trials")
    tried = "" if not trials else "; trials: parts %.1f, whole %.1f ms%s" % (
        trials["ms"][0], trials["ms"][1], ", after a first look at %.1f and %.1f" % tuple(trials["first_look_ms"])
        if trials.get("first_look_ms") else "")
    return "%.1f ms (fp32 rounds in %s%s)" % (r["ms"], r["way"], tried)


def trace_path(folder, model, link, system, rank):
    return os.path.join(folder, "%s-%s-%s-rank%s.json" % (model, link, system, rank))


def span_medians(path, first_step):
    """{span name: median over steps >= first_step of its total ms in that step} from a worker's
    chrome trace (spans without a step are left out; "step" is the main thread's whole step)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    per_step, steps = {}, set()
    for e in events:
        step = e.get("args", {}).get("step")
        if e.get("ph") == "X" and step is not None and step >= first_step:
            by_step = per_step.setdefault(e["name"], {})
            by_step[step] = by_step.get(step, 0.0) + e["dur"] / 1e3
            steps.add(step)
    # a step without the span counts as 0 ms of it
    return {name: statistics.median([d.get(t, 0.0) for t in sorted(steps)]) for name, d in per_step.items()}


def pull_ends(path, first_step):
    """{step: when the worker's last pull of that step landed}, in seconds of the machine's
    monotonic clock (the trace's origin plus the span's end), steps >= first_step."""
    with open(path) as f:
        trace = json.load(f)
    origin = trace["otherData"]["perf_counter_origin_s"]
    ends = {}
    for e in trace["traceEvents"]:
        step = e.get("args", {}).get("step")
        if e.get("ph") == "X" and e["name"] == "pull" and step is not None and step >= first_step:
            ends[step] = max(ends.get(step, 0.0), origin + (e["ts"] + e["dur"]) / 1e6)
    return ends


def pull_spread(paths, first_step):
    """How far apart the workers' rounds end: per step, the last worker's pull landing minus the
    first's (ms), and how many times each worker (in the order of paths) was the last.
    {"median_ms", "max_ms", "steps", "last"}: a server that sends one worker's pulls whole
    before the next's shows here as a spread near a worker's share of the round, with the same
    workers last every round."""
    ends = [pull_ends(p, first_step) for p in paths]
    steps = sorted(set.intersection(*(set(e) for e in ends)))
    if not steps:
        return None
    spread = [1e3 * (max(e[t] for e in ends) - min(e[t] for e in ends)) for t in steps]
    last = [0] * len(ends)
    for t in steps:
        last[max(range(len(ends)), key=lambda w: ends[w][t])] += 1
    return {"median_ms": statistics.median(spread), "max_ms": max(spread), "steps": len(steps), "last": last}

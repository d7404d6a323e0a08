"""Where CD-SGD's step goes beyond its rounds, from a worker's trace.

    python -m cdsgd_mx.bench.cycle TRACE.json[.gz] [--json]

TRACE: a worker's chrome trace (bench.overlap --trace-dir DIR, or Trainer(trace=...)). For each
delayed step t (one that waited for W(t), the step before's round) followed by another, the
cycle is the time from round t's start to round t+1's start, and it is cut into:
  round      round t itself (its pushes to its last pull: the trace's 'pull' span);
  wake       round t's end to the end of step t+1's wait for it;
  local      the local update of step t+1 after that wait (x(t+1) from W(t): Algorithm 1);
  push       the local update's end to round t+1's start.
The paper's time model (eqs 2-7) counts max(tau, round) per step and the forward/backward
hidden behind the round; wake, local and push are on the path between rounds, so the steps
in sequence exceed the rounds alone by about their sum. Medians and means per kind of round
(2-bit, and fp32: CD-SGD's correction), in ms. The cut speaks where the round is longer than
the forward/backward (the step waits for the round); where compute is longer, 'wake' holds
the rest of the compute, whose own span (issuing MXNet's asynchronous ops) says little.

API: cycles(events) -> [dict]; summary(cycles) -> {kind: {part: (median, mean)}}.
"""
import argparse
import gzip
import json
import statistics
from collections import defaultdict

PARTS = ("cycle", "round", "wake", "local", "push")


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)["traceEvents"]


def cycles(events):
    """One dict per delayed step t followed by a delayed step t+1: PARTS in ms, and kind."""
    spans = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e.get("ph") == "X" and e.get("args", {}).get("step") is not None:
            spans[e["args"]["step"]][e["name"]].append((e["ts"] / 1e3, e["dur"] / 1e3))
    found = []
    for t in sorted(spans):
        now, nxt = spans[t], spans.get(t + 1)
        if not nxt or not all(n in s for s in (now, nxt) for n in ("wait W(t)", "local update", "pull")):
            continue
        (start, length), (nstart, _) = now["pull"][0], nxt["pull"][0]
        (w, wd), (lu, lud) = nxt["wait W(t)"][0], nxt["local update"][0]
        found.append({"step": t, "kind": "fp32" if now.get("push fp32") else "2-bit", "cycle": nstart - start,
                      "round": length, "wake": w + wd - (start + length), "local": lu + lud - (w + wd),
                      "push": nstart - (lu + lud)})
    return found


def summary(found):
    return {kind: {p: (statistics.median(v), statistics.mean(v)) for p in PARTS
                   for v in [[c[p] for c in found if c["kind"] == kind]]}
            for kind in sorted({c["kind"] for c in found})}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.cycle", description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="a worker's chrome trace (.json or .json.gz)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args(argv)
    try:
        found = cycles(load(args.trace))
    except (OSError, ValueError, KeyError) as e:
        ap.exit(2, "trace: cannot read %s (%s)\n" % (args.trace, e))
    if not found:
        ap.exit(2, "trace: %s has no two delayed steps in a row (a CD-SGD or OD-SGD worker's trace)\n" % args.trace)
    table = summary(found)
    if args.json:
        print(json.dumps({"steps": len(found), "ms": table}))
        return table
    print("%d cycles; ms, median (mean)" % len(found))
    print("%-6s " % "kind" + " ".join("%16s" % p for p in PARTS))
    for kind, parts in table.items():
        print("%-6s " % kind + " ".join("%16s" % ("%.1f (%.1f)" % parts[p]) for p in PARTS))
    return table


if __name__ == "__main__":
    main()

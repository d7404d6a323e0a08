"""bench.comm's report: the table of ms per round with the wire bounds and ratios, the notes
under it, the spans and server stages of the traced jobs, and the JSON file of every number."""
import json

from cdsgd_mx.cluster.shaping import rate_bits
from cdsgd_mx.bench.comm_jobs import split_link
from cdsgd_mx.bench.comm_systems import OURS, PER_CALL, ROUND_NAMES, SYSTEMS, UNWINDOWED

RATIOS = [("bitsgd", "stock_2bit"), ("ssgd", "stock_fp32"), ("bitsgd", "ssgd"), ("bitsgd_2bit", "bitsgd"),
          ("bitsgd_2bit", "stock_2bit")]


def bounds(info, label, workers, servers=1):
    """(fp32, 2-bit push with fp32 pull, 2 bits both ways) wire bounds in ms, or Nones."""
    link, network = split_link(label)
    if link == "none":
        return None, None, None
    values, rate = info["trained_values"], rate_bits(link) / 8  # bytes per second
    if network == "hosts":  # the busiest NIC (a server's, or a worker's), its busier direction
        return tuple(1e3 * max(workers / servers, 1) * max(push, pull) * values / rate
                     for push, pull in ((4, 4), (0.25, 4), (0.25, 0.25)))
    return tuple(1e3 * workers * per_value * values / rate for per_value in (8, 4.25, 0.5))


def print_table(args, infos, results):
    systems = [s for s in SYSTEMS if s in args.systems or s in ("stock_fp32", "stock_2bit", "bitsgd")]
    head = ["model", "arrays", "link"] + systems + ["fp32 bound", "2bit bound", "both bound"] + \
        ["%s/%s" % r for r in RATIOS if r[0] in systems and r[1] in systems]
    rows, notes = [], []
    for model in args.models:
        for link in args.bandwidth:
            res = results.get((model, link), {})
            if res.get("skipped"):
                rows.append([model, str(infos[model]["trained_arrays"]), link, "skipped: " + res["skipped"]])
                continue
            ms = {s: res[s].get("ms") for s in SYSTEMS if s in res}
            cells = [model, str(infos[model]["trained_arrays"]), link]
            for s in systems:
                r = res.get(s)
                cells.append("-" if r is None else ("%.1f" % r["ms"]) if "ms" in r else "failed: " + r["error"][:40])
                if r and "error" in r:
                    notes.append("%s %s %s failed: %s" % (model, link, s, r["error"]))
            cells += ["-" if b is None else "%.1f" % b for b in bounds(infos[model], link, args.workers, args.servers)]
            cells += ["%.2f" % (ms[a] / ms[b]) if ms.get(a) and ms.get(b) else "-" for a, b in RATIOS
                      if a in systems and b in systems]
            rows.append(cells)
            spread = ["%s %s" % (s, "/".join("%.1f" % ms for ms in res[s]["jobs_ms"])) for s in SYSTEMS
                      if s in res and res[s].get("jobs_ms")]
            if spread:
                notes.append("%s %s each job (the table: the median job): %s" % (model, link, ", ".join(spread)))
            sent = ["%s %.3f MB" % (s, res[s]["bytes_per_round"] / 1e6) for s in OURS
                    if s in res and res[s].get("bytes_per_round") is not None]
            if sent:
                notes.append("%s %s pushed per round per worker: %s" % (model, link, ", ".join(sent)))
            for system in PER_CALL:
                p, fused = res.get(system), res.get(system.replace("_percall", ""))
                if p and "ms" in p:
                    notes.append("%s %s %s (gluon.Trainer / Module's one pushpull per parameter): %.1f ms%s"
                                 % (model, link, system, p["ms"], ", %.2fx cdsgd_mx.Trainer's %.1f ms in its own job"
                                    % (p["ms"] / fused["ms"], fused["ms"]) if fused and "ms" in fused else ""))
                elif p and "error" in p:
                    notes.append("%s %s %s failed: %s" % (model, link, system, p["error"]))
            for system, windowed in UNWINDOWED.items():
                p, w = res.get(system), res.get(windowed)
                if p and "ms" in p:
                    spread = " (each job %s)" % "/".join("%.1f" % ms for ms in p["jobs_ms"]) if p.get("jobs_ms") else ""
                    notes.append("%s %s %s (no window of fp32 pushes in flight): %.1f ms%s%s"
                                 % (model, link, system, p["ms"], spread, ", %s / %s %.2f" % (
                                     windowed, system, w["ms"] / p["ms"]) if w and "ms" in w else ""))
                elif p and "error" in p:
                    notes.append("%s %s %s failed: %s" % (model, link, system, p["error"]))
            for system, (even, odd) in ROUND_NAMES.items():
                p = res.get(system)
                if p and "ratio" in p:
                    notes.append("%s %s %s in one job (%d rounds of each): %s %.1f ms, %s %.1f ms, %s/%s %.2f "
                                 "(worker rank %d; mean over the workers %.2f)"
                                 % (model, link, system, args.rounds, even, p["even_ms"], odd, p["odd_ms"], odd, even,
                                    p["ratio"], p["rank"], p["mean_ratio"]))
                elif p and "error" in p:
                    notes.append("%s %s %s failed: %s" % (model, link, system, p["error"]))
    full = [r for r in rows if len(r) == len(head)]
    widths = [max([len(h)] + [len(r[i]) for r in full]) for i, h in enumerate(head)]
    print("\nms per communication round, %d workers, %d server(s), %d timed rounds (cdsgd: mean per "
          "back-to-back step; others: median of waited rounds; max over workers; %s gradients)"
          % (args.workers, args.servers, args.rounds, args.grads))
    print(" | ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in rows:
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths)) if len(r) == len(head) else " | ".join(r))
    for n in notes:
        print("  " + n)


def print_per_job(results, key, heading, lines_of):
    """Under the table: a heading, then the lines lines_of(label, result) of every job whose
    result has `key` (nothing where none has)."""
    lines = ["  %s %s %s%s" % (model, link, system, line) for (model, link), res in results.items()
             for system, r in res.items() if isinstance(r, dict) and r.get(key) for line in lines_of(r)]
    if lines:
        print("\n" + heading)
        for line in lines:
            print(line)


def print_spans(args, results):
    """Under the table (--trace): each traced job's spans, median ms per round, per worker; how far
    apart its workers' rounds end; and the busiest server's stages."""
    print_per_job(results, "spans", "where the rounds went (--trace %s): median ms per round of each span, timed "
                  "rounds only" % args.trace,
                  lambda r: [" rank %d: %s" % (w["rank"], ", ".join(
                      "%s %.2f" % kv for kv in sorted(spans.items(), key=lambda kv: -kv[1])))
                      for w, spans in zip(r["workers"], r["spans"])])
    print_per_job(results, "pull_spread", "how far apart the workers' rounds end (the last worker's pull landing "
                  "minus the first's; median per round), and which worker was last",
                  lambda r: [": %.2f ms (at most %.2f) over %d rounds of %.1f ms; last, rounds per worker: %s" % (
                      r["pull_spread"]["median_ms"], r["pull_spread"]["max_ms"], r["pull_spread"]["steps"], r["ms"],
                      " ".join(str(n) for n in r["pull_spread"]["last"]))])
    print_per_job(results, "server_stages", "the busiest server's compressed rounds, stage by stage: ms per round "
                  "(wall, and its thread's CPU), mean over the job's rounds",
                  lambda r: [": " + ", ".join("%s %.2f (cpu %.2f)" % (name, st["ms"], st["cpu_ms"])
                                              for name, st in sorted(r["server_stages"].items(),
                                                                     key=lambda kv: -kv[1]["ms"]))])


def write_json(args, infos, results, made):
    """Every number of the run to --json's file: each model and link with its bounds and each
    system's result, and the leader's provenance."""
    out = {"workers": args.workers, "servers": args.servers, "rounds": args.rounds,
           "repeats": getattr(args, "repeats", 1), "grads": args.grads,
           "bucket_size": args.bucket_size, "models": infos, "runs": []}
    for (model, link), res in results.items():
        fp32, bit2, both = bounds(infos[model], link, args.workers, args.servers)
        out["runs"].append({"model": model, "link": split_link(link)[0], "network": split_link(link)[1],
                            "fp32_bound_ms": fp32, "2bit_bound_ms": bit2,
                            "both_bound_ms": both,
                            "systems": {s: r for s, r in res.items() if s != "skipped"},
                            "skipped": res.get("skipped")})
    out["provenance"] = made
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote %s" % args.json)

"""One result of the paper's evaluation end to end, as scripts/reproduce.py makes it: the
experiment's runs (training sweeps, or fig10's timed cases), then into one folder the raw logs,
the plots, the markdown table with the paper's numbers beside ours (printed too) and, with
several seeds, seeds.json with the verdict on each claim.
"""
import json
import os

from cdsgd_mx.experiments import plots, records, speed, tables, verdicts
from cdsgd_mx.experiments.figures import (ALGORITHMS, BOTH_WAYS, BOTH_WAYS_CLAIMS, BOTH_WAYS_RUNS, CURVE_RUNS,
                                          EXPERIMENTS, KSWEEP_RUNS, SPEED_BOTH_WAYS)
from cdsgd_mx.experiments.runs import ROOT, run_curves, say, seed_list


def reproduce(sweep, experiment, quick=False, out=None, iterations=None, data_dir=None, workers=None, seeds=None,
              pull_compression="none"):
    """EXPERIMENT (a key of EXPERIMENTS) with the command's options: workers a list of numbers
    of workers instead of the experiment's, seeds the number of seeds (None: the config's),
    out the results folder (None: results/EXPERIMENT[-quick][-both-ways])."""
    exp = dict(EXPERIMENTS[experiment])
    if workers:
        exp["workers"] = exp["quick_workers"] = workers
    name = "fig9" if experiment == "table2" else experiment
    names, curve_runs, both = ALGORITHMS, CURVE_RUNS, pull_compression == "2bit"
    if both and exp["kind"] in ("curves", "ksweep"):  # fig9 too: its ResNet-20 trains with momentum (issue 40)
        exp["kind"] = "curves"
        names, curve_runs, exp["claims"] = BOTH_WAYS, BOTH_WAYS_RUNS, BOTH_WAYS_CLAIMS
    out_dir = os.path.abspath(out or os.path.join("results", name + ("-quick" if quick else "") +
                                                  ("-both-ways" if both else "")))
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    if exp["kind"] == "speed":
        cfg = speed.load_speed_config(os.path.join(ROOT, exp["config"]), quick and exp["quick"],
                                      exp["workers"][0] if workers else None)
        cases = speed.run_speed(sweep, cfg, out_dir, iterations, SPEED_BOTH_WAYS if both else ALGORITHMS)
        with open(os.path.join(out_dir, "fig10.json"), "w") as f:
            json.dump(cases, f, indent=1)
        pngs = plots.plot_speed(cases, out_dir)
        md = tables.table_speed(exp, cases, quick, cfg["workers"])
    else:
        seeds = seed_list(exp, seeds)
        ksweep = exp["kind"] == "ksweep"
        results, data, note = run_curves(sweep, exp, quick, out_dir, iterations, data_dir,
                                         KSWEEP_RUNS if ksweep else curve_runs, seeds)
        pngs = plots.plot_ksweep(exp, results, out_dir) if ksweep else \
            plots.plot_curves(name, exp, results, out_dir, names)
        if seeds == (None,):
            md = tables.table_ksweep(sweep, exp, results, quick, data, note) if ksweep else \
                tables.table_curves(sweep, name, exp, results, quick, data, note, names)
        else:
            claims = verdicts.judge_claims(exp, results)
            md = tables.table_ksweep_seeds(sweep, exp, results, quick, data, note, claims) if ksweep else \
                tables.table_curves_seeds(sweep, name, exp, results, quick, data, note, names, claims)
            with open(os.path.join(out_dir, "seeds.json"), "w") as f:
                json.dump(records.seeds_record(sweep, name, quick, data, results, claims), f, indent=1)
    md += "\n" + "\n".join("![%s](%s)" % (os.path.basename(p), os.path.basename(p)) for p in pngs) + "\n"
    with open(os.path.join(out_dir, "%s.md" % name), "w") as f:
        f.write(md)
    print(md)
    say("results in %s" % out_dir)

"""scripts/reproduce.py end to end on the smallest experiment, and the library behind it
(cdsgd_mx.experiments: runs, speed, tables, verdicts, plots, records)."""
import os
import subprocess
import sys

import pytest

from cdsgd_mx.experiments import plots, runs, speed, tables, verdicts
from cdsgd_mx.experiments.figures import ALGORITHMS, CURVE_RUNS, EXPERIMENTS, SPEED_BOTH_WAYS
from cdsgd_mx.experiments.records import seeds_record
from cdsgd_mx.experiments.runs import Run, Sweep

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "reproduce.py")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jobcache  # noqa: E402


def fig6_quick():
    """`reproduce.py fig6 --quick --iterations 70` into a folder of its own, once per session
    (tests/jobcache.py): this file checks its table, plots and logs, test_golden.py the golden
    run it makes beside them. (its folder, its CompletedProcess)"""
    def run():
        import tempfile
        out = os.path.join(tempfile.mkdtemp(prefix="fig6-quick-"), "fig6")
        env = {k: v for k, v in os.environ.items() if k != "CDSGD_NUMERICS"}  # the config's numerics only
        # warm-up is 50 steps in the fig6 config: 70 iterations reach the compressed phase
        return out, subprocess.run([sys.executable, SCRIPT, "fig6", "--quick", "--iterations", "70", "--out", out],
                                   cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return jobcache.once(("fig6-quick",), run)


@pytest.mark.xdist_group("fig6-quick")  # shares its run with other tests (tests/jobcache.py)
@pytest.mark.slow
def test_fig6_quick_writes_logs_plots_and_table():
    """Slow: the quick sweep (shared with test_golden.py, which pays for it when it runs first)
    takes about 65 s on 2 cores."""
    out, proc = fig6_quick()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    table = open(os.path.join(out, "fig6.md")).read()
    rows = [l for l in table.splitlines() if l.startswith("| ") and "workers" not in l and "---" not in l]
    assert [r.split("|")[1].strip() for r in rows] == ["S-SGD", "BIT-SGD", "OD-SGD", "CD-SGD"]
    assert "99.14%" in table and "Data: MNIST" in table
    losses = {r.split("|")[1].strip(): float(r.split("|")[5]) for r in rows}
    assert losses["CD-SGD"] != losses["S-SGD"]  # the runs really differ after warm-up
    assert os.path.getsize(os.path.join(out, "fig6_2workers.png")) > 10000
    for alg in ("ssgd", "bitsgd", "odsgd", "cdsgd"):
        assert os.path.exists(os.path.join(out, "logs", "%s-2workers" % alg, "metrics-rank0.jsonl"))
    # --replot rebuilds the same table from the logs alone, without running
    os.remove(os.path.join(out, "fig6.md"))
    os.remove(os.path.join(out, "fig6_2workers.png"))
    proc = subprocess.run([sys.executable, SCRIPT, "fig6", "--quick", "--replot", "--out", out],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "workers ..." not in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert open(os.path.join(out, "fig6.md")).read() == table
    assert os.path.getsize(os.path.join(out, "fig6_2workers.png")) > 10000


def test_unknown_experiment_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, "fig99", "--out", str(tmp_path / "x")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "experiment must be one of fig6, fig7, fig8, fig9, fig10, table2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_replot_without_logs_says_so(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, "fig6", "--quick", "--replot", "--out", str(tmp_path / "none")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "no log at" in proc.stderr and "--replot needs the folder of an earlier run" in proc.stderr


def test_fig8_without_imagenet_says_what_it_needs(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, "fig8", "--out", str(tmp_path / "x"), "--data-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "needs ImageNet: data_dir must hold train.rec, train.idx, val.rec and val.idx" in proc.stderr


def test_fig10_case_speedups_and_model_by_hand():
    """tau = 100, phi = 80, psi + delta = 20, k = 5: eqs. 2-7 give S-SGD 180, BIT-SGD 120,
    OD-SGD max(100, 80) = 100 and CD-SGD max(tau, comm) = 100 in every iteration."""
    rows = [{"job": a, "compute_ms": 100.0, "iter_ms": ms, "params": 10}
            for a, ms in (("ssgd", 200.0), ("bitsgd", 150.0), ("odsgd", 120.0), ("cdsgd", 100.0))]
    rows.append({"phi_ms": 80.0, "psi_plus_delta_ms": 20.0, "cdsgd_comm_ms": 32.0})
    case = speed.summarize_case("alexnet", 32, "1gbit", rows, 5)
    assert case["predicted_ms"] == {"ssgd": 180.0, "bitsgd": 120.0, "odsgd": 100.0, "cdsgd": 100.0}
    assert case["speedup_over_bitsgd"] == {"ssgd": 150 / 200 - 1, "odsgd": 150 / 120 - 1, "cdsgd": 0.5}
    table = tables.table_speed(EXPERIMENTS["fig10"], [case], False, 4)
    assert "| alexnet | 32 | 1gbit | -25% | +25% | +50% | 150.0 |" in table
    assert "| alexnet | 32 | 1gbit | 100 | 80 | 20 | 200 / 180 | 150 / 120 | 120 / 100 | 100 / 100 |" in table


def test_fig10_interleaved_case_gives_speedups_cycle_by_cycle():
    cycles = {"ssgd": [200.0, 220.0], "bitsgd": [150.0, 150.0], "odsgd": [120.0, 100.0], "cdsgd": [100.0, 120.0]}
    rows = [{"job": a, "compute_ms": 100.0, "iter_ms": sum(c) / 2, "params": 10, "cycle_iter_ms": c}
            for a, c in cycles.items()]
    rows.append({"phi_ms": 80.0, "psi_plus_delta_ms": 20.0, "cdsgd_comm_ms": 32.0})
    case = speed.summarize_case("alexnet", 32, "1gbit", rows, 5)
    assert case["timing"] == "interleaved"
    assert case["per_cycle_speedup_over_bitsgd"]["cdsgd"] == [0.5, 150 / 120 - 1]
    table = tables.table_speed(EXPERIMENTS["fig10"], [case], True, 2)
    # over S-SGD: 200/100 - 1 and 220/120 - 1
    assert "| alexnet | 32 | 1gbit | +50%, +25% | +100%, +83% |" in table
    plain = [{k: v for k, v in r.items() if k != "cycle_iter_ms"} for r in rows]
    separate = speed.summarize_case("alexnet", 32, "1gbit", plain, 5)
    assert separate["timing"] == "separate" and "Cycle by cycle" not in tables.table_speed(
        EXPERIMENTS["fig10"], [separate], True, 2)


def test_fig10_both_ways_cases_compare_cdsgd_with_and_without_cycle_by_cycle():
    cycles = {"ssgd": [200.0, 220.0], "bitsgd": [150.0, 150.0], "odsgd": [120.0, 100.0], "cdsgd": [100.0, 120.0],
              "bitsgd_2bit": [60.0, 75.0], "cdsgd_2bit": [80.0, 100.0]}
    rows = [{"job": a, "compute_ms": 100.0 if a in ALGORITHMS else 999.0, "iter_ms": sum(c) / 2, "params": 10,
             "cycle_iter_ms": c} for a, c in cycles.items()]
    rows.append({"phi_ms": 80.0, "psi_plus_delta_ms": 20.0, "cdsgd_comm_ms": 32.0})
    case = speed.summarize_case("alexnet", 32, "1gbit", rows, 5, SPEED_BOTH_WAYS)
    assert case["tau_ms"] == 100.0  # tau from the four algorithms' jobs, as without
    assert case["predicted_ms"]["cdsgd"] == 100.0 and "cdsgd_2bit" not in case["predicted_ms"]
    assert case["speedup_over_bitsgd"]["cdsgd_2bit"] == 150 / 90 - 1
    table = tables.table_speed(EXPERIMENTS["fig10"], [case], True, 2)
    # CD-SGD 110 ms, both ways 90 ms: +22%; per cycle 100/80 - 1 and 120/100 - 1
    assert "| alexnet | 32 | 1gbit | 150.0 | 67.5 | 110.0 | 90.0 | +22% | +25%, +20% |" in table
    one_way = speed.summarize_case("alexnet", 32, "1gbit", rows, 5)
    assert "cdsgd_2bit" not in one_way["measured_ms"] and "both ways" not in tables.table_speed(
        EXPERIMENTS["fig10"], [one_way], True, 2)


def test_fig10_both_ways_needs_interleaved_timing(tmp_path):
    cfg = {"timing": "separate"}
    with pytest.raises(SystemExit, match="interleaved only"):
        speed.run_speed(Sweep(), cfg, str(tmp_path), None, SPEED_BOTH_WAYS)


def test_table2_epoch_time_is_the_mean_per_epoch():
    iters = [{"epoch": 0, "iter_ms": 500.0}, {"epoch": 0, "iter_ms": 700.0}, {"epoch": 1, "iter_ms": 800.0}]
    assert runs.epoch_seconds(iters) == pytest.approx(1.0)  # (1.2 s + 0.8 s) / 2 epochs


@pytest.mark.parametrize("line,message", [
    ("bandwidth: 1gbit", "unknown fields bandwidth"),
    ("batches: [32, 0]", "batches must be a list of integers >= 1, got [32, 0]"),
    ("models: [resnet18]", "models must be a list of models among lenet5"),
    ("bandwidths: [fast]", "bandwidths must be a list of tc rates such as 1gbit"),
    ("threshold: -1", "threshold must be a number > 0"),
    ("warmup: -2", "warmup must be an integer >= 0"),
    ("timing: paired", "timing must be one of interleaved, separate, got 'paired'"),
])
def test_fig10_config_errors_name_the_field(tmp_path, line, message):
    import yaml
    cfg = yaml.safe_load(open(os.path.join(ROOT, "configs", "fig10_speedup.yaml")))
    field, value = line.split(": ", 1)
    cfg[field] = yaml.safe_load(value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(SystemExit) as e:
        speed.load_speed_config(str(path), None)
    assert message in str(e.value)
    del cfg[field if field != "bandwidth" else "models"]
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(SystemExit, match="missing fields|unknown fields"):
        speed.load_speed_config(str(path), None)


# ---- several seeds (issue 28) ---------------------------------------------------------------------

def fake_run(seed, accs, loss=0.5, iterations=4):
    """A run's logs: `iterations` steps of one epoch each, one evaluation per epoch (accs)."""
    per_epoch = iterations // len(accs)
    iters = [{"iteration": i, "epoch": i // per_epoch, "loss": loss, "iter_ms": 10.0} for i in range(iterations)]
    return Run(seed, iters, [{"epoch": e, "test_accuracy": a} for e, a in enumerate(accs)])


def fake_results(accs, workers=2, epochs=1):
    """{(name, workers): [Run per seed]} from {name: [final accuracy per seed]}."""
    return {(n, workers): [fake_run(s, [a - 0.01 * (epochs - 1 - e) for e in range(epochs)], iterations=4 * epochs)
                           for s, a in enumerate(v)] for n, v in accs.items()}


FIG6_ACCS = {"ssgd": [0.9900, 0.9910, 0.9920], "bitsgd": [0.9950, 0.9960, 0.9990],
             "odsgd": [0.9850, 0.9900, 0.9800], "cdsgd": [0.9905, 0.9913, 0.9921]}


def test_claims_get_the_three_verdicts_from_paired_seeds():
    claims = {r["claim"].split(":")[0]: r for r in verdicts.judge_claims(EXPERIMENTS["fig6"], fake_results(FIG6_ACCS))}
    keep = claims["CD-SGD keeps S-SGD's accuracy (99.14% against 99.15%)"]
    # CD - S per seed: 0.05, 0.03, 0.01 pp: mean 0.03 pp, std 0.02 pp, half-width 4.302653 * 0.02 / sqrt(3) pp
    (d,) = keep["differences"]
    assert d["b"] == "ssgd" and d["n"] == 3 and d["mean"] == pytest.approx(0.0003)
    assert d["low"] == pytest.approx(0.0003 - 4.302653 * 0.0002 / 3 ** 0.5, abs=1e-8)
    assert keep["verdict"] == "holds"  # the whole interval lies above -0.1 pp
    assert claims["CD-SGD beats BIT-SGD (99.14% against below 99%)"]["verdict"] == "does not hold"
    # against a level: 99% - BIT-SGD is -0.50, -0.60, -0.90 pp, all below 0
    below = claims["BIT-SGD stays below 99%"]
    assert below["verdict"] == "does not hold" and below["differences"][0]["mean"] == pytest.approx(-0.02 / 3)
    # OD - S: -0.5, -0.1, -1.2 pp: the interval (about -1.98 to +0.78 pp) straddles -0.1 pp
    assert claims["OD-SGD keeps S-SGD's accuracy (99.12% against 99.15%)"]["verdict"] == "cannot tell at this n"
    lines = verdicts.claims_lines(list(claims.values()), quick=True)
    assert any(l.startswith("| CD-SGD keeps S-SGD's accuracy") and "| 2 | +0.03 [-0.02, +0.08] | 3 | **holds** |" in l
               for l in lines)
    # one seed: no interval, so no verdict either way
    one = verdicts.judge_claims(EXPERIMENTS["fig6"], fake_results({n: v[:1] for n, v in FIG6_ACCS.items()}))
    assert {r["verdict"] for r in one} == {"cannot tell at this n"}
    # fig8 --quick on synthetic data evaluates nothing: no verdict, and the table says so
    blind = {(n, 2): [Run(s, run.iters, [{"epoch": 0, "test_accuracy": None}]) for s, run in enumerate(runs)]
             for (n, _), runs in fake_results(FIG6_ACCS).items()}
    rows = verdicts.judge_claims(EXPERIMENTS["fig8"], blind)
    assert [r["verdict"] for r in rows] == ["no test accuracy in these runs"] * 2
    assert "| CD-SGD | 2 | - | 0 | - | - |" in tables.table_curves_seeds(Sweep(), "fig8", EXPERIMENTS["fig8"], blind,
                                                                           True, "synthetic", "", ALGORITHMS, rows)


def test_best_k_holds_only_against_every_other_k():
    accs = {"ssgd": [0.70, 0.71, 0.72], "bitsgd": [0.60, 0.61, 0.62], "k2": [0.80, 0.81, 0.83],
            "k5": [0.70, 0.70, 0.71], "k10": [0.65, 0.66, 0.64], "k20": [0.605, 0.612, 0.621]}
    rows = {r["claim"].split(":")[0]: r for r in verdicts.judge_claims(EXPERIMENTS["fig9"], fake_results(accs))}
    best = rows["k = 2 is the best k"]
    assert best["verdict"] == "holds" and [d["b"] for d in best["differences"]] == ["k5", "k10", "k20"]
    assert rows["k = 20 is about BIT-SGD (89.68% against 88.81%)"]["verdict"] == "holds"  # within 1 pp
    assert rows["k = 5 is close to S-SGD"]["verdict"] == "cannot tell at this n"  # 0, -1, -1 pp: past -1 pp
    accs["k10"] = [0.85, 0.86, 0.87]  # k = 10 beats k = 2 in every seed
    rows = {r["claim"].split(":")[0]: r for r in verdicts.judge_claims(EXPERIMENTS["fig9"], fake_results(accs))}
    assert rows["k = 2 is the best k"]["verdict"] == "does not hold"


def test_seed_tables_give_mean_std_n_and_each_seed():
    exp = EXPERIMENTS["fig6"]
    results = fake_results(FIG6_ACCS)
    table = tables.table_curves_seeds(Sweep(), "fig6", exp, results, True, "MNIST", "", ALGORITHMS,
                                      verdicts.judge_claims(exp, results))
    # CD-SGD: 99.05, 99.13, 99.21: mean 99.13, std 0.08
    assert "| CD-SGD | 2 | 99.13 ± 0.08 | 3 | 99.05 - 99.21 | 99.14% | 0.5000 | 10.0 |" in table
    assert "| CD-SGD | 2 | 99.05 | 99.13 | 99.21 |" in table  # per seed
    assert "95% interval from Student's t" in table and "**does not hold**" in table
    accs = {"ssgd": [0.70, 0.72], "bitsgd": [0.60, 0.62], "k2": [0.80, 0.81], "k5": [0.70, 0.70],
            "k10": [0.65, 0.66], "k20": [0.61, 0.62]}
    results = fake_results(accs, epochs=2)
    table = tables.table_ksweep_seeds(Sweep(), EXPERIMENTS["fig9"], results, True, "Fashion-MNIST", "",
                                      verdicts.judge_claims(EXPERIMENTS["fig9"], results))
    assert "| 2 | 71.00 ± 1.41 (2) | 61.00 ± 1.41 (2) | 80.50 ± 0.71 (2) |" in table
    # each epoch: 4 steps of 10 ms; the paper's 2-worker seconds beside
    assert "| 2 | 0.04 ± 0.00 (4.32) | 0.04 ± 0.00 (3.61) |" in table


def test_band_plot_has_a_band_per_algorithm(tmp_path, monkeypatch):
    figures = []
    save = plots.save_figure

    def keep(plt, fig, out_dir, name):
        figures.append(fig)
        return save(plt, fig, out_dir, name)
    monkeypatch.setattr(plots, "save_figure", keep)
    (path,) = plots.plot_curves("fig6", EXPERIMENTS["fig6"], fake_results(FIG6_ACCS, epochs=3), str(tmp_path),
                                ALGORITHMS)
    assert os.path.getsize(path) > 10000
    loss, acc = figures[0].axes
    assert len(loss.collections) == len(acc.collections) == 4  # fill_between: one band per algorithm
    assert loss.get_legend_handles_labels()[1] == ["S-SGD (n=3)", "BIT-SGD (n=3)", "OD-SGD (n=3)", "CD-SGD (n=3)"]
    assert "mean of 3 seeds, band: min to max" in loss.get_title()
    (path,) = plots.plot_ksweep(EXPERIMENTS["fig9"], fake_results({"k2": [0.8, 0.9], "ssgd": [0.7, 0.8]}, epochs=2),
                                str(tmp_path))
    assert os.path.getsize(path) > 10000 and len(figures[1].axes[0].collections) == 2


def fake_train(ran, commands=None):
    """subprocess.run in place of scripts/train.py: writes a run's logs (test accuracy 0.5 +
    seed / 100) and notes the run's folder in `ran` (and its command in `commands`). Other
    commands (git, for the runs' provenance) run as they are."""
    real = subprocess.run

    def train(cmd, **kwargs):
        if not any(str(a).endswith("train.py") for a in cmd):
            return real(cmd, **kwargs)
        out = next(a[4:] for a in cmd if a.startswith("out="))
        seed = int(next(a[5:] for a in cmd if a.startswith("seed=")))
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "metrics-rank0.jsonl"), "w") as f:
            f.write('{"iteration": 0, "epoch": 0, "loss": 1.0, "iter_ms": 5.0}\n')
            f.write('{"epoch": 0, "test_accuracy": %s}\n' % (0.5 + seed / 100))
        with open(os.path.join(out, "config.json"), "w") as f:
            f.write('{"data": "MNIST"}')
        ran.append(os.path.basename(out))
        if commands is not None:
            commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return train


def test_a_stopped_sweep_resumes_with_the_finished_runs(tmp_path, monkeypatch):
    """Finished runs (with the same settings) are read back, not run again; a run without its
    finished mark, or with other settings, runs again; --rerun runs everything."""
    ran = []
    monkeypatch.setattr(subprocess, "run", fake_train(ran))
    state = Sweep(numerics="native")  # no golden run beside (test_portable_sweep_... below)
    out = str(tmp_path / "sweep")

    def sweep(iterations=None):
        del ran[:]
        results, data, _ = runs.run_curves(state, dict(EXPERIMENTS["fig6"]), True, out, iterations, None, CURVE_RUNS,
                                           (0, 1))
        return results
    first = sweep()
    assert sorted(ran) == sorted("%s-2workers-seed%d" % (a, s) for a in ALGORITHMS for s in (0, 1))
    assert [r.epochs[-1]["test_accuracy"] for r in first[("cdsgd", 2)]] == [0.5, 0.51]
    assert sweep() == first and ran == []
    os.remove(os.path.join(out, "logs", "odsgd-2workers-seed1", runs.DONE))  # stopped before it finished
    assert sweep() == first and ran == ["odsgd-2workers-seed1"]
    sweep(iterations=70)  # other settings: every run again
    assert len(ran) == 8
    state.rerun = True
    sweep(iterations=70)
    assert len(ran) == 8


def test_fig8_quick_without_imagenet_runs_on_synthetic_data_with_seeds(tmp_path, monkeypatch):
    """The synthetic fallback needs the quick overrides (no epochs) before the data check."""
    commands = []
    monkeypatch.setattr(subprocess, "run", fake_train([], commands))
    results, _, note = runs.run_curves(Sweep(numerics="native"), dict(EXPERIMENTS["fig8"]), True,
                                       str(tmp_path / "fig8"), None, str(tmp_path), CURVE_RUNS, (0, 1))
    assert len(commands) == 8 and all("dataset=synthetic" in c and "epochs=null" in c for c in commands)
    assert "synthetic" in note and sorted(len(r) for r in results.values()) == [2, 2, 2, 2]


def test_a_seed_that_diverges_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    ran = []
    train = fake_train(ran)

    def diverging(cmd, **kwargs):
        if "algorithm=cdsgd" in cmd and "seed=1" in cmd:
            ran.append("diverged")
            return subprocess.CompletedProcess(cmd, 1, "worker 1 | FloatingPointError: non-finite gradient in "
                                                       "parameter conv0_weight at step 5864 (6 values)\n", "")
        return train(cmd, **kwargs)
    monkeypatch.setattr(subprocess, "run", diverging)
    state = Sweep(numerics="native")
    out = str(tmp_path / "sweep")
    exp = dict(EXPERIMENTS["fig6"])
    results, _, _ = runs.run_curves(state, exp, True, out, None, None, CURVE_RUNS, (0, 1, 2))
    assert len(ran) == 12 and [r.seed for r in results[("cdsgd", 2)]] == [0, 2]
    why = "FloatingPointError: non-finite gradient in parameter conv0_weight at step 5864 (6 values)"
    assert state.failed == {("cdsgd", 2, 1): why}
    lines = verdicts.per_seed_lines(results, ALGORITHMS, state.failed)
    assert "| CD-SGD | 2 | 50.00 | failed | 52.00 |" in lines and "- CD-SGD, 2 workers, seed 1: " + why in lines
    # 1 of 3 failed: 33.3%, exact 95% interval 0.8% - 90.6%; 0 of 3: up to 70.8% (1 - 0.025^(1/3))
    assert "- CD-SGD, 2 workers: 1 of 3 seeds, 33.3% [0.8%, 90.6%]" in lines
    assert "- S-SGD, 2 workers: 0 of 3 seeds, 0.0% [0.0%, 70.8%]" in lines
    rates = seeds_record(state, "fig6", True, "MNIST", results, [])["failure_rates"]
    assert {(r["run"], r["failed"], r["n"]) for r in rates} == {("ssgd", 0, 3), ("bitsgd", 0, 3), ("odsgd", 0, 3),
                                                                ("cdsgd", 1, 3)}
    (keep,) = [r for r in verdicts.judge_claims(exp, results) if r["claim"].startswith("CD-SGD keeps S-SGD's")]
    assert keep["differences"][0]["n"] == 2  # the seeds where both finished
    (failed,) = seeds_record(state, "fig6", True, "MNIST", results, [])["failed"]
    how = failed.pop("provenance")  # how to run it again: the code and the exact command
    assert failed == {"run": "cdsgd", "workers": 2, "seed": 1, "why": why}
    assert how["code"] == state.this_code() and how["command"][:2] == ["python", "scripts/train.py"]
    assert "seed=1" in how["command"] and "algorithm=cdsgd" in how["command"]
    # resumed: the failure is read back, not run again
    del ran[:]
    state.failed = {}
    runs.run_curves(state, exp, True, out, None, None, CURVE_RUNS, (0, 1, 2))
    assert ran == [] and state.failed == {("cdsgd", 2, 1): why}


@pytest.mark.parametrize("args,message", [
    (["fig6", "--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
    (["fig10", "--seeds", "3"], "--seeds applies to the accuracy experiments (fig6, fig7, fig8, fig9, table2), "
                                "not fig10"),
])
def test_bad_seeds_are_one_line(tmp_path, args, message):
    proc = subprocess.run([sys.executable, SCRIPT] + args + ["--out", str(tmp_path / "x")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_seeds_come_from_the_option_else_the_config(tmp_path):
    config = tmp_path / "fig6.yaml"
    base = open(os.path.join(ROOT, "configs", "fig6_lenet_mnist.yaml")).read()
    config.write_text(base.replace("seed: 0", "seed: 10\nseeds: 3"))
    exp = dict(EXPERIMENTS["fig6"], config=str(config))  # an absolute path stays itself under ROOT
    assert runs.seed_list(exp, None) == (10, 11, 12)
    assert runs.seed_list(exp, 2) == (10, 11)
    assert runs.seed_list(EXPERIMENTS["fig6"], None) == (None,)  # no seeds: one run, folders as before
    assert runs.seed_list(EXPERIMENTS["fig6"], 1) == (0,)
    config.write_text(base.replace("seed: 0", "seeds: 0"))
    with pytest.raises(SystemExit, match="seeds must be an integer >= 1, got 0"):
        runs.seed_list(exp, None)


def test_table2_names_the_network_its_runs_had(tmp_path):
    """Table 2's network line comes from each run's config.json (issue 48): emulated hosts with
    their NIC, the shared loopback shaped or not (and runs made before the field: shared)."""
    import json

    def run_in(name, **config):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(dict({"workers": 2, "servers": 1}, **config)))
        return Run(0, [], [], str(folder))

    hosts = {("ssgd", 2): [run_in("a", network="hosts", bandwidth="1gbit")]}
    assert tables.train_network(hosts) == \
        "Network: 3 emulated hosts (2 workers + 1 servers), a 1gbit NIC each way per host."
    older = {("ssgd", 2): [run_in("b", bandwidth=None)], ("bitsgd", 2): [run_in("c", network="shared",
                                                                                 bandwidth="100mbit")]}
    assert tables.train_network(older) == "Network: every node on one loopback shaped to 100mbit, shared by all " \
                                      "nodes and both directions; every node on one loopback, unshaped."
    assert tables.train_network({("ssgd", 2): [Run(0, [], [], None)]}) == "Network: unknown (no config.json)."

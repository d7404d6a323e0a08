"""scripts/reproduce.py end to end on the smallest experiment."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "reproduce.py")


@pytest.mark.slow
def test_fig6_quick_writes_logs_plots_and_table(tmp_path):
    out = str(tmp_path / "fig6")
    # warm-up is 50 steps in the fig6 config: 70 iterations reach the compressed phase
    proc = subprocess.run([sys.executable, SCRIPT, "fig6", "--quick", "--iterations", "70", "--out", out],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
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


def _reproduce_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("reproduce", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fig10_case_speedups_and_model_by_hand():
    """tau = 100, phi = 80, psi + delta = 20, k = 5: eqs. 2-7 give S-SGD 180, BIT-SGD 120,
    OD-SGD max(100, 80) = 100 and CD-SGD max(tau, comm) = 100 in every iteration."""
    rp = _reproduce_module()
    rows = [{"job": a, "compute_ms": 100.0, "iter_ms": ms, "params": 10}
            for a, ms in (("ssgd", 200.0), ("bitsgd", 150.0), ("odsgd", 120.0), ("cdsgd", 100.0))]
    rows.append({"phi_ms": 80.0, "psi_plus_delta_ms": 20.0, "cdsgd_comm_ms": 32.0})
    case = rp.summarize_case("alexnet", 32, "1gbit", rows, 5)
    assert case["predicted_ms"] == {"ssgd": 180.0, "bitsgd": 120.0, "odsgd": 100.0, "cdsgd": 100.0}
    assert case["speedup_over_bitsgd"] == {"ssgd": 150 / 200 - 1, "odsgd": 150 / 120 - 1, "cdsgd": 0.5}
    table = rp.table_speed(rp.EXPERIMENTS["fig10"], [case], False, 4)
    assert "| alexnet | 32 | 1gbit | -25% | +25% | +50% | 150.0 |" in table
    assert "| alexnet | 32 | 1gbit | 100 | 80 | 20 | 200 / 180 | 150 / 120 | 120 / 100 | 100 / 100 |" in table


def test_fig10_interleaved_case_gives_speedups_cycle_by_cycle():
    rp = _reproduce_module()
    cycles = {"ssgd": [200.0, 220.0], "bitsgd": [150.0, 150.0], "odsgd": [120.0, 100.0], "cdsgd": [100.0, 120.0]}
    rows = [{"job": a, "compute_ms": 100.0, "iter_ms": sum(c) / 2, "params": 10, "cycle_iter_ms": c}
            for a, c in cycles.items()]
    rows.append({"phi_ms": 80.0, "psi_plus_delta_ms": 20.0, "cdsgd_comm_ms": 32.0})
    case = rp.summarize_case("alexnet", 32, "1gbit", rows, 5)
    assert case["timing"] == "interleaved"
    assert case["per_cycle_speedup_over_bitsgd"]["cdsgd"] == [0.5, 150 / 120 - 1]
    table = rp.table_speed(rp.EXPERIMENTS["fig10"], [case], True, 2)
    # over S-SGD: 200/100 - 1 and 220/120 - 1
    assert "| alexnet | 32 | 1gbit | +50%, +25% | +100%, +83% |" in table
    plain = [{k: v for k, v in r.items() if k != "cycle_iter_ms"} for r in rows]
    separate = rp.summarize_case("alexnet", 32, "1gbit", plain, 5)
    assert separate["timing"] == "separate" and "Cycle by cycle" not in rp.table_speed(
        rp.EXPERIMENTS["fig10"], [separate], True, 2)


def test_table2_epoch_time_is_the_mean_per_epoch():
    rp = _reproduce_module()
    iters = [{"epoch": 0, "iter_ms": 500.0}, {"epoch": 0, "iter_ms": 700.0}, {"epoch": 1, "iter_ms": 800.0}]
    assert rp.epoch_seconds(iters) == pytest.approx(1.0)  # (1.2 s + 0.8 s) / 2 epochs


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
    rp = _reproduce_module()
    cfg = yaml.safe_load(open(os.path.join(ROOT, "configs", "fig10_speedup.yaml")))
    field, value = line.split(": ", 1)
    cfg[field] = yaml.safe_load(value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(SystemExit) as e:
        rp.load_speed_config(str(path), None)
    assert message in str(e.value)
    del cfg[field if field != "bandwidth" else "models"]
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(SystemExit, match="missing fields|unknown fields"):
        rp.load_speed_config(str(path), None)

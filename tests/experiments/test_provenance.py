"""Results anyone can re-derive (issue 45): provenance in every run, sweeps that never mix code
versions silently, `reproduce.py verify`, and progress lines off a terminal."""
import io
import json
import os
import subprocess
import sys

import pytest

from cdsgd_mx.experiments import provenance, runs, verify
from cdsgd_mx.experiments.figures import ALGORITHMS, CURVE_RUNS, EXPERIMENTS
from cdsgd_mx.experiments.progress import Progress
from cdsgd_mx.experiments.records import run_record
from cdsgd_mx.experiments.runs import Run, Sweep
from cdsgd_mx.experiments.speed import summarize_case
from cdsgd_mx.experiments.tables import provenance_lines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "reproduce.py")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reproduce import fake_train  # noqa: E402


def test_a_record_says_commit_command_numerics_cpu_and_versions():
    rec = provenance.record([sys.executable, os.path.join(ROOT, "scripts", "train.py"), "--config",
                             os.path.join(ROOT, "configs", "x.yaml"), "k=2", "out=" + os.path.join(ROOT, "results", "a"),
                             "data_dir=/elsewhere"])
    assert rec["command"] == ["python", "scripts/train.py", "--config", "configs/x.yaml", "k=2", "out=results/a",
                              "data_dir=/elsewhere"]  # from the repository's root: the same in another clone
    assert rec["command_line"] == "python scripts/train.py --config configs/x.yaml k=2 out=results/a data_dir=/elsewhere"
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    if git.returncode == 0:  # a checkout (CI's clone is one)
        assert rec["commit"] == git.stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True,
                                    text=True).stdout.strip())
        assert rec["dirty"] == dirty and ("changes_sha256" in rec) == rec["code_changed"]
        assert rec["code_changed"] == any(p.endswith(provenance.CODE_SUFFIXES) for p in rec["changes"])
    assert rec["numerics"]["mode"] in ("native", "portable") and "DNNL_MAX_CPU_ISA" in rec["numerics"]["env"]
    assert rec["cpu"]["cores"] == os.cpu_count() and "sse4_2" in rec["cpu"]["isa_flags"]
    libs = rec["libraries"]
    assert libs["mxnet"] == "1.9.1" and "MKLDNN" in libs["mxnet_features"] and libs["numpy"].startswith("1.")
    json.dumps(rec)  # JSON-ready


def test_code_ids_tell_commits_and_changes_apart():
    assert provenance.code_id({"commit": "a" * 40, "dirty": False}) == "a" * 40
    assert provenance.code_id({"commit": "a" * 40, "dirty": True, "changes_sha256": "b" * 64}) == \
        "a" * 40 + "+changes:" + "b" * 12
    assert provenance.code_id({"commit": None}) is None and provenance.code_id(None) is None
    # results or docs written beside the code change nothing that runs
    assert provenance.code_id({"commit": "a" * 40, "dirty": True, "code_changed": False}) == "a" * 40


def sweep(state, out, seeds=(0, 1)):
    return runs.run_curves(state, dict(EXPERIMENTS["fig6"]), True, out, None, None, CURVE_RUNS, seeds)[0]


def test_a_sweep_never_mixes_code_versions_silently(tmp_path, monkeypatch):
    """Finished runs of another commit (or changed tree) stop the resumed sweep, naming both;
    --rerun runs them again; --allow-mixed takes them and the table says which came from which."""
    ran = []
    monkeypatch.setattr(subprocess, "run", fake_train(ran))
    out = str(tmp_path / "sweep")
    old = {"commit": "1" * 40, "dirty": False, "changes": []}
    state = Sweep(numerics="native", code=old)
    sweep(state, out)
    assert len(ran) == 8 and state.code_versions() == {"1" * 40: 8}
    assert "Code: every run at %s." % ("1" * 40) in "\n".join(provenance_lines(state))
    marker = json.load(open(os.path.join(out, "logs", "cdsgd-2workers-seed1", runs.DONE)))
    assert marker["code"] == old and marker["command"][:2] == ["python", "scripts/train.py"]
    new = {"commit": "2" * 40, "dirty": True, "changes": ["x.py"], "changes_sha256": "3" * 64}
    state.code = new
    state.code_of.clear()
    del ran[:]
    with pytest.raises(SystemExit, match="S-SGD, 2 workers, seed 0 .* was made by code 1{40}, and this checkout is "
                                         "2{40}\\+changes:3{12}: a sweep must not mix code versions"):
        sweep(state, out)
    assert ran == []
    os.remove(os.path.join(out, "logs", "odsgd-2workers-seed1", runs.DONE))  # this one runs again, at the new code
    state.allow_mixed = True
    state.code_of.clear()
    sweep(state, out)
    assert ran == ["odsgd-2workers-seed1"]
    assert state.code_versions() == {"1" * 40: 7, "2" * 40 + "+changes:" + "3" * 12: 1}
    text = "\n".join(provenance_lines(state))
    assert "Mixed code versions (--allow-mixed)" in text and "7 runs at " + "1" * 40 in text
    state.allow_mixed = False
    state.rerun = True
    state.code_of.clear()
    del ran[:]
    sweep(state, out)
    assert len(ran) == 8 and state.code_versions() == {"2" * 40 + "+changes:" + "3" * 12: 8}


def test_a_sweep_stops_when_the_code_changes_while_it_runs(tmp_path, monkeypatch):
    """Each run's code is what it loaded (its config.json's provenance): an edit or a commit
    landing mid-sweep stops it at the first run made by other code, that run kept and marked."""
    ran = []
    train = fake_train(ran)

    def edited_after_two_runs(cmd, **kwargs):
        proc = train(cmd, **kwargs)
        out = next((a[4:] for a in cmd if str(a).startswith("out=")), None)
        if out and len(ran) >= 3:
            with open(os.path.join(out, "config.json"), "w") as f:
                json.dump({"data": "MNIST", "provenance": {"commit": "1" * 40, "dirty": True, "code_changed": True,
                                                           "changes_sha256": "4" * 64}}, f)
        return proc
    monkeypatch.setattr(subprocess, "run", edited_after_two_runs)
    state = Sweep(numerics="native", code={"commit": "1" * 40, "dirty": False, "code_changed": False})
    out = str(tmp_path / "sweep")
    with pytest.raises(SystemExit, match="the code changed while the sweep ran: OD-SGD, 2 workers, seed 0 .* was made "
                                         "by 1{40}\\+changes:4{12}, and the sweep began at 1{40}"):
        sweep(state, out)
    assert len(ran) == 3
    marker = json.load(open(os.path.join(out, "logs", "odsgd-2workers-seed0", runs.DONE)))
    assert marker["code"]["changes_sha256"] == "4" * 64  # a resume names it too


def test_a_portable_sweep_pins_every_run_and_runs_the_golden_run_beside(tmp_path, monkeypatch):
    ran, commands = [], []
    train = fake_train(ran, commands)

    def with_digest(cmd, **kwargs):
        proc = train(cmd, **kwargs)
        out = next((a[4:] for a in cmd if str(a).startswith("out=")), None)
        if out and os.path.basename(out) == "golden":
            with open(os.path.join(out, "metrics-rank0.jsonl"), "a") as f:
                f.write('{"epoch": 1, "loss": 0.7, "test_accuracy": 0.94, "weights_sha256": "d0"}\n')
        return proc
    monkeypatch.setattr(subprocess, "run", with_digest)
    exp = dict(EXPERIMENTS["fig6"], quick_workers=[4])
    state = Sweep()
    runs.run_curves(state, exp, True, str(tmp_path / "s"), None, None, CURVE_RUNS, (0,))
    assert ran[0] == "golden" and len(ran) == 5
    assert state.golden == {"loss": 0.7, "test_accuracy": 0.94, "weights_sha256": ["d0"]}
    assert all("numerics=portable" in c for c in commands)
    assert all("fp32_sum=rank" in c for c in commands[1:])  # 4 workers: sums in rank order, so runs repeat
    assert json.load(open(str(tmp_path / "s" / "golden.json"))) == state.golden


def test_replot_of_a_folder_recorded_before_the_golden_run_works_and_says_what_the_runs_used(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", fake_train([]))
    state = Sweep(numerics="native")
    out = str(tmp_path / "old")
    sweep(state, out, seeds=(0,))
    state.numerics = "portable"  # the default now
    state.replot = True
    results = sweep(state, out, seeds=(0,))
    assert state.golden is None and len(results) == 4
    # the fake runs recorded no numerics: the table says the option's; with records, theirs
    assert state.numerics_used() == "portable"
    state.mode_of.update({"a": "native", "b": "native"})
    assert state.numerics_used() == "native"


def test_each_fig10_case_keeps_the_provenance_of_its_bench_job():
    made = provenance.record(with_mxnet=False)
    rows = [{"provenance": made}] + [{"job": a, "compute_ms": 100.0, "iter_ms": 100.0 + i, "params": 10}
                                     for i, a in enumerate(ALGORITHMS)]
    rows.append({"phi_ms": 80.0, "psi_plus_delta_ms": 20.0, "cdsgd_comm_ms": 32.0})
    assert summarize_case("alexnet", 32, "1gbit", rows, 5)["provenance"] == made
    assert summarize_case("alexnet", 32, "1gbit", rows[1:], 5)["provenance"] is None  # logs made before it


# ---- verify ------------------------------------------------------------------------------------

def test_first_difference_names_the_metric_and_both_values():
    then = {"test_accuracy": 0.99, "last_epoch_loss": 0.1, "final_loss": 0.2, "weights_sha256": "aa"}
    assert verify.first_difference(then, dict(then)) is None
    assert verify.first_difference(then, dict(then, final_loss=0.3, weights_sha256="bb")) == \
        "final_loss: 0.2 (recorded) vs 0.3 (now)"
    assert verify.first_difference(then, {"failed": "FloatingPointError: x"}) == \
        "outcome: finished (recorded) vs FloatingPointError: x (now)"
    assert verify.first_difference({"failed": "a"}, {"failed": "a"}) is None


def test_explain_names_commit_numerics_instruction_set_and_versions():
    base = provenance.record(with_mxnet=False)
    assert verify.explain(base, base) == []
    other = json.loads(json.dumps(base))
    other["commit"] = "f" * 40
    other["dirty"] = False
    assert verify.explain(other, base)[0].startswith("another code version: recorded at " + "f" * 40)
    native = json.loads(json.dumps(base))
    native["numerics"] = {"mode": "native", "env": dict(base["numerics"]["env"], DNNL_MAX_CPU_ISA=None)}
    here = json.loads(json.dumps(native))
    native["cpu"]["isa_flags"] = ["sse4_2", "avx", "avx2", "fma", "avx512f"]
    here["cpu"]["isa_flags"] = ["sse4_2", "avx", "avx2", "fma"]
    assert verify.explain(native, here) == ["another CPU instruction set (native numerics follow it): sse4_2 avx avx2 "
                                            "fma avx512f (recorded) vs sse4_2 avx avx2 fma (now)"]
    portable = json.loads(json.dumps(native))
    portable["numerics"] = {"mode": "portable", "env": dict(base["numerics"]["env"], DNNL_MAX_CPU_ISA="AVX2")}
    (why,) = verify.explain(portable, here)  # pinned: the instruction set is no explanation, the settings are
    assert why.startswith("other numerics settings: portable (recorded) vs native (now); DNNL_MAX_CPU_ISA AVX2 -> None")
    assert verify.explain({}, here) == ["the recorded run has no provenance (recorded before it was kept)"]


def test_verify_needs_runs_or_a_sample_and_names_unknown_runs(tmp_path):
    (tmp_path / "seeds.json").write_text(json.dumps({"runs": {"ssgd-2workers": {"0": {}}}, "failed": []}))
    for args, message in ((["--sample", "0"], "--sample must be an integer >= 1"),
                          ([], "name the runs to rerun with --runs ALG:SEED,... or draw some with --sample N"),
                          (["--runs", "cdsgd:4"], "--runs 'cdsgd:4' names no recorded run (recorded: ssgd-2workers")):
        proc = subprocess.run([sys.executable, SCRIPT, "verify", str(tmp_path)] + args, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, SCRIPT, "verify", str(tmp_path / "none"), "--sample", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no seeds.json in" in proc.stderr
    for content, message in (({"runs": {}, "failed": []}, "holds no recorded run: nothing to check"),
                             ({"experiment": "fig6"}, "is not a sweep's seeds.json (KeyError")):
        (tmp_path / "seeds.json").write_text(json.dumps(content))
        proc = subprocess.run([sys.executable, SCRIPT, "verify", str(tmp_path), "--sample", "2"], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_verify_reruns_recorded_runs_and_tells_same_from_different(tmp_path):
    """Two real runs recorded (one process each, portable numerics: train.py starts itself again
    with the pins); verify reruns them: the untouched one is `same`; the one whose recorded
    numbers and commit were changed differs, named, and explained by the other commit."""
    recorded = {}
    for alg in ("ssgd", "cdsgd"):
        out = str(tmp_path / "logs" / alg)
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train.py"), "--config",
                               os.path.join(ROOT, "configs", "fig6_lenet_mnist.yaml"), "algorithm=" + alg, "workers=1",
                               "epochs=null", "iterations=60", "test_samples=300", "checkpoint=false",
                               "numerics=portable", "out=" + out], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "\r" not in proc.stdout and "epoch 1/1: 60/60 steps" in proc.stdout  # a line, not a bar
        iters, epochs = runs.read_metrics(out)
        recorded["%s-1workers" % alg] = {"0": run_record(Run(0, iters, epochs, out))}
    cd = recorded["cdsgd-1workers"]["0"]
    assert cd["provenance"]["numerics"]["mode"] == "portable" and cd["provenance"]["command"][-1] == \
        "out=" + str(tmp_path / "logs" / "cdsgd")
    cd["test_accuracy"] += 0.01
    cd["provenance"]["commit"], cd["provenance"]["dirty"] = "f" * 40, False
    results = tmp_path / "results"
    results.mkdir()
    (results / "seeds.json").write_text(json.dumps({"runs": recorded, "failed": []}))
    proc = subprocess.run([sys.executable, SCRIPT, "verify", str(results), "--runs", "ssgd:0,cdsgd:0", "--scratch",
                           str(tmp_path / "scratch")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ssgd-1workers seed 0: same" in lines
    (diff,) = [l for l in lines if l.startswith("cdsgd-1workers seed 0: differs, test_accuracy: ")]
    assert "explained by: another code version: recorded at " + "f" * 40 in diff
    assert "verify: 1 of 2 the same" in lines
    proc = subprocess.run([sys.executable, SCRIPT, "verify", str(results), "--runs", "ssgd:0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "verify: 1 of 1 the same (all)" in proc.stdout, proc.stdout[-2000:]


# ---- progress ---------------------------------------------------------------------------------

def test_progress_off_a_terminal_is_a_line_every_few_seconds_and_one_at_the_end():
    out = io.StringIO()
    p = Progress(1000, "epoch 1/10", stream=out, every=3600.0)
    for _ in range(1000):
        p.update(1, loss="0.1234")
    p.close()
    text = out.getvalue()
    assert "\r" not in text and text.count("\n") == 1  # nothing until `every` has passed, then the end
    assert text.startswith("epoch 1/10: 1000/1000 steps, loss 0.1234, ")
    out = io.StringIO()
    p = Progress(3, "epoch 2/10", stream=out, every=0.0)
    for _ in range(3):
        p.update(1)
    p.close()
    assert out.getvalue().count("\n") == 4 and "epoch 2/10: 2/3 steps" in out.getvalue()


def test_progress_on_a_terminal_draws_a_bar():
    out = io.StringIO()
    p = Progress(5, "epoch 1/1", stream=out, terminal=True)
    for _ in range(5):
        p.update(1, loss="0.5")
    p.close()
    assert "\r" in out.getvalue() and "5/5" in out.getvalue()


def test_a_run_resumed_across_code_versions_counts_as_other_code(tmp_path, monkeypatch):
    state = Sweep(code={"commit": "1" * 40, "dirty": False})
    out = tmp_path / "run"
    out.mkdir()
    same = {"commit": "1" * 40, "dirty": False, "numerics": {"mode": "portable"}}
    (out / "config.json").write_text(json.dumps({"provenance": dict(same, before=dict(same))}))
    assert provenance.code_id(runs.code_that_ran(state, str(out))) == "1" * 40
    assert state.mode_of[str(out)] == "portable"
    (out / "config.json").write_text(json.dumps({"provenance": dict(same, before={"commit": "2" * 40, "dirty": False})}))
    assert provenance.code_id(runs.code_that_ran(state, str(out))) != "1" * 40  # its epochs came from two commits

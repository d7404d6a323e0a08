"""The doors an MXNet user comes through (issue 39): Module / fit.py-style scripts, MXNet's store
names, options from the environment, and a stock store in a job with our servers.

Each job: tests/workers/module_worker.py, 2 workers + 1 server, SGD with momentum and a
FactorScheduler that halves the rate every 3 updates, 2 epochs of 6 batches per worker."""
import json
import os
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest

import cdsgd_mx
from cdsgd_mx.wire import auth
from cdsgd_mx.worker import doors
from cdsgd_mx.worker.config import ConfigError, check_config

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "workers" / "module_worker.py"
BATCHES = 12  # per worker: 2 epochs x 6


def job(tmp_path, name, *worker_args, stock_server=False, env=None, timeout=150, worker=WORKER):
    out = tmp_path / name
    out.mkdir()
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", str(timeout)]
    cmd += ["--stock-server"] if stock_server else []
    cmd += ["--", sys.executable, str(worker), "--out", str(out)] + list(worker_args)
    proc = subprocess.run(cmd, cwd=str(ROOT), env=dict(os.environ, **(env or {})), capture_output=True, text=True,
                          timeout=timeout + 30)
    results = [json.loads((out / ("rank%d.json" % r)).read_text()) if (out / ("rank%d.json" % r)).exists() else None
               for r in range(2)]
    return proc, results


def expected_local_rates(local_start, lr=0.2):
    """The local rate at each step: the global schedule's factor at that update (one per step)."""
    sched = mx.lr_scheduler.FactorScheduler(step=3, factor=0.5)
    sched.base_lr = lr
    return [local_start * sched(u + 1) / lr for u in range(BATCHES)]


# the jobs' 12 steps hold one look of the part choice, not two: no second look (part_choice.CLOSE = 0)
FIRST_LOOK_DECIDES = {"TEST_PART_CLOSE": "0"}
BOTH_WAYS = ",pull_compression=2bit"  # 2 bits both ways (issue 40: tracked corrections, the aim with momentum)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,more", [("cdsgd", ""), ("odsgd", ""), ("bitsgd", ""), ("cdsgd", BOTH_WAYS),
                                            ("bitsgd", BOTH_WAYS)])
def test_module_counts_steps_not_calls_and_equals_one_call_per_step(tmp_path, algorithm, more):
    """mod.fit pushes one parameter per call (4 here): the schedule, the step count and the
    weights must be those of the same Module stepped with one call per step. Before issue 39 the
    local rate halved 4x too often (once per call) and the weights differed."""
    env = {"CDSGD_OPTIONS": "k=3,warmup_steps=2" + more}
    proc_m, module = job(tmp_path, "module", "--door", "module", "--store", "dist_sync_" + algorithm, env=env)
    assert proc_m.returncode == 0, proc_m.stdout[-3000:] + proc_m.stderr[-3000:]
    proc_f, fused = job(tmp_path, "fused", "--door", "fused", "--store", "dist_sync_" + algorithm, env=env)
    assert proc_f.returncode == 0, proc_f.stdout[-3000:] + proc_f.stderr[-3000:]
    want = expected_local_rates(0.2)
    for r in range(2):
        steps = [s for s, _ in module[r]["record"]]
        assert steps == list(range(1, BATCHES + 1)), steps
        np.testing.assert_allclose([lr for _, lr in module[r]["record"]], want, rtol=1e-6)
        np.testing.assert_allclose([lr for _, lr in fused[r]["record"]], want, rtol=1e-6)
        for name, values in fused[r]["params"].items():
            np.testing.assert_array_equal(np.array(module[r]["params"][name], np.float32),
                                          np.array(values, np.float32), err_msg="%s rank %d" % (name, r))
    assert module[0]["type"] == "cdsgd_dist_sync"
    assert module[0]["sets"] == 1  # Module's one-parameter calls, collected into one bucket set


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,more", [("cdsgd", ""), ("bitsgd", ""), ("cdsgd", BOTH_WAYS), ("bitsgd", BOTH_WAYS)])
def test_gluon_trainer_with_our_store_equals_cdsgd_mx_trainer(tmp_path, algorithm, more):
    """gluon.Trainer(kvstore=mx.kv.create('dist_sync_ALG')) pushes one parameter per call; our
    Trainer hands the step over in one call, fused into buckets: the same schedule, step count and
    weights, bit for bit."""
    env = {"CDSGD_OPTIONS": "k=3,warmup_steps=2" + more}
    gluon_worker = ROOT / "tests" / "workers" / "gluon_worker.py"
    proc_g, theirs = job(tmp_path, "gluon", "--door", "gluon", "--store", "dist_sync_" + algorithm, env=env,
                         worker=gluon_worker)
    assert proc_g.returncode == 0, proc_g.stdout[-3000:] + proc_g.stderr[-3000:]
    proc_t, ours = job(tmp_path, "trainer", "--door", "trainer", "--store", "dist_sync_" + algorithm, env=env,
                       worker=gluon_worker)
    assert proc_t.returncode == 0, proc_t.stdout[-3000:] + proc_t.stderr[-3000:]
    want = expected_local_rates(0.2)
    for r in range(2):
        assert [s for s, _ in theirs[r]["record"]] == list(range(1, BATCHES + 1))
        np.testing.assert_allclose([lr for _, lr in theirs[r]["record"]], want, rtol=1e-6)
        np.testing.assert_allclose([lr for _, lr in ours[r]["record"]], want, rtol=1e-6)
        for name, values in ours[r]["params"].items():
            np.testing.assert_array_equal(np.array(theirs[r]["params"][name], np.float32),
                                          np.array(values, np.float32), err_msg="%s rank %d" % (name, r))


def assert_parts_give_the_weights_of_whole_buckets(runs):
    """runs["32"] (buckets with parts) and runs["0"] (without): the same schedule and weights, bit for bit."""
    for r in range(2):
        assert runs["32"][r]["parts"] >= 8 and runs["0"][r]["parts"] == 0
        assert runs["32"][r]["record"] == runs["0"][r]["record"]
        for name, values in runs["0"][r]["params"].items():
            np.testing.assert_array_equal(np.array(runs["32"][r]["params"][name], np.float32),
                                          np.array(values, np.float32), err_msg="%s rank %d" % (name, r))


@pytest.mark.slow
@pytest.mark.parametrize("door,worker,options", [("module", "module_worker.py", ""), ("gluon", "gluon_worker.py", ""),
                                                 ("module", "module_worker.py", ",fp32_sum=rank"),
                                                 ("gluon", "gluon_worker.py", ",pull_compression=2bit"),
                                                 ("gluon", "gluon_worker.py", ",fp32_sum=rank")])
def test_each_door_trains_in_parts_the_weights_of_whole_buckets(tmp_path, door, worker, options):
    """CD-SGD's fp32 rounds in parts of 32 values (buckets.partition: the 12 x 16 layer's 192
    values cut in 6) through Module's and gluon's Trainer's one-parameter calls: the same
    weights, bit for bit, as the same door on whole buckets (CDSGD_PART_SIZE=0); through
    gluon's also with 2-bit pulls (V moved once a bucket's last part is in); both with rank-order
    sums (a rows key per part, its W copied back into the bucket)."""
    runs = {}
    for part in ("32", "0"):
        env = {"CDSGD_OPTIONS": "k=3,warmup_steps=2" + options, "CDSGD_PART_SIZE": part, "CDSGD_PARTS": "parts"}
        proc, runs[part] = job(tmp_path, door + part + options.replace(",", "-"), "--door", door, "--store",
                               "dist_sync_cdsgd", env=env,
                               worker=ROOT / "tests" / "workers" / worker)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_parts_give_the_weights_of_whole_buckets(runs)


@pytest.mark.slow
@pytest.mark.parametrize("door,worker", [("module", "module_worker.py"), ("gluon", "gluon_worker.py")])
def test_each_door_lets_the_trials_choose_parts_or_whole_and_keeps_the_weights(tmp_path, door, worker):
    """CDSGD_PARTS=auto (the default) through Module's and gluon's Trainer's one-parameter
    calls: 9 warm-up steps and the correction at step 12 are 10 fp32 steps, so the 7 trial
    steps (part_choice.TRIALS) run and rank 0 says once which way the rest go. The weights are
    those of the same door on whole buckets (CDSGD_PART_SIZE=0), bit for bit, whichever way won."""
    runs, out = {}, {}
    for part in ("32", "0"):  # auto, the default, either way: without parts nothing is tried
        env = {"CDSGD_OPTIONS": "k=3,warmup_steps=9", "CDSGD_PART_SIZE": part, **FIRST_LOOK_DECIDES}
        proc, runs[part] = job(tmp_path, door + part, "--door", door, "--store", "dist_sync_cdsgd", env=env,
                               worker=ROOT / "tests" / "workers" / worker)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out[part] = [line for line in (proc.stdout + proc.stderr).splitlines() if "fp32 rounds in" in line]
    assert len(out["32"]) == 1 and "(3 trial steps each way" in out["32"][0], out  # rank 0, once
    assert out["0"] == []
    assert_parts_give_the_weights_of_whole_buckets(runs)


@pytest.mark.slow
def test_module_saves_and_loads_the_stores_states_and_resumes_bit_for_bit(tmp_path):
    """fit.py-style resume: epoch 1, Module.save_optimizer_states on every worker, then a new job
    that loads them and fits epoch 2 ends with the weights of 2 epochs in one go (CD-SGD, with
    its residuals, delayed round and local rate's schedule)."""
    env = {"CDSGD_OPTIONS": "k=3,warmup_steps=2"}
    states = str(tmp_path / "lenet.states")
    proc_a, straight = job(tmp_path, "straight", "--epochs", "2", env=env)
    assert proc_a.returncode == 0, proc_a.stdout[-3000:] + proc_a.stderr[-3000:]
    proc_b, _ = job(tmp_path, "first", "--epochs", "1", "--save", states, env=env)
    assert proc_b.returncode == 0, proc_b.stdout[-3000:] + proc_b.stderr[-3000:]
    proc_c, resumed = job(tmp_path, "resumed", "--epochs", "2", "--begin-epoch", "1", "--resume", states, env=env)
    assert proc_c.returncode == 0, proc_c.stdout[-3000:] + proc_c.stderr[-3000:]
    for r in range(2):
        assert [s for s, _ in resumed[r]["record"]] == list(range(BATCHES // 2 + 1, BATCHES + 1))
        np.testing.assert_allclose([lr for _, lr in resumed[r]["record"]], expected_local_rates(0.2)[BATCHES // 2:],
                                   rtol=1e-6)
        for name, values in straight[r]["params"].items():
            np.testing.assert_array_equal(np.array(resumed[r]["params"][name], np.float32),
                                          np.array(values, np.float32), err_msg="%s rank %d" % (name, r))


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"CDSGD_OPTIONS": "k=3,warmup_steps=2"},
                                 dict({"CDSGD_OPTIONS": "k=3,warmup_steps=9", "CDSGD_PART_SIZE": "32"},
                                      **FIRST_LOOK_DECIDES)],
                         ids=["whole", "parts-or-whole"])
def test_a_fit_py_style_script_under_mxnets_launcher_trains_as_under_ours(tmp_path, env):
    """The script as fit.py users launch it: tools/launch.py --launcher local (through
    cdsgd_mx.mxnet_launch), `import cdsgd_mx` first, --kv-store dist_sync_cdsgd: the weights of
    the same job under python -m cdsgd_mx.launch, bit for bit; also with buckets in parts of 32
    values, whose 10 fp32 steps (9 warm-up, a correction) run the part choice's trials there."""
    proc_o, ours = job(tmp_path, "ours", "--store", "dist_sync_cdsgd", env=env)
    assert proc_o.returncode == 0, proc_o.stdout[-3000:] + proc_o.stderr[-3000:]
    secret = tmp_path / "secret"
    secret.write_text(auth.new_secret())
    secret.chmod(0o600)
    out = tmp_path / "tracker"
    out.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CDSGD_", "DMLC_"))}
    clean.update(env, CDSGD_SECRET_FILE=str(secret), DMLC_INTERFACE="lo")
    cmd = [sys.executable, "-m", "cdsgd_mx.mxnet_launch", "--launcher", "local", "-n", "2", "-s", "1",
           sys.executable, str(WORKER), "--out", str(out), "--store", "dist_sync_cdsgd"]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=clean, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "fp32 rounds in" in line]
    assert len(said) == ("CDSGD_PART_SIZE" in env), said  # rank 0 says once which way the trials chose
    for r in range(2):
        theirs = json.loads((out / ("rank%d.json" % r)).read_text())
        assert theirs["parts"] == ours[r]["parts"] and (theirs["parts"] > 0) == ("CDSGD_PART_SIZE" in env)
        assert [s for s, _ in theirs["record"]] == list(range(1, BATCHES + 1))
        for name, values in ours[r]["params"].items():
            np.testing.assert_array_equal(np.array(theirs["params"][name], np.float32),
                                          np.array(values, np.float32), err_msg="%s rank %d" % (name, r))


@pytest.mark.slow
def test_module_ssgd_gives_stock_dist_syncs_weights_bit_for_bit(tmp_path):
    """fit.py's S-SGD baseline: mod.fit with mx.kv.create('dist_sync_ssgd') on our servers, and
    with MXNet's own dist_sync on MXNet's own servers, under the same schedule."""
    proc_o, ours = job(tmp_path, "ours", "--store", "dist_sync_ssgd")
    assert proc_o.returncode == 0, proc_o.stdout[-3000:] + proc_o.stderr[-3000:]
    proc_s, stock = job(tmp_path, "stock", "--store", "dist_sync", "--no-import", stock_server=True)
    assert proc_s.returncode == 0, proc_s.stdout[-3000:] + proc_s.stderr[-3000:]
    for r in range(2):
        assert [s for s, _ in ours[r]["record"]] == list(range(1, BATCHES + 1))
        for name, values in stock[r]["params"].items():
            np.testing.assert_array_equal(np.array(ours[r]["params"][name], np.float32),
                                          np.array(values, np.float32), err_msg="%s rank %d" % (name, r))


@pytest.mark.slow
@pytest.mark.parametrize("first_import", [True, False])
def test_a_stock_store_in_a_job_with_our_servers_stops_the_job_in_one_line(tmp_path, first_import):
    """--kv-store dist_sync under our launcher: MXNet's store talks to our servers, which would
    drop every push (9% accuracy, exit 0 before issue 39). With `import cdsgd_mx` first the
    worker stops at the store's set_optimizer, naming the name it was given and the one that gives
    ours (issue 54); without it the server stops the job at the stock worker's first message."""
    args = ["--store", "dist_sync"] + ([] if first_import else ["--no-import"])
    proc, results = job(tmp_path, "stock", *args, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    if first_import:
        lines = [line for line in out.splitlines() if "cdsgd_mx: mx.kv.create('dist_sync') gives MXNet's own store, "
                                                        "even after `import cdsgd_mx`" in line]
        assert "came before any cdsgd_mx worker started" not in out, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
    else:
        lines = [line for line in out.splitlines() if "came before any cdsgd_mx worker started" in line]
    assert lines, out[-3000:]
    assert "dist_sync_ssgd" in lines[0] and "--stock-server" in lines[0]
    assert results == [None, None]  # no worker finished training


def test_store_names_and_options_from_the_environment(monkeypatch):
    monkeypatch.setenv("CDSGD_OPTIONS", "k=4, warmup_steps=20,local_lr=0.05,pull_compression=2bit")
    opts = doors.options_from_environment()
    assert opts == {"k": 4, "warmup_steps": 20, "local_lr": 0.05, "pull_compression": "2bit"}
    assert doors.store_arguments(opts)["local_optimizer_params"] == {"learning_rate": 0.05}
    monkeypatch.setenv("CDSGD_OPTIONS", "algorithm=ssgd")
    from mxnet.kvstore import KVStoreBase
    for name in ("cdsgd", "dist_sync_cdsgd", "dist_sync_odsgd", "dist_sync_bitsgd", "dist_sync_ssgd"):
        assert name in KVStoreBase.kv_registry, name
        assert "dist" in name or name == "cdsgd"
    with pytest.raises(ConfigError, match="dist_sync_cdsgd names algorithm 'cdsgd', but CDSGD_OPTIONS sets "
                                          "algorithm='ssgd'"):
        mx.kv.create("dist_sync_cdsgd")


def test_options_from_a_file(tmp_path, monkeypatch):
    path = tmp_path / "opts.json"
    path.write_text(json.dumps({"k": 7, "threshold": 1, "algorithm": "bitsgd"}))
    monkeypatch.setenv("CDSGD_OPTIONS_FILE", str(path))
    monkeypatch.setenv("CDSGD_OPTIONS", "k=2")
    assert doors.options_from_environment() == {"k": 2, "threshold": 1.0, "algorithm": "bitsgd"}


@pytest.mark.parametrize("env,message", [
    ({"CDSGD_OPTIONS": "kk=3"}, "CDSGD_OPTIONS: unknown option 'kk'; the options are algorithm, k, warmup_steps"),
    ({"CDSGD_OPTIONS": "k=x"}, "CDSGD_OPTIONS: k must be an integer, got 'x'"),
    ({"CDSGD_OPTIONS": "k"}, "CDSGD_OPTIONS: 'k' is not key=value"),
    ({"CDSGD_OPTIONS": "k=0"}, "k must be an integer >= 1, got 0"),
    ({"CDSGD_OPTIONS": "algorithm=adam"}, "algorithm must be one of ssgd, bitsgd, odsgd, cdsgd, got 'adam'"),
    ({"CDSGD_OPTIONS_FILE": "/nonexistent/o.json"}, "CDSGD_OPTIONS_FILE=/nonexistent/o.json: cannot read it"),
])
def test_a_bad_option_stops_a_script_in_one_line(env, message, tmp_path):
    """mx.kv.create('cdsgd') in a script: the bad option, in one line, no traceback, exit != 0."""
    script = "import cdsgd_mx\nimport mxnet as mx\nmx.kv.create('cdsgd')\nprint('CREATED')\n"
    proc = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), capture_output=True, text=True,
                          env=dict(os.environ, **env), timeout=120)
    assert proc.returncode != 0 and "CREATED" not in proc.stdout
    assert proc.stderr.strip().splitlines() == ["cdsgd_mx: " + proc.stderr.strip()[len("cdsgd_mx: "):]], proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", ["dist", "dist_sync", "dist_sync_device", "dist_device_sync"])
def test_mxnets_names_for_a_synchronous_store_are_accepted(name):
    check_config("cdsgd", 5, 0, 0.5, name)  # no error
    assert cdsgd_mx.worker.config.store_name(name) == "dist_sync"


def test_a_refused_store_is_named_by_its_type():
    with pytest.raises(ConfigError, match="got a KVStore store of type 'device'$"):
        check_config("cdsgd", 5, 0, 0.5, mx.kv.create("device"))
    with pytest.raises(ConfigError, match="got 'dist_async'$"):
        check_config("cdsgd", 5, 0, 0.5, "dist_async")

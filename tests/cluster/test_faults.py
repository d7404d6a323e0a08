"""Faults bring the whole job down, loudly, within a bounded time, leaving nothing behind."""
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "workers", "fault_worker.py")


def start(fault, workers=2, servers=1):
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", str(workers), "-s", str(servers), "--timeout", "120",
           "--", sys.executable, WORKER, "--fault", fault]
    env = dict(os.environ, CDSGD_FAULT_TEST=str(os.getpid()))
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def job_pids():
    """Processes of jobs started by this test run (they carry CDSGD_FAULT_TEST in their env)."""
    mine = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if ("CDSGD_FAULT_TEST=%d" % os.getpid()).encode() in f.read():
                        mine.append(int(pid))
            except OSError:
                pass
    return mine


def assert_job_gone():
    time.sleep(0.5)
    assert job_pids() == []


def finish(proc, limit=60):
    start_t = time.time()
    out, _ = proc.communicate(timeout=limit + 30)
    return proc.returncode, out, time.time() - start_t


def test_server_side_decode_error_stops_the_job_with_its_message():
    rc, out, _ = finish(start("corrupt"))
    assert rc != 0
    assert "cdsgd_mx server error in update of key" in out
    assert "not valid ternary16 codes (corrupt payload)" in out
    assert "server 0 exited with code 70" in out
    assert_job_gone()


def test_server_side_optimizer_error_stops_the_job_with_its_message():
    rc, out, took = finish(start("optimizer"))
    assert rc != 0
    assert "cdsgd_mx server error in update of key" in out
    assert "clip_gradient" in out
    assert "exited with code 70" in out
    assert took < 60
    assert_job_gone()


def test_killed_worker_stops_everyone_within_60s():
    rc, out, took = finish(start("die"))
    assert rc != 0
    assert "exited with signal SIGKILL; stopping the job" in out
    assert took < 60
    assert_job_gone()


def test_killed_server_stops_everyone_within_60s():
    proc = start("none", servers=2)
    deadline = time.time() + 60
    lines = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "step 5" in line:
            break
    servers = [p for p in job_pids() if b"cdsgd_mx.server" in open("/proc/%d/cmdline" % p, "rb").read()
               and b"DMLC_ROLE=server" in open("/proc/%d/environ" % p, "rb").read()]
    assert servers, "no server process found: %s" % "".join(lines[-20:])
    os.kill(servers[0], signal.SIGKILL)
    rc, out, took = finish(proc)
    assert rc != 0
    assert "server" in out and "exited with signal SIGKILL; stopping the job" in out
    assert took < 60
    assert_job_gone()


def test_configuration_mismatch_across_workers_is_refused_before_training(tmp_path):
    import json
    engine = os.path.join(ROOT, "tests", "workers", "engine_worker.py")
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "60", "--",
           sys.executable, engine, "--algorithm", "cdsgd", "--k", "3", "--out", str(tmp_path),
           "--config", json.dumps({"k_by_index": 1})]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert proc.returncode != 0
    assert "workers disagree on the configuration: k is" in proc.stdout
    assert "3 on rank" in proc.stdout and "4 on rank" in proc.stdout
    assert not list(tmp_path.glob("rank*.npz"))  # nothing trained


def test_workers_that_sum_fp32_differently_are_refused_before_training(tmp_path):
    """fp32_sum='rank' on one worker only (issue 41): it would push its fp32 rounds as rows the
    others never push, and wait for ever; the start-up check names it on every worker instead."""
    import json
    engine = os.path.join(ROOT, "tests", "workers", "engine_worker.py")
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "60", "--",
           sys.executable, engine, "--algorithm", "ssgd", "--out", str(tmp_path),
           "--config", json.dumps({"fp32_sum": ["arrival", "rank"]})]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert proc.returncode != 0
    said = "ConfigError: workers disagree on the configuration: fp32_sum is %s\n"
    assert said % "'arrival' on rank 0, 'rank' on rank 1" in proc.stdout or \
        said % "'rank' on rank 0, 'arrival' on rank 1" in proc.stdout, proc.stdout[-3000:]  # launch order is not rank
    assert not list(tmp_path.glob("rank*.npz"))  # nothing trained


@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_nonfinite_skip_drops_the_step_on_every_worker(tmp_path, alg):
    """Rank 1 at step 4, rank 0 at step 1 (the first delayed step), both at step 6: those
    steps vanish on every worker; the rest matches the simulation, nothing is poisoned."""
    import json
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from cdsgd_mx.experiments.simulation import simulate
    from worker.test_engine import CFG, SHAPES
    from workers.engine_worker import grad_fn, init_value
    nan_at = [[0, 1], [1, 4], [0, 6], [1, 6]]
    cfg = dict(CFG, nonfinite="skip", nan_at=nan_at)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "2", "--timeout", "90", "--",
           sys.executable, os.path.join(ROOT, "tests", "workers", "engine_worker.py"), "--algorithm", alg,
           "--steps", "10", "--warmup", "2", "--k", "3", "--out", str(out), "--config", json.dumps(cfg)]
    env = dict(os.environ, MXNET_KVSTORE_BIGARRAY_BOUND="600")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for step, ranks in ((1, "0"), (4, "1"), (6, "0, 1")):
        assert proc.stdout.count("step %d skipped on every worker: non-finite gradient on rank %s" % (step, ranks)) == 2
    assert "(here: parameter p1 at step 4 (1 values))" in proc.stdout
    xs, W = simulate(alg, 2, 10, 2, 3, 0.5, [init_value(i, s) for i, s in enumerate(SHAPES)], grad_fn,
                     CFG["lr"], CFG["momentum"], CFG["local_lr"], CFG["batch"],
                     poisoned={tuple(p) for p in nan_at})
    for r in range(2):
        got = dict(np.load(out / ("rank%d.npz" % r)))
        assert len(got["bytes"]) == 7  # 10 steps, 3 dropped: nothing pushed for those
        for i in range(len(SHAPES)):
            assert np.all(np.isfinite(got["w%d" % i])) and np.all(np.isfinite(got["x%d" % i]))
            np.testing.assert_allclose(got["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)

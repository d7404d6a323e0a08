"""A bounded soak: 4 workers and 2 servers for 2000 steps. No hang, bounded memory in every
process, and the final weights still equal the numpy simulation."""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cdsgd_mx.experiments.simulation import simulate  # noqa: E402
from workers.engine_worker import SHAPES, grad_fn, init_value  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 2000
RSS_LIMIT_MB = 700      # any process, at any time
RSS_GROWTH_MB = 60      # between the first and the last quarter of the run


def rss_of_job(marker):
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if marker not in f.read():
                    continue
            with open("/proc/%s/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        out[int(pid)] = int(line.split()[1]) / 1024.0
        except OSError:
            pass
    return out


def test_soak_4_workers_2_servers(tmp_path):
    """The module's soak.
    Slow: 2000 steps of 4 workers + 2 servers (64 s in the fresh clone at 44fc460, 2 cores):
    memory growth shows only over a long run."""
    marker = "CDSGD_SOAK=%d" % os.getpid()
    cfg = {"lr": 0.25, "momentum": 0.5, "local_lr": 0.5, "batch": 4, "stable": True}
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "4", "-s", "2", "--timeout", "600", "--",
           sys.executable, os.path.join(ROOT, "tests", "workers", "engine_worker.py"), "--algorithm", "cdsgd",
           "--steps", str(STEPS), "--warmup", "20", "--k", "5", "--out", str(tmp_path), "--config", json.dumps(cfg)]
    env = dict(os.environ, MXNET_KVSTORE_BIGARRAY_BOUND="600", CDSGD_SOAK=str(os.getpid()))
    samples = []
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    start = time.time()
    while proc.poll() is None:
        samples.append((time.time() - start, rss_of_job(marker.encode())))
        time.sleep(1.0)
    reader.join(5)
    took = time.time() - start
    assert proc.returncode == 0, "".join(out)[-3000:]
    # memory: bounded, and not growing with the number of steps
    per_pid = {}
    for t, rss in samples:
        for pid, mb in rss.items():
            per_pid.setdefault(pid, []).append((t, mb))
    assert per_pid, "no process of the job was sampled"
    for pid, series in per_pid.items():
        peak = max(mb for _, mb in series)
        assert peak < RSS_LIMIT_MB, "process %d reached %.0f MB" % (pid, peak)
        if len(series) >= 8:
            q = len(series) // 4
            early = np.median([mb for _, mb in series[q:2 * q]])
            late = np.median([mb for _, mb in series[-q:]])
            assert late - early < RSS_GROWTH_MB, "process %d grew from %.0f to %.0f MB" % (pid, early, late)
    print("soak: %d steps in %.0f s, peak RSS %.0f MB" % (
        STEPS, took, max(mb for s in per_pid.values() for _, mb in s)))
    stable = lambda x, r, t, i: grad_fn(x, r, t, i, stable=True)  # noqa: E731
    xs, W = simulate("cdsgd", 4, STEPS, 20, 5, 0.5, [init_value(i, s) for i, s in enumerate(SHAPES)], stable,
                     cfg["lr"], cfg["momentum"], cfg["local_lr"], cfg["batch"])
    for r in range(4):
        got = dict(np.load(tmp_path / ("rank%d.npz" % r)))
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)

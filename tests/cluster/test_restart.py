"""--max-restarts: a worker, then the server, SIGKILLed mid-run; the job restarts from its last
complete checkpoint by itself each time and ends with the weights of an uninterrupted run, for
all four algorithms (issue 14, item 4)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_faults import ROOT, assert_job_gone  # noqa: E402
from test_stall import node  # noqa: E402

pytestmark = pytest.mark.slow
TRAIN = os.path.join(ROOT, "scripts", "train.py")
CONFIG = os.path.join(ROOT, "configs", "fig6_lenet_mnist.yaml")
ITERATIONS, PER_EPOCH = 80, 10  # 160 synthetic samples in batches of 16


def train(out, alg, *extra, tag=""):
    cmd = [sys.executable, TRAIN, "--config", CONFIG, "dataset=synthetic", "epochs=null",
           "iterations=%d" % ITERATIONS, "train_samples=%d" % (PER_EPOCH * 16), "batch_size=16", "warmup_steps=5",
           "k=3", "algorithm=" + alg, "out=" + str(out)] + list(extra)
    env = dict(os.environ, CDSGD_FAULT_TEST=str(os.getpid()), CDSGD_STALL_JOB=tag)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


class Uninterrupted(threading.Thread):
    """The same run without a fault, alongside (it reads its own output: a full pipe would
    hold it up)."""

    def __init__(self, out, alg):
        super().__init__(daemon=True)
        self.proc = train(out, alg)
        self.start()

    def run(self):
        self.text, _ = self.proc.communicate(timeout=300)

    def finish(self):
        self.join(timeout=320)
        assert self.proc.returncode == 0, self.text[-3000:]


def epochs_logged(out):
    path = os.path.join(out, "metrics-rank0.jsonl")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.startswith("{") and '"iteration"' not in line)


def final_params(out):
    from cdsgd_mx.wire import checkpoint
    return [{k: v.asnumpy() for k, v in checkpoint.load_parameters(os.path.join(out, "checkpoint.states"), r).items()}
            for r in (0, 1)]


def kill_mid_run_and_finish(out, alg, kills, restarts):
    """kills: (epochs logged, role, launch index): SIGKILL that node once the log shows that
    many epochs (the epoch before is checkpointed, the next save on its way). The log is
    rewritten back to the checkpoint on a restart, so a later count is the restarted job's."""
    proc = train(out, alg, "max_restarts=%d" % restarts, tag="killed")
    deadline = time.time() + 180
    for epochs, role, index in kills:
        while epochs_logged(out) < epochs:
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
            time.sleep(0.02)
        os.kill(node(role, index, "killed"), signal.SIGKILL)
    out_text, _ = proc.communicate(timeout=300)
    return proc.returncode, out_text


@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_a_worker_then_the_server_killed_mid_run_restart_and_end_bit_identical(tmp_path, alg):
    """For cdsgd the scheduler is killed too, third."""
    whole = Uninterrupted(tmp_path / "whole", alg)
    kills = [(2, "worker", 1), (4, "server", 0)] + ([(6, "scheduler", None)] if alg == "cdsgd" else [])
    n = len(kills)
    rc, text = kill_mid_run_and_finish(tmp_path / "restarted", alg, kills, restarts=n)
    whole.finish()
    assert rc == 0, text[-3000:]
    assert "launch | restart 1 of %d: worker 1 exited with signal SIGKILL" % n in text
    assert "launch | restart 2 of %d: server 0 exited with signal SIGKILL" % n in text
    if n == 3:
        assert "launch | restart 3 of 3: scheduler exited with signal SIGKILL" in text, text[-3000:]
    for attempt, resumed in list(((1, (1, 2)), (2, (3, 4)), (3, (5, 6))))[:n]:  # the checkpoint before the kill, or the one just saved
        assert any("launch | restart %d resumed at step %d:" % (attempt, e * PER_EPOCH) in text for e in resumed), text
    assert text.count("steps lost (done again)") == n
    for a, b in zip(final_params(tmp_path / "whole"), final_params(tmp_path / "restarted")):
        assert sorted(a) == sorted(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    for r in (0, 1):  # the steps done again are logged once
        rows = [json.loads(l) for l in open(tmp_path / "restarted" / ("metrics-rank%d.jsonl" % r))]
        assert [row["iteration"] for row in rows if "iteration" in row] == list(range(ITERATIONS))
        assert [row["epoch"] for row in rows if "iteration" not in row] == list(range(ITERATIONS // PER_EPOCH))
    assert_job_gone()


def test_without_restarts_the_failure_ends_the_job(tmp_path):
    rc, text = kill_mid_run_and_finish(tmp_path / "once", "cdsgd", [(2, "worker", 0)], restarts=0)
    assert rc != 0, text[-3000:]
    assert "worker 0 exited with signal SIGKILL; stopping the job" in text and "restart" not in text
    assert_job_gone()

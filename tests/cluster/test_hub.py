"""A failed job ends by itself under any launcher (issue 39, item 6): with no launcher of ours,
the nodes beat to the scheduler's hub (cluster/hub.py), which stops every node once a worker
fails or falls silent. The jobs here are started by hand, node by node, as a launcher that only
sets DMLC_* and runs one command per role would (Kubernetes, a site script)."""
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdsgd_mx.cluster import heartbeat
from cdsgd_mx.cluster.hub import Hub
from cdsgd_mx.wire import auth

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"0123456789abcdef0123456789abcdef"


def beat(node, phase, pid=1, secret=SECRET, rank=None):
    return heartbeat.encode(secret, {"node": node, "host": "h", "pid": pid, "phase": phase, "rank": rank})


def verdict_of(answer):
    return heartbeat.decode(SECRET, answer)["verdict"]


def test_a_failed_worker_stops_the_job_at_once():
    hub = Hub(SECRET, 2, stall_timeout=60, start_timeout=600, now=0)
    assert verdict_of(hub.receive(beat("worker", "train", 1), 1)) == "go"
    assert verdict_of(hub.receive(beat("server", "train", 2), 1)) == "go"
    assert hub.verdict(2) is None
    answer = heartbeat.decode(SECRET, hub.receive(beat("worker", "failed", 3, rank=1), 3))
    assert answer["verdict"] == "stop" and "worker (rank 1) on h failed" in answer["why"]
    assert verdict_of(hub.receive(beat("server", "train", 2), 4)) == "stop"  # everyone hears it


def test_silence_outside_the_exit_stops_the_job_and_an_exit_does_not():
    hub = Hub(SECRET, 2, stall_timeout=10, start_timeout=600, now=0)
    hub.receive(beat("worker", "train", 1), 1)
    hub.receive(beat("worker", "exit", 2), 1)   # ended well: its silence afterwards is expected
    hub.receive(beat("server", "train", 3), 1)
    hub.receive(beat("server", "train", 3), 20)
    hub.receive(beat("worker", "train", 1), 9)
    assert hub.verdict(15) is None
    assert "worker on h has been silent for 11 s" in hub.verdict(20)


def test_workers_that_never_start_stop_the_job_at_the_start_timeout():
    hub = Hub(SECRET, 2, stall_timeout=0, start_timeout=30, now=0)
    hub.receive(beat("worker", "start", 1), 1)
    assert hub.verdict(29) is None
    assert hub.verdict(31) == "only 1 of 2 workers started within CDSGD_START_TIMEOUT=30 s"


def test_a_beat_without_the_jobs_mac_gets_no_answer_and_changes_nothing():
    hub = Hub(SECRET, 1, stall_timeout=10, start_timeout=600, now=0)
    assert hub.receive(beat("worker", "failed", secret=b"another secret of the same size!!"), 1) is None
    assert hub.receive(b"garbage", 1) is None
    assert hub.verdict(2) is None and not hub.last


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nodes(tmp_path, worker_cmd, stall="8"):
    """scheduler, server and 2 workers, started by hand with only DMLC_* set (no launcher)."""
    secret = tmp_path / "secret"
    secret.write_text(auth.new_secret())
    secret.chmod(stat.S_IRUSR | stat.S_IWUSR)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CDSGD_", "DMLC_"))}
    base.update(DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(_free_port()), DMLC_NUM_WORKER="2",
                DMLC_NUM_SERVER="1", DMLC_INTERFACE="lo", CDSGD_SECRET_FILE=str(secret), CDSGD_STALL_TIMEOUT=stall)
    procs = {}
    for name, role, cmd in [("scheduler", "scheduler", [sys.executable, "-m", "cdsgd_mx.server"]),
                            ("server", "server", [sys.executable, "-m", "cdsgd_mx.server"]),
                            ("worker0", "worker", worker_cmd), ("worker1", "worker", worker_cmd)]:
        procs[name] = subprocess.Popen(cmd, cwd=str(tmp_path), env=dict(base, DMLC_ROLE=role),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return procs


def _wait_all(procs, timeout):
    deadline = time.time() + timeout
    try:
        for p in procs.values():
            p.wait(timeout=max(0.1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        pass
    left = [name for name, p in procs.items() if p.poll() is None]
    for p in procs.values():
        if p.poll() is None:
            p.kill()
    outs = {name: p.communicate()[0] for name, p in procs.items()}
    return left, outs


@pytest.mark.slow
def test_workers_that_raise_end_the_servers_and_the_scheduler_without_a_launcher(tmp_path):
    """As cifar10_dist.py under tools/launch.py: both workers fail; before issue 39 the server and
    the scheduler ran on until killed by hand."""
    started = time.time()
    procs = _nodes(tmp_path, [sys.executable, str(ROOT / "tests" / "workers" / "raising_worker.py")])
    left, outs = _wait_all(procs, 60)
    assert not left, "still running after 60 s: %s\n%s" % (left, "\n".join(outs.values())[-3000:])
    assert time.time() - started < 40
    assert procs["server"].returncode != 0 and procs["scheduler"].returncode != 0
    assert "the job failed: worker" in outs["server"], outs["server"][-2000:]
    assert "cdsgd_mx scheduler: the job failed: worker" in outs["scheduler"], outs["scheduler"][-2000:]


@pytest.mark.slow
def test_a_killed_worker_ends_the_job_soon_after_the_stall_timeout_without_a_launcher(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    worker = [sys.executable, str(ROOT / "tests" / "workers" / "module_worker.py"), "--out", str(out),
              "--epochs", "10000", "--store", "dist_sync_cdsgd"]
    procs = _nodes(tmp_path, worker, stall="8")
    time.sleep(12)  # start-up and some training
    assert all(p.poll() is None for p in procs.values()), "a node ended early"
    procs["worker1"].send_signal(signal.SIGKILL)
    killed = time.time()
    left, outs = _wait_all(procs, 40)
    assert not left, "still running 40 s after the kill: %s\n%s" % (left, "\n".join(outs.values())[-3000:])
    assert time.time() - killed < 8 + 10 + 10  # the stall timeout, the hub's BEHIND, and some slack
    assert "has been silent" in outs["scheduler"], outs["scheduler"][-2000:]
    assert procs["server"].returncode != 0 and procs["worker0"].returncode != 0

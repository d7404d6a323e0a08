"""Faults bring the whole job down, loudly, within a bounded time, leaving nothing behind."""
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    time.sleep(0.5)
    assert job_pids() == []


def test_server_side_optimizer_error_stops_the_job_with_its_message():
    rc, out, took = finish(start("optimizer"))
    assert rc != 0
    assert "cdsgd_mx server error in update of key" in out
    assert "clip_gradient" in out
    assert "exited with code 70" in out
    assert took < 60
    time.sleep(0.5)
    assert job_pids() == []


def test_killed_worker_stops_everyone_within_60s():
    rc, out, took = finish(start("die"))
    assert rc != 0
    assert "exited with signal SIGKILL; stopping the job" in out
    assert took < 60
    time.sleep(0.5)
    assert job_pids() == []


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
    time.sleep(0.5)
    assert job_pids() == []


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

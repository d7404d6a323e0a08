"""A job that stalls ends: a stopped node is named and the job stops (issue 14, items 1 and 2)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_faults import ROOT, WORKER, assert_job_gone, job_pids  # noqa: E402

pytestmark = pytest.mark.slow
STALL = ["--stall-timeout", "20", "--start-timeout", "20"]


def start(fault, *launch_args, steps=100000):
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "150", *launch_args,
           "--", sys.executable, WORKER, "--fault", fault, "--steps", str(steps)]
    env = dict(os.environ, CDSGD_FAULT_TEST=str(os.getpid()))
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def node(role, index=None):
    """The pid of this test's job process with DMLC_ROLE=role (and CDSGD_LAUNCH_INDEX=index)."""
    for pid in job_pids():
        try:
            env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if ("DMLC_ROLE=%s" % role).encode() in env and (
                index is None or ("CDSGD_LAUNCH_INDEX=%d" % index).encode() in env):
            return pid
    raise AssertionError("no %s process found" % role)


def read_until(proc, text, limit=90):
    lines, deadline = [], time.time() + limit
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError("%r never printed:\n%s" % (text, "".join(lines[-30:])))


def stop_and_finish(proc, pid):
    os.kill(pid, signal.SIGSTOP)
    stopped = time.time()
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out, time.time() - stopped


@pytest.mark.parametrize("role,index", [("worker", 1), ("server", 0), ("scheduler", None)])
def test_a_stopped_node_ends_the_job_naming_it(role, index):
    proc = start("none", *STALL)
    read_until(proc, "step 10")
    rc, out, took = stop_and_finish(proc, node(role, index))
    label = role if index is None else "%s %d" % (role, index)
    assert rc == 75, out[-3000:]
    assert "launch | stall: %s (" % label in out and "no heartbeat for" in out
    assert "stopping the job (--stall-timeout 20 s)" in out
    assert "launch | warning: " in out  # warned before it stopped
    assert took < 40
    assert_job_gone()


def test_a_scheduler_stopped_at_the_exit_barrier_ends_the_job():
    proc = start("finish", *STALL, steps=20)
    read_until(proc, "training done")
    rc, out, took = stop_and_finish(proc, node("scheduler"))
    assert rc == 75, out[-3000:]
    assert "launch | stall: scheduler (" in out
    assert took < 40
    assert_job_gone()


def test_a_worker_stopped_at_the_exit_barrier_ends_the_job():
    proc = start("finish", *STALL, steps=20)
    read_until(proc, "training done")
    rc, out, took = stop_and_finish(proc, node("worker", 0))
    assert rc == 75, out[-3000:]
    assert "launch | stall: worker 0 (" in out
    assert took < 40
    assert_job_gone()


def test_a_slow_but_live_step_does_not_trip_the_timeout():
    proc = start("sleep", *STALL, steps=15)
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, out[-3000:]
    assert "rank 0 step 14" in out and "rank 1 step 14" in out
    assert "stall:" not in out


def test_a_node_that_never_registers_ends_the_job_at_the_start_timeout():
    t0 = time.time()
    proc = start("late", *STALL)
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 75, out[-3000:]
    assert "launch | stall: worker 0 (" in out and "start-up: every node of the job to register" in out
    assert "missing: worker 1 (never reported" in out
    assert time.time() - t0 < 40
    assert_job_gone()


def test_uneven_steps_end_the_job_naming_the_ranks():
    t0 = time.time()
    proc = start("uneven", steps=40)  # the default stall timeout: uneven steps do not wait for it
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 75, out[-3000:]
    assert "uneven steps: worker 0 (rank" in out and "finished after 20 steps while worker 1 (rank" in out
    assert "is at step 21" in out
    assert "every worker of a synchronous job must take the same number of steps" in out
    assert time.time() - t0 < 60
    assert_job_gone()

"""A job that stalls ends: a stopped node is named and the job stops (issue 14, items 1 and 2)."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_faults import ROOT, WORKER, assert_job_gone, job_pids  # noqa: E402

pytestmark = pytest.mark.slow
STALL = ["--stall-timeout", "20", "--start-timeout", "20"]


def start(fault, *launch_args, steps=100000, tag=""):
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "150", *launch_args,
           "--", sys.executable, WORKER, "--fault", fault, "--steps", str(steps)]
    env = dict(os.environ, CDSGD_FAULT_TEST=str(os.getpid()), CDSGD_STALL_JOB=tag)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def node(role, index=None, tag=None):
    """The pid of this test's job process with DMLC_ROLE=role (and CDSGD_LAUNCH_INDEX=index,
    and the job's tag)."""
    for pid in job_pids():
        try:
            env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if ("DMLC_ROLE=%s" % role).encode() in env and (
                index is None or ("CDSGD_LAUNCH_INDEX=%d" % index).encode() in env) and (
                tag is None or ("CDSGD_STALL_JOB=%s" % tag).encode() in env):
            return pid
    raise AssertionError("no %s process found" % role)


class Stop(threading.Thread):
    """One job that stops one of its nodes with SIGSTOP once it prints `when`: reads the job's
    output all along (a full pipe would hold up the launcher's own output, and its watchdog)."""

    def __init__(self, fault, when, role, index, steps=100000, delay=0.0):
        super().__init__(daemon=True)
        self.role, self.index, self.when, self.delay = role, index, when, delay
        self.tag = "%s-%s-%s" % (fault, role, index)
        self.proc = start(fault, "--stall-timeout", "20", "--start-timeout", "120", steps=steps, tag=self.tag)
        self.lines, self.stopped = [], None

    def run(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.stopped is None and self.when in line:
                time.sleep(self.delay)
                os.kill(node(self.role, self.index, self.tag), signal.SIGSTOP)
                self.stopped = time.time()
        self.proc.wait()
        self.ended = time.time()


def test_a_stopped_node_ends_the_job_naming_it():
    """A worker, the server and the scheduler stopped during training, the scheduler and a
    worker stopped at the end of training, and a worker stopped inside the exit barrier: six
    jobs at once (each mostly waits for its timeout)."""
    jobs = [Stop("none", "step 10", "worker", 1), Stop("none", "step 10", "server", 0),
            Stop("none", "step 10", "scheduler", None),
            Stop("finish", "training done", "scheduler", None, steps=20),
            Stop("finish", "training done", "worker", 0, steps=20),
            # inside the exit barrier: its exit beat is sent, the other worker arrives later
            Stop("exit", "worker 0 | training done", "worker", 0, steps=20, delay=3)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=200)
    for job in jobs:
        out = "".join(job.lines)
        label = job.role if job.index is None else "%s %d" % (job.role, job.index)
        assert job.stopped is not None, "%s: never stopped:\n%s" % (job.tag, out[-3000:])
        assert job.proc.returncode == 75, "%s:\n%s" % (job.tag, out[-3000:])
        assert "launch | stall: %s (" % label in out and "no heartbeat for" in out, "%s:\n%s" % (job.tag, out[-3000:])
        assert "stopping the job (--stall-timeout 20 s)" in out
        assert "launch | warning: %s (" % label in out  # warned before it stopped
        assert "(stopped: its process is in state T)" in out.split("launch | stall: ")[1]
        assert job.ended - job.stopped < 40, job.tag
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
    proc = start("uneven", "--max-restarts", "1", steps=40)  # the default stall timeout: uneven steps do not wait
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 1, out[-3000:]  # the script's bug: not a stall a restart could get past
    assert "uneven steps: worker 0 (rank" in out and "finished after 20 steps while worker 1 (rank" in out
    assert "is at step 21" in out
    assert "every worker of a synchronous job must take the same number of steps" in out
    assert "restart" not in out  # the same steps would come again
    assert time.time() - t0 < 60
    assert_job_gone()


def test_the_fault_benchmark_measures_a_stop():
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.faults", "--faults", "SIGSTOP scheduler",
                           "--stall-timeout", "6"], cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = proc.stdout.splitlines()[-1].split()
    assert row[:3] == ["SIGSTOP", "scheduler", "75"] and row[-1] == "True", proc.stdout
    assert 6 <= float(row[3]) < 20, proc.stdout  # the stall timeout, then the stopping

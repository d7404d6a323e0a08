"""A node watches itself (issue 30, item 1): a wait on the network past CDSGD_STALL_TIMEOUT ends
the node in one line naming what it waited for, under any launcher; a slow but live step never
trips it; cdsgd_mx.launch's own verdict comes first."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_stall import node, start  # noqa: E402
from test_faults import assert_job_gone  # noqa: E402

from cdsgd_mx.cluster import heartbeat  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_timeouts_come_from_the_environment_and_a_bad_one_stops_in_one_line():
    assert heartbeat.timeouts({}) == (600.0, 1800.0)
    assert heartbeat.timeouts({"CDSGD_STALL_TIMEOUT": "30", "CDSGD_START_TIMEOUT": "10"}) == (30.0, 30.0)
    assert heartbeat.timeouts({"CDSGD_STALL_TIMEOUT": "0", "CDSGD_START_TIMEOUT": "0"}) == (0.0, 0.0)
    for bad in ("ten", "-1", "nan", "inf"):
        with pytest.raises(SystemExit, match="CDSGD_STALL_TIMEOUT must be a number of seconds >= 0"):
            heartbeat.timeouts({"CDSGD_STALL_TIMEOUT": bad})


def test_only_a_wait_past_its_phases_timeout_counts():
    assert heartbeat.stalled_wait(limits=(5, 50)) is None  # no wait at all
    with heartbeat.waiting("step 7's pull of bucket 1 (key 9)"):
        now = time.monotonic()
        assert heartbeat.stalled_wait(now + 4, (5, 50)) is None
        heartbeat.set_phase("train")
        assert heartbeat.stalled_wait(now + 6, (5, 50))[::2] == ("step 7's pull of bucket 1 (key 9)",
                                                               "CDSGD_STALL_TIMEOUT")
        assert heartbeat.stalled_wait(now + 6, (0, 0)) is None  # 0: never
        heartbeat.set_phase("start")
        assert heartbeat.stalled_wait(now + 6, (5, 50)) is None  # starting: the start timeout
        assert heartbeat.stalled_wait(now + 51, (5, 50))[2:] == ("CDSGD_START_TIMEOUT", 50)


def node_process(body, **env):
    """A stand-in node (DMLC_ROLE=worker, no launcher) running body after its self-watch starts."""
    code = "import time\nfrom cdsgd_mx.cluster import heartbeat\nheartbeat.start()\nheartbeat.set_phase('train')\n" + body
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("CDSGD_", "DMLC_"))}
    run_env.update(DMLC_ROLE="worker", **env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=run_env, capture_output=True, text=True,
                          timeout=60)


def test_a_node_that_waits_too_long_exits_in_one_line_naming_the_wait():
    t0 = time.time()
    proc = node_process("with heartbeat.waiting(\"step 3's pull of bucket 0 (key 4)\"):\n    time.sleep(30)\n",
                        CDSGD_STALL_TIMEOUT="1")
    assert proc.returncode == heartbeat.EXIT_STALL == 75
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("cdsgd_mx worker: stalled: waited ")
    assert lines[0].endswith("s for step 3's pull of bucket 0 (key 4) (CDSGD_STALL_TIMEOUT=1 s); exiting")
    assert time.time() - t0 < 15


def test_a_slow_step_outside_any_wait_and_short_waits_do_not_trip_it():
    proc = node_process("time.sleep(3)\nfor _ in range(4):\n    with heartbeat.waiting('a round'):\n"
                        "        time.sleep(0.5)\nprint('done')\n", CDSGD_STALL_TIMEOUT="1")
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr


def test_a_bad_timeout_stops_the_node_before_anything_else():
    proc = node_process("print('ran')\n", CDSGD_STALL_TIMEOUT="10m")
    assert proc.returncode != 0 and "ran" not in proc.stdout and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "cdsgd_mx worker: CDSGD_STALL_TIMEOUT must be a number of seconds >= 0 (0: never), " \
                                  "got '10m'"


def watch_job(launch_args, tag):
    """A 2-worker job under cdsgd_mx.launch with launch_args; worker 1 is stopped (SIGSTOP) once
    step 10 is printed. Returns (exit code, output, seconds from the stop to the end, worker 0's
    environment as the launcher gave it)."""
    proc = start("none", *launch_args, tag=tag)
    lines, stopped, env = [], None, None
    for line in proc.stdout:
        lines.append(line)
        if stopped is None and "step 10" in line:
            env = open("/proc/%d/environ" % node("worker", 0, tag), "rb").read().split(b"\0")
            os.kill(node("worker", 1, tag), signal.SIGSTOP)
            stopped = time.time()
    proc.wait(timeout=200)
    assert stopped is not None, "".join(lines)[-3000:]
    return proc.returncode, "".join(lines), time.time() - stopped, env


@pytest.mark.slow
def test_a_worker_waiting_on_a_hung_one_ends_the_job_without_the_launchers_watch():
    """The launcher's watch off (as under a launcher that has none): worker 0, waiting for the
    round that stopped worker 1 never pushes, ends itself, and the job with it."""
    code, out, took, env = watch_job(["--stall-timeout", "0", "--env", "CDSGD_STALL_TIMEOUT=4"], "self")
    assert b"CDSGD_STALL_TIMEOUT=4" in env
    assert code == 75, out[-3000:]
    assert "worker 0 | cdsgd_mx worker 0 (rank " in out and "): stalled: waited " in out, out[-3000:]
    assert re.match(r"\d+ s for step \d+'s pull of bucket \d+ \(key \d+, server 0\) \(CDSGD_STALL_TIMEOUT=4 s\); "
                    r"exiting$",
                    out.split("stalled: waited ")[1].splitlines()[0]), out[-3000:]
    assert "worker 0 exited with" in out and "launch | stall:" not in out
    assert took < 40
    assert_job_gone()


@pytest.mark.slow
def test_the_launchers_verdict_comes_before_the_nodes_own():
    code, out, took, env = watch_job(["--stall-timeout", "6", "--start-timeout", "120"], "both")
    assert b"CDSGD_STALL_TIMEOUT=66" in env and b"CDSGD_START_TIMEOUT=180" in env  # a minute behind
    assert code == 75 and "launch | stall: worker 1 (" in out, out[-3000:]
    assert "stalled: waited" not in out  # no node gave up on its own first
    assert took < 40
    assert_job_gone()

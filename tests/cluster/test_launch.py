"""The launcher: prefixes, exit codes, timeouts, cleanup, argument errors."""
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH = [sys.executable, "-m", "cdsgd_mx.launch"]


def run(args, timeout=90):
    return subprocess.run(LAUNCH + args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def worker_code(body, create="mx.kv.create('dist_sync')"):
    return [sys.executable, "-c", "import os, sys, time, mxnet as mx, cdsgd_mx\nkv = %s\n" % create + body]


@pytest.mark.slow
def test_prefixes_each_line_with_role_and_index():
    proc = run(["-n", "2", "-s", "1", "--"] + worker_code("print('hello from rank', kv.rank, flush=True)"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [l for l in proc.stdout.splitlines() if "hello from rank" in l]
    assert sorted(l.split(" | ")[0] for l in lines) == ["worker 0", "worker 1"]
    assert sorted(l.split()[-1] for l in lines) == ["0", "1"]


@pytest.mark.slow
def test_failing_worker_makes_the_launcher_fail_and_stops_everyone():
    body = "if kv.rank == 1:\n    raise RuntimeError('boom')\ntime.sleep(60)\n"
    start = time.time()
    proc = run(["-n", "2", "-s", "1", "--"] + worker_code(body, create="cdsgd_mx.CDSGD(kvstore='dist_sync')"))
    assert proc.returncode != 0
    assert "RuntimeError: boom" in proc.stdout
    assert "exited with code" in proc.stdout
    assert time.time() - start < 45  # not the survivor's 60 s sleep


@pytest.mark.slow
def test_timeout_kills_the_job_and_children():
    marker = "cdsgd-launch-timeout-%d" % os.getpid()
    body = "import subprocess\nsubprocess.Popen(['sleep', '300', '%s'.replace('x', '')])\ntime.sleep(300)\n" % marker
    body = body.replace("['sleep', '300', '%s'.replace('x', '')]" % marker, "['bash', '-c', 'exec -a %s sleep 300']" % marker)
    proc = run(["-n", "1", "-s", "1", "--timeout", "8", "--"] + worker_code(body))
    assert proc.returncode == 124
    assert "timeout after 8s" in proc.stdout
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], "processes left behind: %s" % left


@pytest.mark.parametrize("args,message", [
    (["-n", "0", "-s", "1", "--", "true"], "-n/--num-workers must be >= 1"),
    (["-n", "1", "-s", "0", "--", "true"], "-s/--num-servers must be >= 1"),
    (["-n", "1", "-s", "1"], "no COMMAND given"),
    (["-n", "1", "-s", "1", "--bandwidth", "fast", "--", "true"], "--bandwidth must be a tc rate"),
    (["-n", "1", "-s", "1", "--timeout", "-1", "--", "true"], "--timeout must be >= 0"),
])
def test_bad_arguments(args, message):
    proc = run(args, timeout=30)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_taken_port_is_named_before_anything_starts():
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:  # another job's scheduler
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        start = time.time()
        proc = run(["-n", "1", "-s", "1", "--port", str(port), "--"] + worker_code("print('ran')"), timeout=30)
    assert proc.returncode != 0 and "ran" not in proc.stdout
    assert "--port %d is taken on 127.0.0.1" % port in proc.stderr
    assert "Traceback" not in proc.stderr and time.time() - start < 10


def _launch_with_first_port(port, args):
    """The launcher, its first pick of a scheduler port made `port` and its check of --port
    blind: the race in which another process takes the port between the pick and the bind."""
    code = ("import sys\nfrom cdsgd_mx.cluster import launch\npicks = [%d]\nreal = launch.free_port\n"
            "launch.free_port = lambda host: picks.pop() if picks else real(host)\n"
            "launch.port_taken = lambda host, port: False\nsys.exit(launch.main(sys.argv[1:]))\n" % port)
    return subprocess.run([sys.executable, "-c", code] + args, cwd=ROOT, capture_output=True, text=True, timeout=90)


@pytest.mark.parametrize("given", [False, True], ids=["picked", "--port"])
def test_a_port_taken_before_the_scheduler_binds_it(given):
    """Picked by the launcher: the job starts again on another port and runs; given with --port:
    the job stops naming it, without a traceback."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:  # another job's scheduler, come in between
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = _launch_with_first_port(port, ["-n", "1", "-s", "1"] + (["--port", str(port)] if given else []) +
                                       ["--"] + worker_code("print('ran', flush=True)"))
    out = proc.stdout + proc.stderr
    if given:
        assert proc.returncode != 0 and "ran" not in proc.stdout, out
        assert "--port %d was taken before the scheduler could bind it" % port in proc.stdout, out
    else:
        assert proc.returncode == 0, out
        assert "the scheduler's port %d was taken before the scheduler could bind it" % port in proc.stdout
        assert "starting the job again on another port" in proc.stdout
        assert "worker 0 | ran" in proc.stdout
    assert "Traceback" not in out


def _netns_allowed():
    import shutil
    if not all(shutil.which(t) for t in ("unshare", "ip", "tc")):
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


@pytest.mark.slow
def test_bandwidth_shapes_the_link():
    if not _netns_allowed():
        pytest.skip("cannot create a network namespace here (needs root or user namespaces, iproute2)")
    # 2 MB pushed and pulled by one worker: about 0.3 s at 100 Mbit/s, milliseconds unshaped
    body = ("kv.init(0, mx.nd.zeros(500000))\nout = mx.nd.zeros(500000)\nkv.pull(0, out=out); out.wait_to_read()\n"
            "t0 = time.time()\nkv.push(0, mx.nd.ones(500000)); kv.pull(0, out=out); out.wait_to_read()\n"
            "print('round', time.time() - t0, flush=True)\n")
    times = {}
    for rate in ("100mbit", None):
        args = ["-n", "1", "-s", "1"] + (["--bandwidth", rate] if rate else []) + ["--"] + worker_code(body)
        proc = run(args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        times[rate] = float([l for l in proc.stdout.splitlines() if "round" in l][0].split()[-1])
    assert times["100mbit"] > 0.25 > times[None] * 3, times

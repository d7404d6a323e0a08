"""Under MXNet's own launcher (tools/launch.py as the wheel ships it, through
cdsgd_mx.mxnet_launch), a script whose only change is `import cdsgd_mx` first runs our servers
and scheduler and trains to the simulation's weights (issue 30, items 2 and 5; --launcher
local here, ssh where an sshd is installed is left to issue 30)."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker.test_engine import BOUND, CFG, K, STEPS, T, WARMUP, sim  # noqa: E402
from workers.engine_worker import SHAPES  # noqa: E402

from cdsgd_mx.wire import auth  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "workers" / "tracker_worker.py"
pytestmark = pytest.mark.slow


def job_files(tmp_path):
    """The job's secret file (owner-only), its output folder and the engine worker's arguments."""
    secret = tmp_path / "secret"
    secret.write_text(auth.new_secret())
    secret.chmod(stat.S_IRUSR | stat.S_IWUSR)
    out = tmp_path / "out"
    args = ["--out", str(out), "--config", json.dumps(CFG), "--algorithm", "cdsgd", "--steps", str(STEPS),
            "--warmup", str(WARMUP), "--k", str(K), "--threshold", str(T)]
    return secret, out, args


def assert_simulated(out):
    """Both ranks' x and W equal the simulation's CD-SGD."""
    xs, W = sim("cdsgd", 2)
    for r in range(2):
        got = np.load(out / ("rank%d.npz" % r))
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)


def test_the_first_import_makes_mxnets_launcher_run_our_nodes(tmp_path):
    secret, out, args = job_files(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDSGD_", "DMLC_"))}
    env.update(CDSGD_SECRET_FILE=str(secret), MXNET_KVSTORE_BIGARRAY_BOUND=str(BOUND), DMLC_INTERFACE="lo",
               CDSGD_STALL_TIMEOUT="60", ENGINE_WORKER_ARGS=json.dumps(args))
    cmd = [sys.executable, "-m", "cdsgd_mx.mxnet_launch", "--launcher", "local", "-n", "2", "-s", "2",
           sys.executable, str(WORKER)]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_simulated(out)


def test_a_scheduler_port_taken_after_the_trackers_pick_starts_the_job_again(tmp_path):
    """Another process binds the scheduler's port after the tracker chose it and before the
    scheduler binds it (in CI: another job's scheduler, which MXNet's tracker had given the same
    lowest free port; that job's nodes then joined the other's scheduler and both failed). Our
    scheduler exits 76; the job starts again on another port and trains to the simulation."""
    secret, out, args = job_files(tmp_path)
    holder = "import socket, sys, time; s = socket.socket(); s.bind(('', int(sys.argv[1]))); s.listen(1); " \
             "open('held', 'w').close(); time.sleep(60)"
    run = tmp_path / "run.sh"  # the first scheduler finds its port taken: the race, made certain
    run.write_text(
        "if [ \"$DMLC_ROLE\" = scheduler ] && mkdir first_scheduler 2>/dev/null; then\n"
        "  %(py)s -c \"%(holder)s\" $DMLC_PS_ROOT_PORT & held=$!\n"
        "  echo \"port $DMLC_PS_ROOT_PORT held\"; while [ ! -e held ]; do sleep 0.1; done\n"
        "  %(py)s %(worker)s; rc=$?; kill $held; exit $rc\n"
        "fi\nexec %(py)s %(worker)s\n" % dict(py=sys.executable, holder=holder, worker=WORKER))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDSGD_", "DMLC_"))}
    env.update(CDSGD_SECRET_FILE=str(secret), MXNET_KVSTORE_BIGARRAY_BOUND=str(BOUND), DMLC_INTERFACE="lo",
               CDSGD_STALL_TIMEOUT="60", ENGINE_WORKER_ARGS=json.dumps(args))
    cmd = [sys.executable, "-m", "cdsgd_mx.mxnet_launch", "--launcher", "local", "-n", "2", "-s", "1", "bash", str(run)]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    held = [line.split()[1] for line in text.splitlines() if line.startswith("port ") and line.endswith(" held")]
    assert len(held) == 1, text[-3000:]
    assert ("the scheduler's port %s was taken before the scheduler could bind it (another job's?): "
            "starting the job again on another port" % held[0]) in text, text[-3000:]
    assert_simulated(out)


def test_the_schedulers_port_is_drawn_from_the_trackers_range_and_free():
    """MXNet's tracker takes the lowest free port from 9091, the same for two jobs started
    together; ours draws one at random from the same range, and never a taken one."""
    import random
    import socket
    from cdsgd_mx.cluster.launch import free_port_in
    from cdsgd_mx.cluster.mxnet_launch import TRACKER_PORTS
    rng = random.Random(5)
    drawn = {free_port_in("", TRACKER_PORTS, rng=rng) for _ in range(20)}
    assert len(drawn) > 15 and all(p in TRACKER_PORTS for p in drawn), drawn
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("", random.Random(7).choice(TRACKER_PORTS)))
        busy.listen(1)
        taken = busy.getsockname()[1]
        assert free_port_in("", TRACKER_PORTS, rng=random.Random(7)) not in (taken, None)


def test_a_failing_worker_ends_the_job_under_mxnets_launcher_with_a_failure(tmp_path):
    """tools/launch.py --launcher local with workers that raise: before issue 39 the scheduler and
    servers kept running until killed by hand and the launcher then exited 0. Now the first
    failure stops every other node, the command exits non-zero naming it, and nothing is left."""
    secret, _, _ = job_files(tmp_path)
    marker = "raising-%d" % os.getpid()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDSGD_", "DMLC_"))}
    env.update(CDSGD_SECRET_FILE=str(secret), DMLC_INTERFACE="lo", CDSGD_STALL_TIMEOUT="60", JOB_MARKER=marker)
    cmd = [sys.executable, "-m", "cdsgd_mx.mxnet_launch", "--launcher", "local", "-n", "2", "-s", "1",
           sys.executable, str(ROOT / "tests" / "workers" / "raising_worker.py")]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "fails on purpose" in out and "cdsgd_mx.mxnet_launch: the job failed: a worker exited with" in out, out[-3000:]
    left = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if ("JOB_MARKER=" + marker).encode() in open("/proc/%s/environ" % pid, "rb").read():
                    left.append(pid)
            except OSError:
                pass
    assert not left, "processes of the job still running: %s" % left


def test_a_worker_that_failed_on_its_own_is_named_though_its_server_was_seen_first(capsys):
    """Each node is waited for in its own thread; under load the server that lost a raising
    worker can be seen to exit first. The worker's own failure, seen after the stop began, is
    kept (a node our stop ended is not), and the verdict names workers first."""
    from cdsgd_mx.cluster import mxnet_launch

    class Node:
        def __init__(self, role):
            self.role, self.pid = role, 2 ** 22 + 1  # no such process: the stop's signals go nowhere

        def poll(self):
            return 1
    nodes = mxnet_launch.Nodes()
    server, worker, other = Node("server"), Node("worker"), Node("worker")
    nodes.procs = [server, worker, other]
    nodes.fail(server, 1)
    nodes.fail(other, -15)   # ended by our stop
    nodes.fail(worker, 1)    # its own error, reaped after the server
    assert nodes.failed == [("server", 1), ("worker", 1)]
    assert "a server exited with 1: stopping the job's other 0 process(es)" in capsys.readouterr().err
    assert mxnet_launch.verdict(nodes.failed) == ("cdsgd_mx.mxnet_launch: the job failed: a worker exited with 1, "
                                                  "a server exited with 1 (its output is above)")


def test_a_node_is_named_by_its_role_and_once():
    """--launcher ssh starts each node as `ssh HOST 'export DMLC_ROLE=worker; ...'` with no env
    of its own: before, every such node that failed was named a scheduler. subprocess.check_call
    waits for a node twice (once, and on leaving its with-block): before, the verdict named a
    failed node twice."""
    from cdsgd_mx.cluster import mxnet_launch
    ssh = "ssh -o StrictHostKeyChecking=no 10.0.0.2 -p 22 'export DMLC_NUM_WORKER=2; export DMLC_ROLE=server; cd /x; bash run.sh'"
    assert mxnet_launch.role_of((ssh,), {}) == "server"
    assert mxnet_launch.role_of(("bash run.sh",), {"env": {"DMLC_ROLE": "scheduler"}}) == "scheduler"
    assert mxnet_launch.role_of(([sys.executable, "w.py"],), {"env": {"DMLC_ROLE": "worker"}}) == "worker"
    nodes = mxnet_launch.Nodes()
    failing = [sys.executable, "-c", "import sys; sys.exit(3)", "DMLC_ROLE=worker"]
    assert subprocess.call(failing) == 3  # (through the real Popen: nothing recorded)
    real = subprocess.Popen
    subprocess.Popen = nodes.popen(real)
    try:
        with pytest.raises(subprocess.CalledProcessError):
            subprocess.check_call(failing)
    finally:
        subprocess.Popen = real
    assert nodes.failed == [("worker", 3)]

"""The server obeys only its own job: nothing from the network is unpickled, commands act only
with the job's MAC, and the job's secret leaks nowhere (issue 15)."""
import json
import os
import pickle
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import outsider  # noqa: E402
from simulate import simulate  # noqa: E402
from workers.engine_worker import SHAPES, grad_fn, init_value  # noqa: E402

from cdsgd_mx import auth  # noqa: E402
from cdsgd_mx.server import COMMAND_PREFIX, ServerState  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "workers" / "engine_worker.py"
CFG = {"lr": 0.25, "momentum": 0.5, "local_lr": 0.5, "batch": 4}
STEPS, WARMUP, K, T = 8, 2, 3, 0.5


class _Creates:
    """Unpickling this creates a file: what a pickle from the network could do."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


# ---- the server's handler, in process -------------------------------------------------------

def _signed(secret, msg):
    body = json.dumps(msg)
    return COMMAND_PREFIX + auth.mac(secret, "command", body) + ":" + body


def test_the_server_acts_only_on_commands_with_the_jobs_mac_and_a_new_sequence(tmp_path, capsys):
    import mxnet as mx
    secret, other = auth.new_secret().encode(), auth.new_secret().encode()
    s = ServerState(secret=secret)
    s.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
    target = tmp_path / "created"
    s.receive(0, pickle.dumps(_Creates(str(target)), protocol=0))          # MXNet's own optimizer command
    s.receive(0, COMMAND_PREFIX + json.dumps({"op": "set_lr", "lr": 9.0}))  # the old unsigned format
    s.receive(0, _signed(other, {"seq": 1, "op": "set_lr", "lr": 9.0}))     # another job's secret
    s.receive(2, _signed(secret, {"seq": 1, "op": "set_lr", "lr": 9.0}))    # not the controller id
    assert not target.exists() and s.optimizer.learning_rate == 0.5 and s.dropped == 4
    s.receive(0, _signed(secret, {"seq": 1, "op": "set_lr", "lr": 0.125}))
    assert s.optimizer.learning_rate == 0.125 and s.dropped == 4
    s.receive(0, _signed(secret, {"seq": 1, "op": "set_lr", "lr": 9.0}))    # a replay
    tampered = _signed(secret, {"seq": 2, "op": "set_lr", "lr": 0.25}).replace("0.25", "9.00")
    s.receive(0, tampered)
    assert s.optimizer.learning_rate == 0.125 and s.dropped == 6
    err = capsys.readouterr().err
    assert "dropped message 6: a command without the job's MAC" in err and "a replayed command" in err


def test_the_handshake_answer_names_the_workers_whose_tag_fails():
    secret = auth.new_secret().encode()
    s = ServerState(secret=secret)
    rows = np.stack([auth.tag(secret, "handshake", 0, 77), auth.tag(b"other", "handshake", 1, 77),
                     auth.tag(secret, "handshake", 2, 78)])  # rank 2 signed another key
    answer = s.handshake_answer(77, rows)
    assert answer[:, 0].tolist() == [1.0, -1.0, -1.0] and (answer[:, 1] == -7.0).all()


def test_tags_survive_the_servers_float_sum():
    """A tag in one row plus zeros from every other worker's push stays bit-exact."""
    secret = auth.new_secret().encode()
    t = auth.tag(secret, "handshake", 3, 5)
    assert t.dtype == np.float32 and (t == np.round(t)).all() and t.max() < 65536
    assert auth.tag_matches(secret, (t + np.float32(0)) + np.zeros_like(t), "handshake", 3, 5)
    assert not auth.tag_matches(secret, t, "handshake", 2, 5)


# ---- a real job and a process outside it ----------------------------------------------------

def _job_pids(marker):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if ("CDSGD_SECURITY_TEST=%s" % marker).encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def _server_pid(pids):
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read()
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read()
        except OSError:
            continue
        if b"cdsgd_mx.server" in cmd and b"DMLC_ROLE=server" in env:
            return pid
    raise AssertionError("no server process found")


def _others_readable_files_since(start, roots):
    """Files changed since `start` under roots that users other than their owner can read."""
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__", "node_modules")]
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_mtime >= start and st.st_mode & stat.S_IROTH \
                        and st.st_size < 50 * 1024 * 1024:
                    yield path


@pytest.mark.slow
def test_messages_from_outside_the_job_change_nothing_and_the_secret_leaks_nowhere(tmp_path):
    marker = "%d-%d" % (os.getpid(), time.time_ns())
    go = tmp_path / "go"
    target = tmp_path / "created-by-a-pickle"
    cfg = dict(CFG, pause_at=[4, str(go)])
    start = time.time() - 1
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "150",
           "--env", "CDSGD_SECURITY_TEST=" + marker, "--", sys.executable, str(WORKER), "--out", str(tmp_path / "out"),
           "--config", json.dumps(cfg), "--algorithm", "cdsgd", "--steps", str(STEPS), "--warmup", str(WARMUP),
           "--k", str(K), "--threshold", str(T)]
    job = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while not all(os.path.exists("%s.paused%d" % (go, r)) for r in range(2)):
            assert job.poll() is None and time.time() < deadline, "the job ended or never paused"
            time.sleep(0.1)
        time.sleep(0.3)
        secret = open("%s.paused0" % go, "rb").read()
        assert secret and secret == open("%s.paused1" % go, "rb").read()

        # the secret is on no command line, in no environment, in no file others can read
        pids = _job_pids(marker)
        assert len(pids) >= 4, pids
        ps = subprocess.run(["ps", "-e", "-ww", "e", "-o", "pid,args"], capture_output=True).stdout
        assert ps and secret not in ps
        for pid in pids:
            for part in ("cmdline", "environ"):
                assert secret not in open("/proc/%d/%s" % (pid, part), "rb").read(), (pid, part)
        for path in _others_readable_files_since(start, [str(tmp_path), "/tmp", "/dev/shm", "/var/tmp", str(ROOT)]):
            with open(path, "rb") as f:
                assert secret not in f.read(), path

        # what a process outside the job sends while training is under way
        port = outsider.listening_ports(_server_pid(pids))[0]
        outsider.command(port, outsider.CONTROLLER, pickle.dumps(_Creates(str(target)), protocol=0))
        outsider.command(port, outsider.CONTROLLER, (COMMAND_PREFIX + json.dumps({"op": "set_lr", "lr": 100.0})).encode())
        forged = json.dumps({"op": "set_lr", "lr": 100.0, "seq": 10 ** 6})
        outsider.command(port, outsider.CONTROLLER, (COMMAND_PREFIX + "0" * 32 + ":" + forged).encode())
        outsider.raw_bytes(port, b"GET / HTTP/1.0\r\n\r\n" + os.urandom(64))
        time.sleep(1.0)
        go.write_text("go")
        out, _ = job.communicate(timeout=150)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 0, out[-4000:]
    assert not target.exists(), "a pickle from the network ran on the server"
    assert "dropped message 3: a command without the job's MAC" in out, out[-4000:]
    assert "dropped message 4" not in out, out[-4000:]
    assert "dropped message 1: not a cdsgd_mx command" in out
    # weights unchanged by it: the job trained exactly as the simulation says
    init = [init_value(i, s) for i, s in enumerate(SHAPES)]
    xs, W = simulate("cdsgd", 2, STEPS, WARMUP, K, T, init, grad_fn, CFG["lr"], CFG["momentum"], CFG["local_lr"],
                     CFG["batch"])
    for r in range(2):
        got = dict(np.load(tmp_path / "out" / ("rank%d.npz" % r)))
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)

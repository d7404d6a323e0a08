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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import outsider  # noqa: E402
from cdsgd_mx.experiments.simulation import simulate  # noqa: E402
from workers.engine_worker import SHAPES, grad_fn, init_value  # noqa: E402

from cdsgd_mx.wire import auth, protocol
from cdsgd_mx.worker import buckets  # noqa: E402
from cdsgd_mx.server.node import COMMAND_PREFIX, START_MESSAGE, ServerState  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
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

def _signed(keys, msg):
    """A command as rank 0 sends it: one MAC per server, each with that server's session key."""
    body = json.dumps(msg)
    return COMMAND_PREFIX + ",".join(auth.mac(k, "command", body) for k in keys) + ":" + body


def test_the_server_acts_only_on_commands_with_the_jobs_mac_and_a_new_sequence(tmp_path, capsys):
    import mxnet as mx
    secret, other = auth.new_secret().encode(), auth.new_secret().encode()
    s = ServerState(secret=secret)
    s.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
    target = tmp_path / "created"
    s.receive(0, pickle.dumps(_Creates(str(target)), protocol=0))          # MXNet's own optimizer command
    s.receive(0, COMMAND_PREFIX + json.dumps({"op": "set_lr", "lr": 9.0}))  # the old unsigned format
    s.receive(0, _signed([auth.session_key(other, s.nonce)], {"seq": 1, "op": "set_lr", "lr": 9.0}))  # another secret
    s.receive(0, _signed([secret], {"seq": 1, "op": "set_lr", "lr": 9.0}))  # the bare secret, not the session key
    s.receive(2, _signed([s.session], {"seq": 1, "op": "set_lr", "lr": 9.0}))  # not the controller id
    assert not target.exists() and s.optimizer.learning_rate == 0.5 and s.dropped == 5
    s.receive(0, _signed([s.session], {"seq": 1, "op": "set_lr", "lr": 0.125}))
    assert s.optimizer.learning_rate == 0.125 and s.dropped == 5
    s.receive(0, _signed([s.session], {"seq": 1, "op": "set_lr", "lr": 9.0}))  # a replay
    tampered = _signed([s.session], {"seq": 2, "op": "set_lr", "lr": 0.25}).replace("0.25", "9.00")
    s.receive(0, tampered)
    assert s.optimizer.learning_rate == 0.125 and s.dropped == 7
    err = capsys.readouterr().err
    assert "dropped message 7: a command without the job's MAC" in err and "a replayed command" in err


def test_the_handshake_answer_names_the_workers_whose_tag_fails():
    secret = auth.new_secret().encode()
    s = ServerState(secret=secret)
    rows = np.stack([auth.tag(secret, "handshake", 0, 77), auth.tag(b"other", "handshake", 1, 77),
                     auth.tag(secret, "handshake", 2, 78)])  # rank 2 signed another key
    answer = s.handshake_answer(77, rows)
    assert answer[:, 0].tolist() == [1.0, -1.0, -1.0] and (answer[:, 1] == -7.0).all()
    for r in range(3):  # every row carries the server's nonce, exact in float32: the workers' session key
        assert answer.dtype == np.float32 and auth.session_key(secret, answer[r, 2:]) == s.session


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


def _start_paused_job(tmp_path, marker, algorithm="cdsgd"):
    """A 2-worker, 1-server job whose workers wait before step 4 until tmp_path/go exists."""
    job, go = _launch_paused_job(tmp_path, marker, algorithm)
    _wait_paused(job, go)
    return job, go


def _launch_paused_job(tmp_path, marker, algorithm, launch_args=(), both_ways=False, extra=None):
    go = tmp_path / "go"
    cfg = dict(CFG, pause_at=[4, str(go)], **(BOTH_WAYS if both_ways else {}), **(extra or {}))
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "150", *launch_args,
           "--env", "CDSGD_SECURITY_TEST=" + marker, "--", sys.executable, str(WORKER), "--out", str(tmp_path / "out"),
           "--config", json.dumps(cfg), "--algorithm", algorithm, "--steps", str(STEPS), "--warmup", str(WARMUP),
           "--k", str(K), "--threshold", str(T)]
    return subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), go


def _wait_paused(job, go):
    deadline = time.time() + 120
    while not all(os.path.exists("%s.paused%d" % (go, r)) for r in range(2)):
        if job.poll() is not None or time.time() > deadline:
            job.kill()
            raise AssertionError("the job ended or never paused:\n" + job.communicate()[0][-3000:])
        time.sleep(0.1)
    time.sleep(0.3)


def _finish(job, go):
    go.write_text("go")
    try:
        return job.communicate(timeout=150)[0]
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()


@pytest.mark.slow
def test_messages_from_outside_the_job_change_nothing_and_the_secret_leaks_nowhere(tmp_path):
    marker = "%d-%d" % (os.getpid(), time.time_ns())
    target = tmp_path / "created-by-a-pickle"
    start = time.time() - 1
    job, go = _start_paused_job(tmp_path, marker)
    try:
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
        forged = json.dumps({"op": "set_lr", "lr": 100.0, "seq": 10 ** 6})
        outsider.commands(port, [(outsider.CONTROLLER, pickle.dumps(_Creates(str(target)), protocol=0)),
                                 (outsider.CONTROLLER, (COMMAND_PREFIX + json.dumps({"op": "set_lr", "lr": 100.0})).encode()),
                                 (outsider.CONTROLLER, (COMMAND_PREFIX + "0" * 32 + ":" + forged).encode()),
                                 (outsider.CONTROLLER, b"cdsgd:\xff\xfe:{}")])
        # fixed bytes, so that the run is repeatable: random ones can by chance read as a ZMTP/1.0
        # message ('G' is a 71-byte first frame, then length-prefixed frames) whose meta ps-lite
        # cannot parse, the limit of ps-lite tested below; zeros after that frame are a length 0,
        # which ZeroMQ refuses
        outsider.raw_bytes(port, b"GET / HTTP/1.0\r\n\r\n" + bytes(64))
        time.sleep(1.0)
    finally:
        out = _finish(job, go)
    assert job.returncode == 0, out[-4000:]
    assert not target.exists(), "a pickle from the network ran on the server"
    # each of the four is dropped and named; MXNet's server need not handle them in the order sent
    dropped = sorted(line.split("dropped message ", 1)[1] for line in out.splitlines() if "dropped message " in line)
    assert [d.split(":")[0] for d in dropped] == ["1", "2", "3", "4"], out[-4000:]
    reasons = sorted(d.split(": ", 1)[1].split(" (")[0] for d in dropped)
    assert reasons == ["a command without the job's MAC"] * 3 + ["not a cdsgd_mx command"], out[-4000:]
    _simulated_weights_equal(tmp_path, "cdsgd")  # weights unchanged by it: trained as the simulation says


@pytest.mark.slow
def test_a_zeromq_message_whose_meta_ps_lite_cannot_parse_stops_the_job_loudly(tmp_path):
    """A limit of ps-lite (van.cc:520 CHECKs the parse and aborts): the job must not go on or
    hang; the launcher names the server's end and stops every node, rc 1 (docs/failures.md)."""
    marker = "%d-%d" % (os.getpid(), time.time_ns())
    job, go = _start_paused_job(tmp_path, marker)
    try:
        port = outsider.listening_ports(_server_pid(_job_pids(marker)))[0]
        outsider.send(port, [b"\xff\xff\xff"])  # field 0x1fffff...: not a varint protobuf can end
        time.sleep(1.0)
    finally:
        out = _finish(job, go)
    assert job.returncode == 1, out[-4000:]
    assert "failed to parse string into protobuf" in out and "server 0 exited with signal SIGABRT" in out, out[-4000:]
    assert not _job_pids(marker), "a node of the job outlived it"


def _simulated_weights_equal(tmp_path, algorithm, both_ways=False):
    init = [init_value(i, s) for i, s in enumerate(SHAPES)]
    # both ways: the workers' buckets (these jobs keep MXNet's default bound)
    plan = buckets.plan([(i, a.size) for i, a in enumerate(init)], buckets.DEFAULT_BUCKET_SIZE, 2, 1, protocol.Keys(1))
    layout = [[(s.key, s.begin, s.end) for s in b.slots] for b in plan]
    pull = {"buckets": layout, "resync_every": BOTH_WAYS["resync_every"]}
    out = simulate(algorithm, 2, STEPS, WARMUP, K, T, init, grad_fn, CFG["lr"], CFG["momentum"], CFG["local_lr"],
                   CFG["batch"], pull=pull if both_ways else None)
    xs, W = out[:2]
    for r in range(2):
        got = dict(np.load(tmp_path / "out" / ("rank%d.npz" % r)))
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)
        if both_ways:  # the worker's V, and it is not W (the last step pulled codes)
            v = np.concatenate([out[2][i].reshape(-1)[b:e] for pieces in layout for i, b, e in pieces])
            np.testing.assert_allclose(got["v"], v, rtol=1e-5, atol=1e-5)
            w = np.concatenate([W[i].reshape(-1)[b:e] for pieces in layout for i, b, e in pieces])
            assert not np.allclose(v, w, rtol=1e-5, atol=1e-5)


FOREIGN_PUSHES = [("ssgd", "weights"), ("odsgd", "weights"), ("cdsgd", "weights"), ("bitsgd", "codes"),
                  ("cdsgd", "codes"), ("bitsgd", "codes-both-ways"), ("cdsgd", "codes-both-ways"),
                  ("cdsgd", "weights-both-ways"), ("cdsgd", "part"), ("cdsgd", "part-both-ways")]
# "-both-ways": step 4, the dropped round of "codes", pulls 2-bit codes; the dropped round of
# cdsgd's "weights" is step 5's correction, an fp32 round that both sides track (V += codes of W - V),
# which the workers send again sealed as tracked
BOTH_WAYS = {"pull": "2bit", "resync_every": 3}
# "part": cdsgd with parts of at most PART values (buckets.partition): the dense push goes to the
# bucket's first part, met by step 5's correction, whose other parts are applied: that part alone
# is sent again; "part-both-ways": the same in a tracked correction (2-bit pulls), sent again
# sealed as tracked, the server moving V once the bucket's last part is in
PART = 400


def first_part():
    """The first part of the one bucket these jobs have (2 workers, 1 server) with parts of PART."""
    plan = buckets.plan([(i, int(np.prod(s))) for i, s in enumerate(SHAPES)], buckets.DEFAULT_BUCKET_SIZE, 2, 1,
                        protocol.Keys(1), part_size=PART)
    assert len(plan) == 1 and len(plan[0].parts) > 1
    return plan[0].parts[0]
MXNET_STOP = ("cdsgd", "mxnet-stop")  # MXNet's own stop command, sent to a job with a stall timeout
STOP_LAUNCH = ("--stall-timeout", "20", "--max-restarts", "1")


@pytest.fixture(scope="module")
def foreign_push_jobs(tmp_path_factory):
    """One paused job per case of FOREIGN_PUSHES and MXNET_STOP, run side by side; the outsider
    pushes to each (or sends MXNet's stop command) while it is paused. Returns {case:
    (returncode, output, out dir)}."""
    from cdsgd_mx import codec
    n = sum(int(np.prod(s)) for s in SHAPES)  # one bucket on one server: weight key 0, payload key 1
    jobs = {}
    try:
        for algorithm, target in FOREIGN_PUSHES + [MXNET_STOP]:
            tmp = tmp_path_factory.mktemp("%s-%s" % (algorithm, target))
            marker = "%d-%d-%s-%s" % (os.getpid(), time.time_ns(), algorithm, target)
            parts = ("--env", "CDSGD_PART_SIZE=%d" % PART, "--env", "CDSGD_PARTS=parts")  # (pushed to: a part's key)
            launch = STOP_LAUNCH if target == "mxnet-stop" else parts if target.startswith("part") else ()
            job, go = _launch_paused_job(tmp, marker, algorithm, launch, both_ways=target.endswith("both-ways"))
            jobs[(algorithm, target)] = (job, go, marker, tmp)
        for (algorithm, target), (job, go, marker, tmp) in jobs.items():
            _wait_paused(job, go)
            port = outsider.listening_ports(_server_pid(_job_pids(marker)))[0]
            if target == "mxnet-stop":
                outsider.command(port, outsider.STOP_SERVER, b"")
            elif target.startswith("part"):
                part = first_part()
                outsider.push(port, part.weight_key, np.concatenate([np.full(part.size, 100.0, np.float32),
                                                                     np.ones(2 * auth.TAG_FLOATS, np.float32)]))
            elif target.startswith("weights"):
                outsider.push(port, 0, np.concatenate([np.full(n, 100.0, np.float32),
                                                       np.ones(2 * auth.TAG_FLOATS, np.float32)]))
            else:  # worker 0's row, wire floats (>= 1: a valid code; both ways: the pull flag, 2-bit) and a wrong tag
                width = codec.packed_size(n) + (1 if target.endswith("both-ways") else 0) + auth.TAG_FLOATS
                outsider.push_rows(port, 1, [0], np.full(width, 2.0, np.float32))
        time.sleep(0.5)
        for job, go, _, _ in jobs.values():  # every job goes on at once
            go.write_text("go")
        return {case: (job, job.communicate(timeout=200)[0], tmp) for case, (job, _, _, tmp) in jobs.items()}
    finally:
        for job, _, _, _ in jobs.values():
            if job.poll() is None:
                job.kill()
                job.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,target", FOREIGN_PUSHES)
def test_a_push_from_outside_the_job_is_never_applied_and_training_goes_on(foreign_push_jobs, algorithm, target):
    """MXNet's server counts the outsider's push into the key's round before any Python code
    runs, so the round closes one push early: the server must not apply it (no proof from one
    worker), and the workers must send the dropped round again, so that the job trains exactly
    as without the outsider. 'weights': a dense push to the bucket's weight key, met by the next
    fp32 round (ssgd: synchronous; odsgd and cdsgd's correction step: delayed, the gradient
    kept while W is pulled over it); 'codes': a row_sparse push to its payload key, met by the
    next 2-bit round (bitsgd synchronous, cdsgd delayed); 'codes-both-ways': the same, in a round
    that pulls 2-bit codes: the decode already issued behind the first pull must leave V alone
    (the server's count did not move), the one behind the resent pull applies it, once;
    'weights-both-ways': a tracked correction (2-bit pulls) dropped and sent again, sealed as
    tracked, and V moved by its codes once; 'part': with parts (buckets.partition), a dense push
    to the bucket's first part key, met by the next correction: that part is sent again, its W
    copied into the bucket's comm_buf once more ('part-both-ways': in a tracked correction, V
    moved once, when the bucket's last part was in).
    Slow: the module's fixture runs every case's paused job side by side (11 jobs of 3 nodes,
    60-100 s on 2 cores), paid by whichever case runs first."""
    job, out, tmp_path = foreign_push_jobs[(algorithm, target)]
    assert job.returncode == 0, out[-4000:]
    # the server names what it dropped: a round without a worker's proof, or (the outsider's row
    # summed into the same worker's row) a payload round missing a worker's row
    dropped = [line for line in out.splitlines() if "dropped message 1: " in line]
    named = "key 0 without the job's proof" if target.startswith("weights") else "payload key 1 " if \
        target.startswith("codes") else "key %d without the job's proof" % first_part().weight_key
    assert len(dropped) == 1 and named in dropped[0], out[-4000:]
    assert "dropped message 2" not in out, out[-4000:]
    assert "sending it again" in out, out[-4000:]
    assert "server 0 exited" not in out and "cdsgd_mx server error" not in out, out[-4000:]
    # the outsider's values reached no weight, no step was lost (and with both ways, V took every round once)
    _simulated_weights_equal(tmp_path, algorithm, both_ways=target.endswith("both-ways"))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ssgd", "cdsgd"])
def test_a_row_from_outside_the_job_is_never_applied_and_the_round_is_sent_again(tmp_path, algorithm):
    """fp32_sum='rank' (issue 41): a row pushed to a bucket's rows key from outside the job takes
    a place in the key's next round (ssgd: step 4's, synchronous; cdsgd: step 5's correction,
    delayed): the server drops it (a rank's row missing, or a row without its proof, whichever
    worker came first) and the workers send the round again; the job trains as without it."""
    marker = "%d-%d-rows-%s" % (os.getpid(), time.time_ns(), algorithm)
    job, go = _launch_paused_job(tmp_path, marker, algorithm, extra={"fp32_sum": "rank"})
    try:
        _wait_paused(job, go)
        n = sum(int(np.prod(s)) for s in SHAPES)  # one bucket, one server: weight key 0, payload key 1, rows key 2
        port = outsider.listening_ports(_server_pid(_job_pids(marker)))[0]
        outsider.push_rows(port, 2, [0], np.concatenate([np.full(n, 100.0, np.float32),
                                                         np.ones(2 * auth.TAG_FLOATS, np.float32)]))
        time.sleep(0.5)
    finally:
        out = _finish(job, go)
    assert job.returncode == 0, out[-4000:]
    dropped = [line for line in out.splitlines() if "dropped message 1: " in line]
    assert len(dropped) == 1 and ("rows key 2 " in dropped[0] or "key 0 without the job's proof" in dropped[0]), \
        out[-4000:]
    assert "dropped message 2" not in out and "sending it again" in out, out[-4000:]
    assert "server 0 exited" not in out and "cdsgd_mx server error" not in out, out[-4000:]
    _simulated_weights_equal(tmp_path, algorithm)


@pytest.mark.slow
def test_mxnets_stop_command_from_outside_stops_the_job_loudly_and_a_restart_finishes_it(foreign_push_jobs):
    """MXNet's C++ server ends its loop on command id 2 before any project code sees it (a limit
    of MXNet's transport): the job must not hang. The workers' heartbeats say they wait for the
    server, so the launcher stops the job at the stall timeout, naming the server, and with
    --max-restarts starts it again; it ends rc 0 with the simulation's weights."""
    job, out, tmp_path = foreign_push_jobs[MXNET_STOP]
    assert job.returncode == 0, out[-4000:]
    stall = [line for line in out.splitlines() if line.startswith("launch | stall: ")]
    assert len(stall) == 1 and "server 0 (stuck inside MXNet?)" in stall[0] and "--stall-timeout 20 s" in stall[0], \
        out[-4000:]
    assert "launch | restart 1 of 1: stall: " in out, out[-4000:]
    _simulated_weights_equal(tmp_path, MXNET_STOP[0])


# ---- where the secret comes from --------------------------------------------------------------

def test_a_node_without_a_secret_or_with_a_readable_file_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(auth.SECRET_FD, raising=False)
    monkeypatch.delenv(auth.SECRET_FILE, raising=False)
    with pytest.raises(auth.SecretError, match="no job secret: start the job with `python -m cdsgd_mx.launch`"):
        auth._read_secret()
    path = tmp_path / "secret"
    path.write_text("abc123")
    path.chmod(0o644)
    monkeypatch.setenv(auth.SECRET_FILE, str(path))
    with pytest.raises(auth.SecretError, match="can be read by other users .mode 644.: chmod 600"):
        auth._read_secret()
    path.chmod(0o600)
    assert auth._read_secret() == b"abc123"
    r, w = os.pipe()
    os.write(w, b"from-the-launcher\n")
    os.close(w)
    monkeypatch.setenv(auth.SECRET_FD, str(r))
    assert auth._read_secret() == b"from-the-launcher" and auth.SECRET_FD not in os.environ


TRAIN_ONE_STEP = ("import mxnet as mx, cdsgd_mx\n"
                  "params = mx.gluon.ParameterDict(); p = params.get('w', shape=(3,)); params.initialize()\n"
                  "tr = cdsgd_mx.Trainer(params, 'sgd', {'learning_rate': 0.1})\n"
                  "with mx.autograd.record():\n    loss = (p.data() * 2).sum()\n"
                  "loss.backward(); tr.step(1); tr.wait_all(); print('TRAINED', flush=True)\n")


@pytest.mark.slow
@pytest.mark.parametrize("odd_one,expected", [("worker1", "holds another job secret than worker rank "),
                                              ("server", "holds another job secret than every worker")])
def test_nodes_with_different_secrets_stop_at_start_up(tmp_path, odd_one, expected):
    """Nodes started one by one, as MXNet's tools/launch.py does, each with CDSGD_SECRET_FILE."""
    from cdsgd_mx.cluster.launch import free_port
    files = {}
    for name, text in (("a", "secret-of-the-job"), ("b", "another-secret")):
        files[name] = tmp_path / name
        files[name].write_text(text)
        files[name].chmod(0o600)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "CDSGD_SECRET"))}
    base.update(DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port("127.0.0.1")), DMLC_NUM_SERVER="1",
                DMLC_NUM_WORKER="2", DMLC_INTERFACE="lo", DMLC_NODE_HOST="127.0.0.1", PYTHONUNBUFFERED="1")
    nodes = [("scheduler", [sys.executable, "-m", "cdsgd_mx.server"], "a"),
             ("server", [sys.executable, "-m", "cdsgd_mx.server"], "a"),
             ("worker0", [sys.executable, "-c", TRAIN_ONE_STEP], "a"),
             ("worker1", [sys.executable, "-c", TRAIN_ONE_STEP], "a")]
    procs = {}
    try:
        for name, cmd, secret in nodes:
            role = "worker" if name.startswith("worker") else name
            env = dict(base, DMLC_ROLE=role, CDSGD_SECRET_FILE=str(files["b" if name == odd_one else secret]))
            procs[name] = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
        outs = {w: procs[w].communicate(timeout=120)[0] for w in ("worker0", "worker1")}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    for w, out in outs.items():
        assert procs[w].returncode != 0 and "TRAINED" not in out, out[-3000:]
        assert "server 0 " + expected in out, out[-3000:]


def test_bytes_that_are_not_text_are_dropped_before_the_mac_check():
    """A non-ASCII MAC once raised inside hmac.compare_digest, and the server ended itself."""
    s = ServerState(secret=auth.new_secret().encode())
    for body in (b"cdsgd:\xff:{}", b"cdsgd:\xc3\xa9" * 40 + b":{}", bytes(range(1, 256)), b"", b"cdsgd:"):
        s.receive(0, body)
    assert s.dropped == 5


def _pushed(session, n, count, key, ranks, num_workers, data):
    """What the server's updater sees: the sum of the workers' pushes, each with its proof (made
    with the server's session key)."""
    total = np.zeros(n + num_workers * auth.TAG_FLOATS, np.float32)
    for r in ranks:
        region = np.zeros(num_workers * auth.TAG_FLOATS, np.float32)
        region[r * auth.TAG_FLOATS:(r + 1) * auth.TAG_FLOATS] = auth.tag(session, "fp32", r, count, key, n)
        total += np.concatenate([data, region])
    return total


def test_a_round_without_every_workers_proof_changes_nothing(monkeypatch):
    import mxnet as mx
    monkeypatch.setenv("DMLC_NUM_WORKER", "2")
    s = ServerState(secret=auth.new_secret().encode())
    session = s.session  # what the workers' proofs are keyed by
    s.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
    n, key = 5, 3
    s.command({"op": "register", "weights": [], "payloads": {}, "slots": {str(key): [[0, 0, n, 1.0, 1.0]]}})
    stored = mx.nd.array(np.concatenate([np.ones(n, np.float32), np.zeros(16, np.float32)]))
    g = np.full(n, 0.25, np.float32)
    forged = _pushed(session, n, 0, key, [0], 2, g)  # worker 0's push + one from outside (no proof)
    s(key, mx.nd.array(forged + np.concatenate([g, np.zeros(16, np.float32)])), stored)
    assert s.dropped == 1 and (stored.asnumpy() == np.concatenate([np.ones(n), np.zeros(16)])).all()
    wrong_round = _pushed(session, n, 1, key, [0, 1], 2, g)  # tags for the next round: a replay's or a shift's
    s(key, mx.nd.array(wrong_round), stored)
    assert s.dropped == 2 and stored.asnumpy()[n] == 0
    s(key, mx.nd.array(_pushed(session, n, 0, key, [0, 1], 2, g)), stored)
    got = stored.asnumpy()
    np.testing.assert_allclose(got[:n], 1 - 0.5 * 2 * 0.25)
    assert got[n] == 1 and s.dropped == 2  # the count the workers check after their pull
    s(99, mx.nd.array(_pushed(session, n, 0, 99, [0, 1], 2, g)), stored)  # a key no command announced
    assert s.dropped == 3 and stored.asnumpy()[n] == 1


def test_a_rows_round_without_one_row_from_every_rank_changes_nothing(monkeypatch, capsys):
    """fp32_sum='rank': MXNet closes a round of a rows key with whatever pushes came, so a push
    from outside the job can take a worker's place, summed into another worker's row or as a row
    of its own; the round acts only with one row from every rank, each with its proof."""
    import mxnet as mx
    monkeypatch.setenv("DMLC_NUM_WORKER", "3")
    s = ServerState(secret=auth.new_secret().encode())
    s.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
    n, key, rk, region = 5, 3, 12, 3 * auth.TAG_FLOATS
    s.command({"op": "register", "weights": [key], "payloads": {}, "rows": {str(rk): key},
               "slots": {str(key): [[0, 0, n, 1.0, 1.0]]}})
    stored = mx.nd.array(np.concatenate([np.ones(n, np.float32), np.zeros(region, np.float32)]))
    s(key, mx.nd.array(_pushed(s.session, n, 0, key, [0, 1, 2], 3, np.zeros(n, np.float32))), stored)  # registration
    before = stored.asnumpy()
    g = np.full(n, 0.25, np.float32)
    rows = [_pushed(s.session, n, 1, key, [r], 3, g) for r in range(3)]  # each worker's row: data, then its tag
    forged = np.concatenate([np.full(n, 100.0, np.float32), np.zeros(region, np.float32)])
    forged[n + 2 * auth.TAG_FLOATS:] = 1.0  # a tag of its own in rank 2's slot

    def push(ids, values):
        s(rk, mx.nd.sparse.row_sparse_array((np.stack(values), ids), shape=(3, n + region)), mx.nd.zeros((3, n + region)))
    push([0, 1], [rows[0] + forged, rows[1]])  # the outsider's row 0 took rank 2's place
    push([0, 1, 2], [rows[0], rows[1], forged])  # a row 2 without rank 2's proof
    assert s.dropped == 2 and (stored.asnumpy() == before).all()
    err = capsys.readouterr().err
    assert "dropped message 1: a push to rows key 12 that is not the job's (rows [0, 1] of 29 values)" in err
    assert "dropped message 2: round 1 of key 3 without the job's proof from worker rank 2" in err
    push([0, 1, 2], rows)  # the round sent again
    got = stored.asnumpy()
    np.testing.assert_allclose(got[:n], 1 - 0.5 * 3 * 0.25)
    assert got[n] == 2 and s.dropped == 2  # the count the workers check after their pull


def _registered_server(secret, n, key):
    import mxnet as mx
    s = ServerState(secret=secret)
    s.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
    s.command({"op": "register", "weights": [], "payloads": {}, "slots": {str(key): [[0, 0, n, 1.0, 1.0]]}})
    return s, mx.nd.array(np.concatenate([np.ones(n, np.float32), np.zeros(16, np.float32)]))


def test_two_jobs_with_one_secret_refuse_each_others_commands_and_pushes(monkeypatch):
    """Jobs started with MXNet's tools/launch.py may share CDSGD_SECRET_FILE: what was recorded in
    one (its first command, its first round) must not act in the other, whose servers drew
    another nonce."""
    import mxnet as mx
    monkeypatch.setenv("DMLC_NUM_WORKER", "2")
    secret = auth.new_secret().encode()
    n, key = 5, 3
    (a, stored_a), (b, stored_b) = _registered_server(secret, n, key), _registered_server(secret, n, key)
    assert a.nonce != b.nonce and a.session != b.session and len(a.nonce) == 6
    assert all(0 <= v < 1 << 16 for v in a.nonce)
    recorded = _signed([a.session], {"seq": 1, "op": "set_lr", "lr": 0.125})
    b.receive(0, recorded)
    assert b.optimizer.learning_rate == 0.5 and b.dropped == 1
    a.receive(0, recorded)
    assert a.optimizer.learning_rate == 0.125 and a.dropped == 0
    g = np.full(n, 0.25, np.float32)
    round_of_a = _pushed(a.session, n, 0, key, [0, 1], 2, g)
    b(key, mx.nd.array(round_of_a), stored_b)
    assert b.dropped == 2 and (stored_b.asnumpy() == np.concatenate([np.ones(n), np.zeros(16)])).all()
    a(key, mx.nd.array(round_of_a), stored_a)
    assert a.dropped == 0 and stored_a.asnumpy()[n] == 1  # applied: the count went up
    np.testing.assert_allclose(stored_a.asnumpy()[:n], 1 - 0.125 * 2 * 0.25)  # at the rate the command set


def test_each_server_checks_its_own_mac_of_a_command_and_a_wrong_count_is_dropped(monkeypatch):
    monkeypatch.setenv("DMLC_NUM_SERVER", "2")
    secret = auth.new_secret().encode()
    servers = [ServerState(rank=r, secret=secret) for r in range(2)]
    keys = [s.session for s in servers]
    for s in servers:
        s.receive(0, START_MESSAGE)  # rank 0's first message: not a command, nothing dropped
        s.receive(0, _signed(keys[:1], {"seq": 1, "op": "tally", "keys": [7]}))      # too few MACs
        s.receive(0, _signed(keys + keys[:1], {"seq": 1, "op": "tally", "keys": [7]}))  # too many
        s.receive(0, _signed(keys[::-1], {"seq": 1, "op": "tally", "keys": [7]}))     # each at the other's index
        assert s.dropped == 3 and not s.tallies
        s.receive(0, _signed(keys, {"seq": 1, "op": "tally", "keys": [7]}))
        assert s.dropped == 3 and s.tallies == {7}

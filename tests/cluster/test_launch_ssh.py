"""The cluster launcher (python -m cdsgd_mx.launch -H HOSTFILE): always through an `ssh` stand-in on
PATH that runs the remote command here (so its logic and failures are covered everywhere), and
through a real sshd on 127.0.0.1 where one can be started."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STANDIN = """#!/bin/bash
# ssh stand-in: ssh [-o OPT]... [-p PORT] HOST COMMAND runs COMMAND on this machine
while [ $# -gt 0 ]; do case "$1" in -o|-p) shift 2;; -*) shift;; *) break;; esac; done
echo "$1" >> "$SSH_STANDIN_LOG"
shift
echo "$*" >> "$SSH_STANDIN_LOG.commands"
exec bash -c "$*"
"""


@pytest.fixture
def cluster(tmp_path):
    """PATH with the ssh stand-in, a hostfile of two hosts, and a marker on every process."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text(STANDIN)
    (bindir / "ssh").chmod(0o755)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two hosts\nnodeA\nnodeB  # the second\n\n")
    marker = "%d-%d" % (os.getpid(), time.time_ns())
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]), SSH_STANDIN_LOG=str(tmp_path / "ssh.log"),
               CDSGD_SSH_TEST=marker)
    return env, hostfile, tmp_path / "ssh.log", marker


def job_pids(marker):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if ("CDSGD_SSH_TEST=%s" % marker).encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def launch(env, hostfile, code, *extra, popen=False):
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "-H", str(hostfile), "--host", "127.0.0.1",
           "--env", "DMLC_INTERFACE=lo", "--timeout", "90"] + list(extra) + ["--", sys.executable, "-c", code]
    if popen:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)


TRAIN = ("import os, mxnet as mx, numpy as np, cdsgd_mx\n"
         "params = mx.gluon.ParameterDict(); p = params.get('w', shape=(40,), init=mx.init.One()); params.initialize()\n"
         "tr = cdsgd_mx.Trainer(params, 'sgd', {'learning_rate': 0.1}, algorithm='bitsgd', warmup_steps=1)\n"
         "for t in range(4):\n"
         "    p.grad()[:] = 1.0\n"
         "    p.data()._fresh_grad = True  # as backward would\n"
         "    tr.step(1)\n"
         "tr.wait_all()\n"
         "print('RANK', tr.kvstore.rank, 'FOO', os.environ.get('FOO'), 'CWD', os.getcwd(),\n"
         "      'W', float(tr.kvstore.global_weights(0).asnumpy()[0]), flush=True)\n")


def test_a_job_over_ssh_runs_every_node_on_its_host_with_the_environment(cluster):
    env, hostfile, log, marker = cluster
    proc = launch(env, hostfile, TRAIN, "--env", "FOO=bar baz")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = [l for l in proc.stdout.splitlines() if "RANK" in l]
    assert len(lines) == 2
    for line in lines:
        assert "FOO bar baz CWD %s" % ROOT in line
        # W = 1 - 0.1 * 2 (warm-up: fp32 sum of 2 workers) - 3 * 0.1 * (0.5 + 0.5) (2-bit codes)
        assert abs(float(line.split(" W ")[1]) - 0.5) < 1e-6
    # server 0, then the workers, round the hosts; the scheduler stays here. The launcher's own
    # line gives the placement; the stand-in's log, one line per ssh, in the order the ssh
    # processes happened to run (they start side by side: under load a worker's may come first)
    assert "launch | on 2 hosts: server 0 @nodeA, worker 0 @nodeB, worker 1 @nodeA; the scheduler here at " \
        in proc.stdout
    assert sorted(log.read_text().split()) == ["nodeA", "nodeA", "nodeB"]
    assert "worker 0 @nodeB |" in proc.stdout and "worker 1 @nodeA |" in proc.stdout
    time.sleep(0.5)
    assert job_pids(marker) == []


def test_portable_numerics_reach_every_node_over_ssh(cluster):
    """CDSGD_NUMERICS travels in the command each host runs (a remote shell starts without the
    launcher's environment), and the servers, which check the workers' mode, accept the job."""
    env, hostfile, log, marker = cluster
    env = dict(env, CDSGD_NUMERICS="portable")
    proc = launch(env, hostfile, TRAIN + "print('MODE', os.environ.get('OMP_NUM_THREADS'), flush=True)\n")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("MODE 1") == 2  # each worker pinned: one OpenMP thread
    commands = [c for c in open(str(log) + ".commands").read().splitlines() if c.startswith("cd ")]  # the code spans lines
    assert len(commands) == 3 and all("CDSGD_NUMERICS=portable" in c for c in commands), commands


def test_a_failing_node_over_ssh_stops_the_whole_job(cluster):
    env, hostfile, _, marker = cluster
    code = ("import time, mxnet as mx, cdsgd_mx\nkv = cdsgd_mx.CDSGD(kvstore='dist_sync')\n"
            "if kv.rank == 1:\n    raise RuntimeError('boom over ssh')\ntime.sleep(60)\n")
    start = time.time()
    proc = launch(env, hostfile, code)
    assert proc.returncode != 0
    assert "RuntimeError: boom over ssh" in proc.stdout and "exited with code" in proc.stdout
    assert time.time() - start < 45
    time.sleep(0.5)
    assert job_pids(marker) == []


def test_nodes_stop_when_the_launcher_dies(cluster):
    """The launcher killed with SIGKILL (no cleanup of its own): each node's connection closes
    and its _node wrapper stops the command."""
    env, hostfile, _, marker = cluster
    proc = launch(env, hostfile, "import time, mxnet as mx\nkv = mx.kv.create('dist_sync')\n"
                  "print('READY', flush=True)\ntime.sleep(120)\n", popen=True)
    ready = 0
    while ready < 2:  # both workers joined the job
        line = proc.stdout.readline()
        assert line, "the job ended before its workers were ready"
        ready += "READY" in line
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for pid in job_pids(marker):  # the scheduler runs here, outside ssh: an orphan of the killed launcher
        try:  # the nodes are stopping meanwhile: a process may be gone between the listing and the reads
            cmdline = open("/proc/%d/cmdline" % pid).read().replace("\0", " ")
            environ = open("/proc/%d/environ" % pid, "rb").read().decode("latin1")
            if "cdsgd_mx.server" in cmdline and "scheduler" in environ:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.time() + 20
    while time.time() < deadline and job_pids(marker):
        time.sleep(0.5)
    left = job_pids(marker)
    assert left == [], [open("/proc/%d/cmdline" % p).read().replace("\0", " ")[:120] for p in left]


def test_bad_hostfile_and_env_give_one_line(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "1", "-s", "1"] + list(a) +
                                    ["--", "true"], capture_output=True, text=True, timeout=30)
    proc = run("-H", str(tmp_path / "missing"))
    assert proc.returncode != 0 and "-H/--hostfile: cannot read" in proc.stderr
    (tmp_path / "empty").write_text("# nothing\n")
    proc = run("-H", str(tmp_path / "empty"))
    assert proc.returncode != 0 and "lists no host" in proc.stderr
    proc = run("--env", "NOEQUALS")
    assert proc.returncode == 2 and "--env must be NAME=VALUE" in proc.stderr


def _sshd_here():
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if sshd is None:
        return None, "no sshd on this machine (Debian: openssh-server)"
    if not os.path.isdir("/run/sshd") and os.geteuid() == 0:
        os.makedirs("/run/sshd", 0o755)  # its privilege-separation directory (systemd makes it at boot)
    return sshd, None


@pytest.fixture
def real_sshd(tmp_path):
    """A real sshd on a loopback port (skipped where none can start), and an env whose `ssh`
    logs in to it with a fresh key: (env, hostfile naming 127.0.0.1, port, marker)."""
    sshd, why = _sshd_here()
    if why:
        pytest.skip(why)
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    hostkey = tmp_path / "host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True)
    auth = tmp_path / "authorized_keys"
    shutil.copy(str(key) + ".pub", auth)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = subprocess.Popen([sshd, "-D", "-e", "-p", str(port), "-o", "ListenAddress=127.0.0.1",
                               "-o", "HostKey=%s" % hostkey, "-o", "AuthorizedKeysFile=%s" % auth,
                               "-o", "StrictModes=no", "-o", "PermitRootLogin=yes", "-o", "PidFile=none",
                               "-o", "SetEnv=PATH=%s" % os.environ["PATH"]],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        time.sleep(1.0)
        if daemon.poll() is not None:
            pytest.skip("sshd could not start here: %s" % daemon.stdout.read().decode()[-300:])
        (tmp_path / "hosts").write_text("127.0.0.1\n")
        cfg = tmp_path / "ssh_config"
        cfg.write_text("Host 127.0.0.1\n  IdentityFile %s\n  UserKnownHostsFile /dev/null\n  Port %d\n"
                       "  StrictHostKeyChecking no\n  LogLevel ERROR\n" % (key, port))
        # ssh reads ~/.ssh from the password database, not $HOME: the real ssh with our config
        # comes first on PATH instead
        bindir = tmp_path / "bin"
        bindir.mkdir()
        (bindir / "ssh").write_text('#!/bin/sh\nexec %s -F %s "$@"\n' % (shutil.which("ssh"), cfg))
        (bindir / "ssh").chmod(0o755)
        marker = "%d-%d" % (os.getpid(), time.time_ns())
        env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]), CDSGD_SSH_TEST=marker)
        yield env, tmp_path / "hosts", port, marker
    finally:
        daemon.kill()


def test_a_job_over_a_real_sshd_on_loopback(real_sshd):
    env, hostfile, port, _ = real_sshd
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "-H", str(hostfile),
                           "--ssh-port", str(port), "--host", "127.0.0.1", "--env", "DMLC_INTERFACE=lo",
                           "--timeout", "90", "--", sys.executable, "-c", TRAIN],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("RANK") == 2


def test_nodes_over_ssh_import_from_the_launchers_pythonpath(real_sshd, tmp_path):
    """sshd gives remote commands a fresh environment: a package found through the launcher's
    PYTHONPATH (a checkout not installed) must be the one the nodes import, not another."""
    env, hostfile, port, marker = real_sshd
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "only_on_pythonpath.py").write_text("VALUE = %r\n" % marker)
    env = dict(env, PYTHONPATH=str(tmp_path / "pkg"))
    code = ("import only_on_pythonpath, mxnet as mx, cdsgd_mx\nkv = mx.kv.create('dist_sync')\n"
            "print('FOUND', only_on_pythonpath.VALUE, flush=True)\n")
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "1", "-s", "1", "-H", str(hostfile),
                           "--ssh-port", str(port), "--host", "127.0.0.1", "--env", "DMLC_INTERFACE=lo",
                           "--timeout", "90", "--", sys.executable, "-c", code],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FOUND %s" % marker in proc.stdout


def test_a_bare_python_over_ssh_is_the_one_the_launchers_path_names(real_sshd, tmp_path):
    """A remote shell starts with its own PATH (and whatever its start-up files put first, e.g.
    pyenv's shims): the launcher's PATH goes with the command, so `python` there is the one it
    names here (a venv's). Here: a `python` first on the launcher's PATH, which says so."""
    env, hostfile, port, marker = real_sshd
    first = tmp_path / "first"
    first.mkdir()
    (first / "python").write_text('#!/bin/sh\necho "THE LAUNCHERS PYTHON %s"\nexec %s "$@"\n' % (marker, sys.executable))
    (first / "python").chmod(0o755)
    env = dict(env, PATH="%s:%s" % (first, env["PATH"]))
    code = "import mxnet as mx, cdsgd_mx\nkv = mx.kv.create('dist_sync')\nprint('JOINED', flush=True)\n"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "1", "-s", "1", "-H", str(hostfile),
                           "--ssh-port", str(port), "--host", "127.0.0.1", "--env", "DMLC_INTERFACE=lo",
                           "--timeout", "90", "--", "python", "-c", code],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "worker 0 @127.0.0.1 | THE LAUNCHERS PYTHON %s" % marker in proc.stdout and "JOINED" in proc.stdout


def test_nodes_over_a_real_sshd_stop_when_the_launcher_is_killed_during_start_up(real_sshd):
    """The case seen once: SIGKILL to the launcher while the workers are still starting (before
    their kvstore exists) must leave no server or worker behind on the host. sshd gives remote
    commands a fresh environment: the job's marker reaches them through --env."""
    env, hostfile, port, marker = real_sshd
    code = "import time\nprint('STARTING', flush=True)\ntime.sleep(120)\n"
    proc = subprocess.Popen([sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "-H", str(hostfile),
                             "--ssh-port", str(port), "--host", "127.0.0.1", "--env", "DMLC_INTERFACE=lo",
                             "--env", "CDSGD_SSH_TEST=%s" % marker, "--timeout", "90", "--",
                             sys.executable, "-c", code],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    started = 0
    while started < 2:  # both workers run their script, no kvstore yet
        line = proc.stdout.readline()
        assert line, "the job ended before its workers started"
        started += "STARTING" in line
    remote = [p for p in job_pids(marker) if "DMLC_ROLE=scheduler" not in _environ(p)]
    assert any("STARTING" in _cmdline(p) for p in remote) and any("cdsgd_mx.server" in _cmdline(p) for p in remote)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 20
    while time.time() < deadline and [p for p in job_pids(marker) if "DMLC_ROLE=scheduler" not in _environ(p)]:
        time.sleep(0.5)
    left = [_cmdline(p)[:120] for p in job_pids(marker) if "DMLC_ROLE=scheduler" not in _environ(p)]
    for pid in job_pids(marker):  # the scheduler ran here, outside ssh: the killed launcher's orphan
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert left == []


def _environ(pid):
    try:
        return open("/proc/%d/environ" % pid, "rb").read().decode("latin1").replace("\0", " ")
    except OSError:
        return ""


def _cmdline(pid):
    try:
        return open("/proc/%d/cmdline" % pid).read().replace("\0", " ")
    except OSError:
        return ""


def test_mxnets_own_ssh_launcher_runs_a_script_changed_only_by_its_trainer_and_first_import(real_sshd, tmp_path):
    """tools/launch.py --launcher ssh as the wheel ships it (cdsgd_mx.mxnet_launch), through the
    real sshd: 2 workers + 1 server train CD-SGD to the simulation's weights."""
    import json
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_mxnet_tracker import BOUND, assert_simulated, job_files
    env, _, port, _ = real_sshd
    hostfile = tmp_path / "mxnet_hosts"
    hostfile.write_text("127.0.0.1:%d\n" % port)  # the tracker's own host:port form
    secret, out, args = job_files(tmp_path)
    (tmp_path / "args.json").write_text(json.dumps(args))
    run = tmp_path / "run.sh"  # what a user's job script does: its variables, then the script
    run.write_text("export CDSGD_SECRET_FILE=%s MXNET_KVSTORE_BIGARRAY_BOUND=%d CDSGD_STALL_TIMEOUT=60\n"
                   "export ENGINE_WORKER_ARGS=\"$(cat %s)\"\nexec %s %s\n" % (
                       secret, BOUND, tmp_path / "args.json", sys.executable,
                       os.path.join(ROOT, "tests", "workers", "tracker_worker.py")))
    env = {k: v for k, v in env.items() if not k.startswith("DMLC_")}
    env["DMLC_INTERFACE"] = "lo"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.mxnet_launch", "--launcher", "ssh", "-H", str(hostfile),
                           "-n", "2", "-s", "1", "bash", str(run)],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_simulated(out)

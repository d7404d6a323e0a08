"""A cluster on one machine (issue 46): emulated hosts, each a network namespace with its own
address, name, sshd and NIC, reached by real ssh; jobs of the launcher across them, the
scheduler's address and each node's interface found by themselves, host faults, and the NIC
model measured. Skips, with the reason, where hosts cannot be emulated (not root, no sshd)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker.test_engine import BOUND, CFG, K, STEPS, T, WARMUP, sim  # noqa: E402
from workers.engine_worker import SHAPES  # noqa: E402

from cdsgd_mx.cluster import emulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slow
WHY = emulate.unavailable()
needs_hosts = pytest.mark.skipif(WHY is not None, reason=WHY or "")
FAULT_WORKER = str(ROOT / "tests" / "workers" / "fault_worker.py")


def run_emulated(hosts, command, *options, timeout=240):
    return subprocess.run([sys.executable, "-m", "cdsgd_mx.cluster.emulate", "--hosts", str(hosts)] + list(options) +
                          ["--"] + command, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)


def alive(pids):
    return [p for p in pids if os.path.exists("/proc/%d" % p) and not emulate._zombie(p)]


def test_bad_input_stops_in_one_line():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "cdsgd_mx.cluster.emulate"] + list(args), capture_output=True,
                              text=True, timeout=30)
    for args, message in ((["--hosts", "0", "--", "true"], "--hosts must be 1-200, got 0"),
                          (["--hosts", "2", "--nic", "fast", "--", "true"], "--nic must be a tc rate"),
                          (["--hosts", "2"], "no COMMAND given")):
        proc = run(*args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.cluster.emulate", "fault", "freeze", "host0"],
                          capture_output=True, text=True, timeout=30, env={k: v for k, v in os.environ.items()
                                                                             if k != emulate.STATE_ENV})
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "no emulated cluster here" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "1", "-s", "1", "--nic", "1gbit", "--", "true"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "--nic shapes emulated hosts' NICs: it needs --emulate-hosts N" in proc.stderr


@needs_hosts
def test_each_host_has_its_own_address_name_and_sshd_and_all_of_it_goes_at_the_end(tmp_path):
    """Plain `ssh HOST CMD` by address and by name, each host sees itself (and its unconnected
    management interface first); COMMAND's exit code comes back; afterwards no process of the
    emulation is left and its folder is gone."""
    script = ('cp "$CDSGD_EMULATE" %s/state.json; cat "$CDSGD_HOSTFILE"; '
              'for h in $(cat "$CDSGD_HOSTFILE") host2; do ssh "$h" \'echo "$(hostname) $(ip -4 -o addr show | '
              'grep -v " lo " | awk "{print \\$2, \\$4}" | tr "\\n" " ")"\'; done; '
              'ssh host0 getent hosts host2 login; cat /proc/uptime > %s/ended; exit 7') % (tmp_path, tmp_path)
    proc = run_emulated(3, ["bash", "-c", script])
    assert proc.returncode == 7, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1:4] == ["10.213.0.11", "10.213.0.12", "10.213.0.13"], lines
    for i, line in enumerate(lines[4:7]):
        assert line == "host%d mgmt0 10.214.0.%d/24 eth0 10.213.0.%d/24 " % (i, 11 + i, 11 + i), line
    assert lines[7].startswith("host2 ")
    assert lines[8].split() == ["10.213.0.13", "host2"] and lines[9].split() == ["10.213.0.1", "login"]  # names resolve
    state = json.loads((tmp_path / "state.json").read_text())
    assert not os.path.exists(state["dir"])
    time.sleep(0.3)
    assert alive([h["pid"] for h in state["hosts"]] + [state["login"]]) == []
    # (a namespace's number is reused once it is gone: another test's emulation, running beside
    # this one under -n 2, may have its processes in a namespace of the same number by now, even
    # before run_emulated returns; every process of this emulation started before COMMAND ended,
    # since the teardown starts none in its namespaces)
    ended = float((tmp_path / "ended").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")
    namespaces = {h["netns"] for h in state["hosts"]} | {state["login_netns"]}
    assert [p for ns in namespaces for p in emulate.pids_in(ns) if started_at(p) <= ended] == []


def started_at(pid):
    """A process's start, in clock ticks since boot (/proc/PID/stat, field 22); inf once gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return float("inf")


@needs_hosts
def test_an_interrupted_emulation_leaves_nothing(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "cdsgd_mx.cluster.emulate", "--hosts", "2", "--", "bash", "-c",
                             'cp "$CDSGD_EMULATE" %s/state.json; ssh host1 "sleep 300" & echo READY; wait' % tmp_path],
                            cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if "READY" in line:
                break
        state = json.loads((tmp_path / "state.json").read_text())
        deadline = time.time() + 20
        while time.time() < deadline:  # until the remote sleep runs
            on_host1 = emulate.pids_in(state["hosts"][1]["netns"])
            if any("sleep 300" in emulate._cmdline(p) for p in on_host1):
                break
            time.sleep(0.1)
        assert any("sleep 300" in emulate._cmdline(p) for p in on_host1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    time.sleep(0.3)
    assert alive(on_host1 + [state["login"]]) == []


@needs_hosts
def test_the_nic_model_full_duplex_per_host_and_shared_by_senders_into_one_host():
    """At 100 Mbit/s: one transfer runs at the rate; two opposite ones each at the rate (on the
    old shared loopback they would split it); two senders into one host share its rate."""
    proc = run_emulated(3, [sys.executable, str(HERE / "nic_probe.py")], "--nic", "100mbit")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rates = json.loads(proc.stdout.splitlines()[-1])
    assert 85 <= rates["one"][0] <= 102, rates
    assert all(80 <= r <= 102 for r in rates["opposite"]), rates
    assert 85 <= sum(rates["into_one"]) <= 102 and all(r <= 65 for r in rates["into_one"]), rates


NETEM_WHY = None if WHY else emulate.netem_unavailable()


@needs_hosts
@pytest.mark.skipif(NETEM_WHY is not None, reason=NETEM_WHY or "")
def test_latency_is_added_on_each_end_of_each_link():
    """--latency 10: a TCP connect (one round trip) from the login node to a host crosses one
    link end each way (about 20 ms), from one host to another two each way (about 40 ms)."""
    proc = run_emulated(2, [sys.executable, str(HERE / "latency_probe.py")], "--latency", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rtt = json.loads(proc.stdout.splitlines()[-1])
    assert 19 <= rtt["login_host"] <= 26 and 39 <= rtt["host_host"] <= 50, rtt
    proc = run_emulated(2, [sys.executable, str(HERE / "latency_probe.py")])
    rtt = json.loads(proc.stdout.splitlines()[-1])
    assert rtt["login_host"] < 5 and rtt["host_host"] < 5, rtt


@pytest.mark.skipif(WHY is not None or NETEM_WHY is None,
                    reason=WHY or "this kernel has netem: --latency works here (the test above)")
def test_latency_without_netem_stops_in_one_line_before_any_host_exists():
    """A kernel built without netem (as this project's 2-core VMs) cannot delay packets: the
    emulator and the launcher say so in one line, before any host is made, instead of a tc
    error halfway through."""
    for cmd in ([sys.executable, "-m", "cdsgd_mx.cluster.emulate", "--hosts", "2", "--latency", "10", "--", "true"],
                [sys.executable, "-m", "cdsgd_mx.launch", "-n", "1", "-s", "1", "--latency", "5", "--", "true"],
                [sys.executable, "-m", "cdsgd_mx.launch", "-n", "1", "-s", "1", "--emulate-hosts", "2", "--latency", "5",
                 "--", "true"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.count("\n") == 1 and "--latency needs the kernel's netem" in proc.stderr, proc.stderr


def engine_job(tmp_path, alg, workers, servers, hosts, *launch_extra):
    out = tmp_path / alg
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", str(workers), "-s", str(servers), "--emulate-hosts",
           str(hosts), "--timeout", "150", "--env", "MXNET_KVSTORE_BIGARRAY_BOUND=%d" % BOUND] + list(launch_extra) + \
        ["--", sys.executable, str(ROOT / "tests" / "workers" / "engine_worker.py"), "--out", str(out), "--config",
         json.dumps(CFG), "--algorithm", alg, "--steps", str(STEPS), "--warmup", str(WARMUP), "--k", str(K),
         "--threshold", str(T)]
    proc = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc.stdout, [dict(np.load(out / ("rank%d.npz" % r))) for r in range(workers)]


def assert_simulated(alg, got):
    xs, W = sim(alg, len(got))
    for r, res in enumerate(got):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(res["w%d" % i], W[i], rtol=1e-5, atol=1e-5, err_msg="W %s p%d r%d" % (alg, i, r))
            np.testing.assert_allclose(res["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5, err_msg="x %s p%d r%d" % (alg, i, r))


@needs_hosts
@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_eight_workers_and_two_servers_over_five_hosts_train_to_the_simulation(tmp_path, alg):
    """No DMLC_INTERFACE, no --host: the launcher finds the scheduler's address on the route to
    the hosts, and every node announces its cluster address, not the management one that ps-lite
    would take (listed first; a job announcing it never starts). Exact on the 1/64 grid."""
    out, got = engine_job(tmp_path, alg, 8, 2, 5)
    assert ("launch | on 5 hosts: server 0 @10.213.0.11, server 1 @10.213.0.12, worker 0 @10.213.0.13, "
            "worker 1 @10.213.0.14, worker 2 @10.213.0.15, worker 3 @10.213.0.11") in out  # servers first, round the hosts
    assert "worker 7 @10.213.0.15; the scheduler here at 10.213.0.1\n" in out
    assert_simulated(alg, got)


@needs_hosts
@pytest.mark.parametrize("alg", [pytest.param("ssgd", marks=pytest.mark.scale),
                                 pytest.param("bitsgd", marks=pytest.mark.scale),
                                 pytest.param("odsgd", marks=pytest.mark.scale), "cdsgd"])
def test_sixteen_workers_and_four_servers_over_twenty_hosts_train_to_the_simulation_exactly(tmp_path, alg):
    """The paper's scale (issue 48): 16 workers + 4 servers, each node on a host of its own, all
    four algorithms; every worker's W and forward weights equal the simulation's bit for bit
    (the engine worker's values lie on the 1/64 grid, so sums of 16 are exact in any order).
    CD-SGD, which runs every part (2-bit pushes, the k-step correction, the local update), is in
    the default run; the other three with `-m scale` (about 19 s a job on 2 cores; the suite's
    budget: docs/testing.md)."""
    out, got = engine_job(tmp_path, alg, 16, 4, 20)
    assert "worker 15 @10.213.0.30; the scheduler here at 10.213.0.1\n" in out
    xs, W = sim(alg, 16)
    for r, res in enumerate(got):
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(res["w%d" % i], W[i], err_msg="W %s p%d r%d" % (alg, i, r))
            np.testing.assert_array_equal(res["x%d" % i], xs[r][i], err_msg="x %s p%d r%d" % (alg, i, r))


@needs_hosts
def test_the_addresses_a_user_sets_are_used(tmp_path):
    """DMLC_INTERFACE and --host, as a user of a real cluster sets them."""
    out, got = engine_job(tmp_path, "cdsgd", 2, 1, 3, "--env", "DMLC_INTERFACE=eth0", "--host", "10.213.0.1")
    assert_simulated("cdsgd", got)


@needs_hosts
def test_mxnets_own_ssh_launcher_across_the_hosts(tmp_path):
    """tools/launch.py --launcher ssh as the wheel ships it (cdsgd_mx.mxnet_launch), the hostfile
    the emulator gives: 2 workers + 1 server on their hosts train CD-SGD to the simulation."""
    from test_mxnet_tracker import job_files
    secret, out, args = job_files(tmp_path)
    (tmp_path / "args.json").write_text(json.dumps(args))
    run = tmp_path / "run.sh"
    run.write_text("export CDSGD_SECRET_FILE=%s MXNET_KVSTORE_BIGARRAY_BOUND=%d CDSGD_STALL_TIMEOUT=60\n"
                   "export ENGINE_WORKER_ARGS=\"$(cat %s)\"\nexec %s %s\n" % (
                       secret, BOUND, tmp_path / "args.json", sys.executable,
                       ROOT / "tests" / "workers" / "tracker_worker.py"))
    script = 'cd %s && exec %s -m cdsgd_mx.mxnet_launch --launcher ssh -H "$CDSGD_HOSTFILE" -n 2 -s 1 bash %s' % (
        tmp_path, sys.executable, run)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "CDSGD_"))}
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.cluster.emulate", "--hosts", "3", "--", "bash", "-c", script],
                          cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_simulated("cdsgd", [dict(np.load(out / ("rank%d.npz" % r))) for r in range(2)])


@needs_hosts
def test_slurm_across_the_hosts(tmp_path):
    """`srun -N 3 -n 4 python -m cdsgd_mx.slurm -s 1 -- ...` with a slurmd on each emulated host
    (tests/cluster/emulated_slurm.py): the scheduler on host0, the server on host1, the workers on
    host2 and host0, CD-SGD to the simulation's weights."""
    import shutil
    missing = [d for d in ("slurmctld", "slurmd", "srun", "sinfo") if shutil.which(d) is None]
    if missing:
        pytest.skip("no SLURM on this machine (%s missing; Debian: slurm-wlm)" % ", ".join(missing))
    from test_mxnet_tracker import job_files
    secret, out, args = job_files(tmp_path)
    worker = ["bash", "-c", 'echo "WORKER $SLURM_PROCID on $(hostname)"; exec "$@"', "_", sys.executable,
              str(ROOT / "tests" / "workers" / "engine_worker.py")] + args
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "CDSGD_", "SLURM_"))}
    env.update(CDSGD_SECRET_FILE=str(secret), MXNET_KVSTORE_BIGARRAY_BOUND=str(BOUND), CDSGD_STALL_TIMEOUT="60")
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.cluster.emulate", "--hosts", "3", "--", sys.executable,
                           str(HERE / "emulated_slurm.py"), str(tmp_path / "slurm"), "4", "--"] + worker,
                          cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "WORKER 2 on host2" in proc.stdout and "WORKER 3 on host0" in proc.stdout, proc.stdout[-2000:]
    assert_simulated("cdsgd", [dict(np.load(out / ("rank%d.npz" % r))) for r in range(2)])


STALL = 10  # seconds: the launcher's --stall-timeout in the fault tests


def fault_job(tmp_path, fault, after=None):
    """2 workers + 1 server over 3 hosts (server 0 on host0, worker 0 on host1, worker 1 on
    host2), the fault once rank 0 is at step 5, `after` once the job has ended; the report of
    emulated_job.py."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, str(HERE / "emulated_job.py"), str(report), "--fault"] + fault + (
        ["--after"] + after if after else []) + [
        "--when", "rank 0 step 5", "--", "-n", "2", "-s", "1", "--timeout", "120", "--stall-timeout", str(STALL),
        "--", sys.executable, FAULT_WORKER, "--fault", "none"]
    proc = run_emulated(3, cmd)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(report.read_text())


@needs_hosts
@pytest.mark.parametrize("fault,after,named", [
    (["kill", "host2", "worker"], None, ["launch | worker 1 @10.213.0.13 exited with code 137; stopping the job"]),
    (["kill", "host0", "server"], None, ["launch | server 0 @10.213.0.11 exited with code 137; stopping the job"]),
    (["link-down", "host1"], None, ["launch | stall: worker 0 (", "host host1): no heartbeat for"]),
    (["freeze", "host2"], ["thaw", "host2"], ["launch | stall: worker 1 (", "host host2): no heartbeat for"])])
def test_a_host_fault_ends_the_job_naming_the_node_and_its_host_and_leaves_nothing(tmp_path, fault, after, named):
    """A node killed on its host, a host cut off, a host frozen: the job ends non-zero within
    the stall timeout, its last word names the node and its host, and nothing of the job is
    left on any host: the cut-off host's sshd drops the silent session and its nodes stop
    while the link is still down; the frozen host's nodes stop once it is thawed."""
    r = fault_job(tmp_path, fault, after)
    out = r["output"]
    assert r["fault"] and r["rc"] != 0, out[-3000:]
    assert r["fault_to_end"] < STALL + 8, (r["fault_to_end"], out[-2000:])
    stop = [l for l in out.splitlines() if l.startswith("launch | ") and "stopping the job" in l]
    assert stop and all(part in stop[0] for part in named), out[-2000:]
    assert r["left"] == [], r["left"]

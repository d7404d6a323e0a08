"""Jobs under SLURM (issue 30, item 3): `srun --kill-on-bad-exit=1 -n 4 python -m cdsgd_mx.slurm
-s 1 -- python SCRIPT` against a real slurmctld and slurmd on this machine, which the fixture
starts where slurm-wlm is installed (Debian: slurm-wlm; run as root). 2 workers + 1 server train
to the simulation's weights; a failing task stops the job; a hung task stops it through the
workers' own stall watch."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_mxnet_tracker import BOUND, assert_simulated, job_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# one SLURM cluster per run: the fixture is per module, and two xdist workers each starting a
# cluster would both number their first job 1 and so derive the same scheduler port (CI, 2026-11-27)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node SLURM cluster (slurmctld + slurmd, no munge: auth/none) in a temporary folder;
    yields the environment srun needs."""
    missing = [d for d in ("slurmctld", "slurmd", "srun", "scontrol") if shutil.which(d) is None
               and not os.path.exists("/usr/sbin/" + d)]
    if missing:
        pytest.skip("no SLURM on this machine (%s missing; Debian: slurm-wlm)" % ", ".join(missing))
    if os.geteuid() != 0:
        pytest.skip("the SLURM fixture runs slurmd as root (it starts the job's tasks as any user)")
    base = tmp_path_factory.mktemp("slurm")
    for d in ("state", "spool", "log"):
        (base / d).mkdir()
    node = socket.gethostname().split(".")[0]
    conf = base / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=cdsgdtest", "SlurmctldHost=%s(127.0.0.1)" % node,
        "SlurmctldPort=%d" % _free_port(), "SlurmdPort=%d" % _free_port(),
        "AuthType=auth/none", "CredType=cred/none", "SlurmUser=root", "SlurmdUser=root",
        "StateSaveLocation=%s/state" % base, "SlurmdSpoolDir=%s/spool" % base,
        "SlurmctldPidFile=%s/slurmctld.pid" % base, "SlurmdPidFile=%s/slurmd.pid" % base,
        "SlurmctldLogFile=%s/log/slurmctld.log" % base, "SlurmdLogFile=%s/log/slurmd.log" % base,
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "MpiDefault=none", "ReturnToService=2", "SlurmdParameters=config_overrides",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "NodeName=%s NodeAddr=127.0.0.1 CPUs=16 RealMemory=4000 State=UNKNOWN" % node,
        "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16", ""]))
    env = dict(os.environ, SLURM_CONF=str(conf))
    daemons = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
               for cmd in (["slurmctld", "-D", "-c", "-i"], ["slurmd", "-D"])]  # -c -i: no state from before
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            info = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            if info.stdout.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.skip("SLURM did not come up here: %s" % (base / "log"))
        yield env
    finally:
        for d in daemons:
            d.kill()
            d.wait()


def srun(env, tmp_path, tasks, command, extra_env=None, popen=False):
    secret, _, _ = job_files(tmp_path)
    run_env = {k: v for k, v in env.items() if not k.startswith(("CDSGD_", "DMLC_"))}
    run_env.update(CDSGD_SECRET_FILE=str(secret), DMLC_INTERFACE="lo", MXNET_KVSTORE_BIGARRAY_BOUND=str(BOUND),
                   CDSGD_FAULT_TEST=str(os.getpid()), **(extra_env or {}))
    cmd = ["srun", "--kill-on-bad-exit=1", "-n", str(tasks), sys.executable, "-m", "cdsgd_mx.slurm", "-s", "1",
           "--", sys.executable] + command
    if popen:
        return subprocess.Popen(cmd, cwd=str(ROOT), env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    return subprocess.run(cmd, cwd=str(ROOT), env=run_env, capture_output=True, text=True, timeout=180)


def tasks_left():
    from test_faults import job_pids
    time.sleep(1.0)
    return job_pids()


def test_two_workers_and_a_server_train_to_the_simulations_weights(slurm, tmp_path):
    _, out, args = job_files(tmp_path)
    proc = srun(slurm, tmp_path, 4, [str(ROOT / "tests" / "workers" / "engine_worker.py")] + args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_simulated(out)


def test_a_failing_task_stops_the_job(slurm, tmp_path):
    t0 = time.time()
    proc = srun(slurm, tmp_path, 4, [str(ROOT / "tests" / "workers" / "fault_worker.py"), "--fault", "die"])
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "rank 0 step 3" in proc.stdout and time.time() - t0 < 90
    assert tasks_left() == []


def test_a_hung_task_stops_the_job_through_the_workers_own_stall_watch(slurm, tmp_path):
    from test_stall import node
    t0 = time.time()
    proc = srun(slurm, tmp_path, 4, [str(ROOT / "tests" / "workers" / "fault_worker.py"), "--fault", "none"],
                extra_env={"CDSGD_STALL_TIMEOUT": "5"}, popen=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "step 10" in line and not any("STOPPED" in x for x in lines):
            os.kill(node("worker", 1), signal.SIGSTOP)
            lines.append("STOPPED\n")
    proc.wait(timeout=120)
    out = "".join(lines)
    assert proc.returncode != 0, out[-3000:]
    assert "cdsgd_mx worker 0 (rank " in out and "stalled: waited" in out and "pull of bucket" in out, out[-3000:]
    assert time.time() - t0 < 90
    assert tasks_left() == []


def test_roles_and_the_scheduler_port_follow_from_what_srun_gives_every_task():
    from cdsgd_mx.cluster import slurm
    assert [slurm.role_of(i, 2) for i in range(5)] == [("scheduler", 0), ("server", 0), ("server", 1),
                                                        ("worker", 0), ("worker", 1)]
    env = {"SLURM_JOB_ID": "4711", "SLURM_STEP_ID": "3"}
    assert slurm.scheduler_port(env) == slurm.scheduler_port(dict(env)) and 20000 <= slurm.scheduler_port(env) < 60000
    assert slurm.scheduler_port(dict(env, SLURM_STEP_ID="4")) != slurm.scheduler_port(env)
    assert slurm.scheduler_port(dict(env, SLURM_STEP_RESV_PORTS="12001-12004")) == 12001


@pytest.mark.parametrize("environ,servers,message", [
    ({}, 1, "SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID not set: run it under srun"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "1"}, 1,
     "srun -n 2 gives 1 scheduler, 1 server(s) and 0 worker(s); ask for -n SERVERS + WORKERS + 1"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "1"}, 0, "-s/--servers must be at least 1")])
def test_a_task_outside_srun_or_with_too_few_tasks_stops_in_one_line(environ, servers, message):
    from cdsgd_mx.cluster import slurm
    with pytest.raises(SystemExit) as e:
        slurm.task_environment(environ, servers)
    assert str(e.value).startswith("cdsgd_mx.slurm: ") and message in str(e.value) and "\n" not in str(e.value)

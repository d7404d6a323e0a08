"""Runs as the COMMAND of `python -m cdsgd_mx.cluster.emulate --hosts N`: a SLURM cluster on the
emulated hosts (slurmctld here on the login node, one slurmd on each host, auth/none), then
`srun -N N -n TASKS python -m cdsgd_mx.slurm -s 1 -- ...` across them. Prints srun's output and
exits with srun's code; the daemons go with the emulation.

    python emulated_slurm.py BASE TASKS -- WORKER COMMAND...
"""
import json
import os
import socket
import subprocess
import sys
import time

from cdsgd_mx.cluster import emulate


def main():
    base, tasks = sys.argv[1], int(sys.argv[2])
    command = sys.argv[sys.argv.index("--") + 1:]
    state = emulate.load_state()
    hosts = state["hosts"]
    for d in ("state", "log"):
        os.makedirs(os.path.join(base, d), exist_ok=True)
    me = socket.gethostname().split(".")[0]
    conf = os.path.join(base, "slurm.conf")
    with open(conf, "w") as f:
        f.write("\n".join([
            "ClusterName=cdsgdhosts", "SlurmctldHost=%s(%s)" % (me, emulate.LOGIN),
            "SlurmctldPort=6817", "SlurmdPort=6818",
            "AuthType=auth/none", "CredType=cred/none", "SlurmUser=root", "SlurmdUser=root",
            "StateSaveLocation=%s/state" % base, "SlurmdSpoolDir=%s/spool-%%n" % base,
            "SlurmctldPidFile=%s/slurmctld.pid" % base, "SlurmdPidFile=%s/slurmd-%%n.pid" % base,
            "SlurmctldLogFile=%s/log/slurmctld.log" % base, "SlurmdLogFile=%s/log/slurmd-%%n.log" % base,
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "MpiDefault=none", "ReturnToService=2",
            "SlurmdParameters=config_overrides", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "NodeName=DEFAULT CPUs=4 RealMemory=2000 State=UNKNOWN"] +
            ["NodeName=%s NodeAddr=%s" % (h["name"], h["address"]) for h in hosts] +
            ["PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4", ""]))
    env = dict(os.environ, SLURM_CONF=conf)
    daemons = [subprocess.Popen(["slurmctld", "-D", "-c", "-i"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)]
    for h in hosts:  # each slurmd on its host: its network, and its name (NodeName = hostname)
        daemons.append(subprocess.Popen(["nsenter", "-t", str(h["pid"]), "-n", "-u", "slurmd", "-D"], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    deadline = time.time() + 40
    while time.time() < deadline:
        info = subprocess.run(["sinfo", "-h", "-o", "%t %D"], env=env, capture_output=True, text=True)
        if info.stdout.split() == ["idle", str(len(hosts))]:
            break
        time.sleep(0.5)
    else:
        print("emulated_slurm: SLURM did not come up on the hosts: %s" % info.stdout.strip(), flush=True)
        return 1
    # srun tells the slurmds where to reach it: this machine's address on the cluster network
    env["SLURM_SRUN_COMM_HOST"] = emulate.LOGIN
    # cyclic: task 0 (the scheduler) on host0, task 1 (the server) on host1, the workers on the rest
    proc = subprocess.run(["srun", "--kill-on-bad-exit=1", "-N", str(len(hosts)), "-n", str(tasks), "-m", "cyclic",
                           sys.executable, "-m", "cdsgd_mx.slurm", "-s", "1", "--"] + command, env=env)
    for d in daemons:
        d.terminate()
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

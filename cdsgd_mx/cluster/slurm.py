"""One task of a parameter-server job under SLURM: its role from SLURM_PROCID.

    srun --kill-on-bad-exit=1 -n TASKS python -m cdsgd_mx.slurm -s SERVERS -- python train.py ...

(in an sbatch script, or with salloc). Task 0 is the scheduler, tasks 1..S the servers, the
other TASKS - S - 1 the workers. Every task finds the scheduler's address and port by itself,
from what srun gives all of them: the first host of the step's node list (where srun's block
distribution puts task 0) and a port made from the job and step ids (SLURM_STEP_RESV_PORTS where
the cluster reserves ports). A worker becomes the script (exec: srun sees its exit code); a
server or the scheduler becomes `python -m cdsgd_mx.server`. The script needs no change beyond its Trainer.

The job's secret comes as with MXNet's tools/launch.py: a file only its owner can read, named by
CDSGD_SECRET_FILE, readable on every node (srun passes the variable on). --kill-on-bad-exit=1
makes srun stop every task once one fails, including a worker whose own stall watch ended it
(CDSGD_STALL_TIMEOUT, heartbeat.py): a hung task then stops the job.
"""
import argparse
import os
import socket
import subprocess
import sys

from cdsgd_mx.cluster.launch import SERVERS_ENV

USAGE = "srun --kill-on-bad-exit=1 -n TASKS python -m cdsgd_mx.slurm -s SERVERS -- COMMAND..."


def fail(message):
    sys.exit("cdsgd_mx.slurm: %s" % message)


def first_host(nodelist):
    """The first host of a SLURM node list ('node[3-5],gpu1' -> 'node3'), by SLURM's own
    scontrol, which knows every form of the syntax."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as e:
        fail("cannot expand the node list %r with `scontrol show hostnames` (%s)" % (nodelist, e))
    if not out:
        fail("the node list %r names no host" % nodelist)
    return out[0]


def scheduler_port(environ):
    """A port every task derives alike: the first of the step's reserved ports where the cluster
    reserves them (MpiParams=ports=...), else one made from the job and step ids."""
    reserved = environ.get("SLURM_STEP_RESV_PORTS", "")
    if reserved:
        return int(reserved.split(",")[0].split("-")[0])
    job, step = int(environ["SLURM_JOB_ID"]), int(environ.get("SLURM_STEP_ID", "0") or 0)
    return 20000 + (job * 31 + step) % 40000


def role_of(procid, servers):
    """(DMLC_ROLE, index within the role) of task `procid`."""
    if procid == 0:
        return "scheduler", 0
    if procid <= servers:
        return "server", procid - 1
    return "worker", procid - 1 - servers


def task_environment(environ, servers):
    """This task's role and the DMLC_* variables of the job, from srun's SLURM_* ones."""
    missing = [v for v in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID") if not environ.get(v)]
    if missing:
        fail("%s not set: run it under srun, one task per node of the job (%s)" % (", ".join(missing), USAGE))
    procid, tasks = int(environ["SLURM_PROCID"]), int(environ["SLURM_NTASKS"])
    workers = tasks - 1 - servers
    if servers < 1 or workers < 1:
        fail("-s/--servers must be at least 1 and leave at least one worker: srun -n %d gives 1 scheduler, "
             "%d server(s) and %d worker(s); ask for -n SERVERS + WORKERS + 1" % (tasks, servers, workers))
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        fail("SLURM_STEP_NODELIST not set: run it under srun (%s)" % USAGE)
    role, index = role_of(procid, servers)
    env = dict(environ, DMLC_ROLE=role, DMLC_PS_ROOT_URI=socket.gethostbyname(first_host(nodelist)),
               DMLC_PS_ROOT_PORT=str(scheduler_port(environ)), DMLC_NUM_SERVER=str(servers),
               DMLC_NUM_WORKER=str(workers))
    if role != "scheduler":
        env["CDSGD_LAUNCH_INDEX"] = str(index)
    if role == "worker":
        env[SERVERS_ENV] = "cdsgd"  # this job's servers are ours (worker/doors.py)
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.slurm", usage=USAGE,
                                 description="One task of a cdsgd_mx job under srun: its role from SLURM_PROCID.")
    ap.add_argument("-s", "--servers", type=int, default=1, help="servers (tasks 1..S; default 1)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command (the workers)")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        fail("no command: %s" % USAGE)
    env = task_environment(os.environ, args.servers)
    if env["DMLC_ROLE"] == "worker":
        try:
            os.execvpe(command[0], command, env)
        except OSError as e:
            fail("cannot run %r: %s" % (command[0], e))
    node = [sys.executable, "-m", "cdsgd_mx.server"]  # a server or the scheduler: ours (exec: srun sees its exit code)
    try:
        os.execvpe(node[0], node, env)
    except OSError as e:
        fail("cannot run %r: %s" % (node[0], e))


if __name__ == "__main__":
    main()

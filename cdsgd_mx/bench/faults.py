"""How long a job takes to notice a fault, stop, and (with --max-restarts) come back.

    python -m cdsgd_mx.bench.faults [--stall-timeout 20] [--algorithm cdsgd] [--repeat 1]
        [--faults "SIGSTOP worker,SIGKILL server,..."]

Runs small 2-worker, 1-server CD-SGD jobs under the launcher (a Trainer on 8 parameter arrays,
random gradients, 20 ms per step, a checkpoint every 25 steps) and injects one fault per job
once step 40 is reached:

  SIGSTOP worker / server / scheduler   time from the stop to the launcher's exit (the stall
                                        timeout plus the stopping), and the exit code
  SIGKILL worker / server, --max-restarts 1
                                        time from the kill to the restarted job resuming
                                        (its 'resumed at step' line), the steps lost, and the
                                        exit code of the whole run (0: it finished)

Prints one row per fault; figures are wall-clock seconds on this machine.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time
from cdsgd_mx.bench import mark_fresh

FAULT_STEP = 40
STEPS = 200
FAULTS = [("SIGSTOP", "worker"), ("SIGSTOP", "server"), ("SIGSTOP", "scheduler"),
          ("SIGKILL", "worker"), ("SIGKILL", "server")]


def worker(args):
    """One worker of the measured job (run by the launcher with --worker)."""
    import mxnet as mx
    import numpy as np
    from mxnet import gluon
    import cdsgd_mx
    params = gluon.ParameterDict()
    plist = [params.get("p%d" % i, shape=(1000 + 37 * i,), init=mx.init.Zero()) for i in range(8)]
    params.initialize()
    trainer = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.01}, algorithm=args.algorithm, warmup_steps=0)
    ckpt = os.path.join(args.out, "ckpt.states")
    if int(os.environ.get("CDSGD_RESTART", "0")) > 0 and os.path.exists(ckpt):
        trainer.load_states(ckpt)
    for t in range(trainer.steps_done, STEPS):
        for i, p in enumerate(plist):
            p.grad()[:] = np.random.RandomState([t, i, trainer.kvstore.rank]).randn(p.shape[0]).astype(np.float32)
        mark_fresh(trainer)  # the gradients are written by hand, or kept from the last step
        trainer.step(1)
        trainer.wait_all()
        print("step %d" % (t + 1), flush=True)
        if (t + 1) % 25 == 0:
            trainer.save_states(ckpt)
        time.sleep(0.02)


def node_pid(marker, role):
    """The pid of a process of the job marked `marker` with DMLC_ROLE=role (launch index 0)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if marker in env and ("DMLC_ROLE=%s" % role).encode() in env and (
                role == "scheduler" or b"CDSGD_LAUNCH_INDEX=0" in env):
            return int(pid)
    return None


def measure(kind, role, args, out):
    marker = "CDSGD_BENCH_FAULTS=%d-%s-%s" % (os.getpid(), kind, role)
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "600",
           "--stall-timeout", str(args.stall_timeout)]
    if kind == "SIGKILL":
        cmd += ["--max-restarts", "1"]
    cmd += ["--", sys.executable, "-m", "cdsgd_mx.bench.faults", "--worker", "--out", out,
            "--algorithm", args.algorithm]
    name, value = marker.split("=")
    proc = subprocess.Popen(cmd, env=dict(os.environ, **{name: value}), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines, fault_at, resumed_at = [], None, None
    for line in proc.stdout:
        lines.append(line)
        if fault_at is None and re.search(r"\| step %d$" % FAULT_STEP, line.rstrip()):
            pid = node_pid(marker.encode(), role)
            if pid is None:
                continue
            os.kill(pid, getattr(signal, kind))
            fault_at = time.time()
        if "resumed at step" in line and resumed_at is None:
            resumed_at = time.time()
    proc.wait()
    ended = time.time()
    text = "".join(lines)
    if fault_at is None:
        return {"fault": "%s %s" % (kind, role), "error": "the fault was never injected:\n" + text[-2000:]}
    lost = re.search(r"resumed at step (\d+): (\d+) steps lost", text)
    row = {"fault": "%s %s" % (kind, role), "rc": proc.returncode}
    if kind == "SIGSTOP":
        row["to_stop_s"] = round(ended - fault_at, 1)
        row["named"] = bool(re.search(r"launch \| stall: %s" % role, text))
    else:
        row["to_resume_s"] = round(resumed_at - fault_at, 1) if resumed_at else None
        row["steps_lost"] = int(lost.group(2)) if lost else None
        row["total_after_fault_s"] = round(ended - fault_at, 1)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.faults", description=__doc__.split("\n\n")[0])
    ap.add_argument("--stall-timeout", type=float, default=20)
    ap.add_argument("--algorithm", default="cdsgd", choices=["ssgd", "bitsgd", "odsgd", "cdsgd"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--faults", default=",".join("%s %s" % f for f in FAULTS),
                    help="comma-separated, from: %s" % ", ".join("%s %s" % f for f in FAULTS))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if not args.stall_timeout > 0 or args.repeat < 1:
        ap.error("--stall-timeout must be > 0 and --repeat >= 1")
    chosen = [tuple(f.split()) for f in args.faults.split(",") if f.strip()]
    unknown = [" ".join(f) for f in chosen if f not in FAULTS]
    if unknown or not chosen:
        ap.error("--faults must list some of: %s (comma-separated), got %r"
                 % (", ".join("%s %s" % f for f in FAULTS), args.faults))
    import tempfile
    print("%-18s %4s %10s %11s %10s %14s" % ("fault", "rc", "to stop s", "to resume s", "steps lost",
                                               "named / total"), flush=True)
    for kind, role in chosen:
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as out:
                row = measure(kind, role, args, out)
            if "error" in row:
                print("%-18s %s" % (row["fault"], row["error"]), flush=True)
                continue
            print("%-18s %4d %10s %11s %10s %14s" % (
                row["fault"], row["rc"], row.get("to_stop_s", "-"), row.get("to_resume_s", "-"),
                row.get("steps_lost", "-"),
                row["named"] if "named" in row else "%s s" % row["total_after_fault_s"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

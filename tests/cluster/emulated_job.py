"""Runs as the COMMAND of `python -m cdsgd_mx.cluster.emulate`: one job of the launcher across
the emulated hosts, a host fault once the job prints a given line, and then what is still
running on the hosts. Writes a JSON report.

    python emulated_job.py REPORT [--fault ACTION HOST [ROLE]] [--when TEXT] [--after ACTION HOST]\n        [--linger SEC] -- LAUNCH ARGS...

LAUNCH ARGS follow `python -m cdsgd_mx.launch`; `-H $CDSGD_HOSTFILE` is added. The report has
rc, the output, the seconds from the fault to the job's end, and the processes still on the
hosts or here once the job ended (waiting up to --linger seconds for them to go)."""
import argparse
import json
import os
import subprocess
import sys
import time

from cdsgd_mx.cluster import emulate
from cdsgd_mx.cluster.processes import parent_of, process_state


def leftovers(state):
    """cmdlines of the processes still on the hosts (not their namespace holder or sshd's
    listener) or here (not this script or the emulator)."""
    mine = {os.getpid(), state["login"]}
    found = []
    for ns in [h["netns"] for h in state["hosts"]] + [state["login_netns"]]:
        for pid in emulate.pids_in(ns):
            cmd = emulate._cmdline(pid)
            if pid in mine or cmd.startswith("sleep infinity") or ("sshd" in cmd and " -D " in cmd):
                continue
            # the state letter and parent tell a stopped process from one that missed its stop
            found.append("%s: %s (state %s, parent %s)" % (ns, cmd[:160], process_state(pid), parent_of(pid)))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--fault", nargs="+", default=None)
    ap.add_argument("--when", default=None)
    ap.add_argument("--after", nargs="+", default=None, help="a fault to do once the job has ended (thaw HOST)")
    ap.add_argument("--linger", type=float, default=20.0)
    argv = sys.argv[1:]
    cut = argv.index("--")  # the launcher's arguments follow the first --
    args, launch = ap.parse_args(argv[:cut]), argv[cut + 1:]
    state = emulate.load_state()
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-H", os.environ[emulate.HOSTFILE_ENV]] + launch
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, fault_at, did = [], None, None
    for line in proc.stdout:
        lines.append(line)
        if args.fault and fault_at is None and args.when and args.when in line:
            did = emulate.fault(*args.fault)
            fault_at = time.time()
            lines.append("emulated_job | fault: %s\n" % did)
    rc = proc.wait()
    ended = time.time()
    if args.after:
        emulate.fault(*args.after)
    left = leftovers(state)
    while left and time.time() < ended + args.linger:
        time.sleep(0.2)
        left = leftovers(state)
    report = {"rc": rc, "output": "".join(lines), "fault": did,
              "fault_to_end": None if fault_at is None else ended - fault_at,
              "left": left, "gone_after": time.time() - ended}
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()

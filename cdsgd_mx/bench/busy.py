"""Cores taken away from a benchmark: `--busy-cores N` runs N processes that spin, each pinned
to a core of its own (the machine's last N) at the highest priority this user may give, for the
whole run. The jobs then have the other cores, as on a machine with fewer or slower cores, or one
shared with other work (issue 55, item 7: check the goals with half the CPU taken away).

API: check_count(n) -> problem or None; BusyCores(n) (a context manager); describe(n).
"""
import os
import subprocess
import sys

# the spinner: pinned first, then the priority (nice -20 needs root; else it stays at 0 and
# shares its core fairly with whatever the scheduler puts there)
_SPIN = ("import os, sys\n"
         "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
         "try:\n    os.setpriority(os.PRIO_PROCESS, 0, -20)\nexcept OSError:\n    pass\n"
         "print(os.getpriority(os.PRIO_PROCESS, 0), flush=True)\n"
         "while True:\n    pass\n")


def cores():
    """The cores this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def check_count(n):
    """None where n cores can be taken away here, else why not (one line)."""
    have = len(cores())
    if n < 0 or n >= have:
        return "--busy-cores must be between 0 and %d (this machine gives %d core(s); one must stay free), got %r" % (
            have - 1, have, n)
    return None


class BusyCores:
    """Starts the spinners on entering, stops them on leaving (even on an error)."""

    def __init__(self, n):
        self.n, self.procs, self.nice = n, [], []

    def __enter__(self):
        for core in cores()[len(cores()) - self.n:]:
            p = subprocess.Popen([sys.executable, "-c", _SPIN, str(core)], stdout=subprocess.PIPE, text=True)
            self.procs.append((core, p))
            self.nice.append(int(p.stdout.readline() or 0))  # running, pinned and at its priority
        return self

    def __exit__(self, *exc):
        for _, p in self.procs:
            p.kill()
        for _, p in self.procs:
            p.wait()
            p.stdout.close()
        return False

    def describe(self):
        """One line: which cores spin and at what priority, and what the jobs have left."""
        if not self.procs:
            return ""
        return "busy cores: a process spins on core %s (nice %s) for the whole run; the jobs have %d of %d core(s)" % (
            ", ".join(str(c) for c, _ in self.procs), ", ".join(str(v) for v in sorted(set(self.nice))),
            len(cores()) - self.n, len(cores()))

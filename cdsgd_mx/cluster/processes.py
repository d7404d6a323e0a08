"""A process of this machine as /proc shows it (the launcher's watch and the emulator's
teardown both ask)."""


def process_state(pid):
    """A process of this machine's state letter in /proc (R, S, T, Z, ...); None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def stopped_here(pid):
    """Whether a process of this machine is stopped (SIGSTOP, a debugger): state T or t."""
    return process_state(pid) in ("T", "t")

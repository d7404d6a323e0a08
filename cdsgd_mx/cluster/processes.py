"""A process of this machine as /proc shows it (the launcher's watch and the emulator's
teardown both ask)."""


def _stat_field(pid, i):
    """Field i of /proc/PID/stat after the command's name (0: the state, 1: the parent); None
    once the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[i]
    except (OSError, IndexError):
        return None


def process_state(pid):
    """A process of this machine's state letter in /proc (R, S, T, Z, ...); None once it is gone."""
    return _stat_field(pid, 0)


def parent_of(pid):
    """A process of this machine's parent pid (a string, as /proc gives it); None once it is gone."""
    return _stat_field(pid, 1)


def stopped_here(pid):
    """Whether a process of this machine is stopped (SIGSTOP, a debugger): state T or t."""
    return process_state(pid) in ("T", "t")

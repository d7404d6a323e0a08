"""A node of a job started over ssh (cdsgd_mx.launch -H): runs the command, and stops it when
the launcher's connection ends.

    python -m cdsgd_mx.cluster.node -- COMMAND...

The launcher writes one line to this process's standard input, the job's secret, which the
command gets through a pipe of its own (auth.SECRET_FD: not on a command line, not in a file);
then it keeps standard input open and writes nothing more. When the launcher stops the job (or
dies), the ssh connection closes, standard input reaches its end, and this
wrapper ends the command's whole process group (SIGTERM, then SIGKILL after 3 s). Without it a
remote node of a failed job would live on, waiting in ps-lite. Exits with the command's code.
"""
import os
import signal
import subprocess
import sys
import threading

from cdsgd_mx.wire.auth import handed_over


def stop_group(child, grace=3.0):
    """SIGTERM to our process group (the command and its children), SIGKILL to what is left
    after `grace` seconds, us included. Runs in the main thread (as a signal handler)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(0, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        child.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    os.killpg(0, signal.SIGKILL)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit("python -m cdsgd_mx.cluster.node -- COMMAND...: no command given")
    if os.getpgid(0) != os.getpid():
        os.setpgid(0, 0)  # our own group, so that stopping it touches nothing else
    secret = sys.stdin.buffer.readline().strip()
    if not secret:  # the launcher is gone already (or is not ours): start nothing
        sys.exit("cdsgd_mx.cluster.node: no job secret on standard input; not starting %s" % argv[0])
    env, fd = handed_over(secret, os.environ)
    child = None

    def stop(*_):
        if child is None:  # the command is being started: it is (or will be) in our group, which goes
            os.killpg(0, signal.SIGKILL)
        stop_group(child)

    # before the command exists and before the watcher can signal: a SIGTERM or SIGHUP that came
    # while Python's default action was still in place ended this wrapper and left the command
    # running without it (seen under load when the launcher died during start-up)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, pass_fds=(fd,))
    os.close(fd)

    def watch_connection():
        while sys.stdin.buffer.read(4096):
            pass  # nothing more is sent; the end of input is the signal
        if child.poll() is None:
            try:  # the launcher may be gone with the other end of our output too
                sys.stderr.write("cdsgd_mx.cluster.node: the launcher's connection closed; stopping %s\n" % argv[0])
                sys.stderr.flush()
            except OSError:
                pass
            # to the main thread, so that its wait for the command is interrupted (a signal sent
            # to the process may land on this thread and leave the main one waiting)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

    threading.Thread(target=watch_connection, daemon=True).start()
    code = child.wait()
    # os._exit: the watcher thread is blocked reading stdin, which interpreter shutdown would
    # wait on (a fatal error); killed by signal N: 128 + N, as a shell says
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()

"""The communication thread: runs each parameter's round (quantize, push, pull) in order, in
the background, so that the next forward/backward overlaps it.

A round has up to three phases. Its push phase runs as soon as the thread reaches it; it may
return a finish function (wait for the servers' acknowledgement, then issue the pull) that the
thread runs at the next flush, after the push phases of every round submitted before that
flush. So the pushes of all parameters of a step leave back to back and their acknowledgements
travel together, instead of one parameter's round trip after another. A finish function may
return a check (read what the servers said about the round once the pull has landed), which
the thread runs after it has told the main thread that the flush's pulls are issued: checks
cost the main thread no wait, and a failed one is raised at its next call.

Only this thread calls the native kvstore once training runs: MXNet's KVStoreDist is not meant
to be driven from two Python threads at once.
"""
import queue
import threading


class Round:
    """A submitted job. `issued` is set once its pull has been handed to MXNet's engine: from
    then on any engine op that reads the pulled array is ordered after the pull."""

    def __init__(self, fn, label):
        self.fn = fn
        self.label = label
        self.issued = threading.Event()
        self.checked = threading.Event()  # its check (if any) ran too
        self.error = None


class CommError(RuntimeError):
    pass


class Communicator:
    def __init__(self, name="cdsgd-comm"):
        self._jobs = queue.Queue()
        self._failed = None
        self._pending = []  # (round, finish function) waiting for the next flush
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, label=""):
        """fn() runs the push phase and returns None (round done) or a finish function."""
        self.raise_if_failed()
        job = Round(fn, label)
        self._jobs.put(job)
        return job

    def flush(self):
        """Finish every round submitted so far (in order); returns a job to wait on."""
        return self.submit(None, "flush")

    def wait(self, job):
        """Block until job's pull is issued; re-raise any error of the communication thread."""
        job.issued.wait()
        self.raise_if_failed()

    def drain(self):
        """Wait for every submitted round, its check included."""
        job = self.flush()
        job.checked.wait()
        self.raise_if_failed()

    def raise_if_failed(self):
        if self._failed is not None:
            raise CommError("communication thread failed in %s: %s: %s" % (
                self._failed.label, type(self._failed.error).__name__, self._failed.error)) from self._failed.error

    def _fail(self, job, error):
        job.error = error
        if self._failed is None:
            self._failed = job

    def _run(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.fn is None:  # flush: finish the rounds waiting for it, in order, then check them
                checks, finished = [], [pending for pending, _ in self._pending]
                for pending, finish in self._pending:
                    if self._failed is None:
                        try:
                            check = finish()
                            if check is not None:
                                checks.append((pending, check))
                        except BaseException as e:
                            self._fail(pending, e)
                    pending.issued.set()
                self._pending = []
                job.issued.set()
                for pending, check in checks:
                    if self._failed is None:
                        try:
                            check()
                        except BaseException as e:
                            self._fail(pending, e)
                for pending in finished:
                    pending.checked.set()
                job.checked.set()
                continue
            finish = None
            if self._failed is None:
                try:
                    finish = job.fn()
                except BaseException as e:  # kept for the main thread, which re-raises it
                    self._fail(job, e)
            if finish is None:
                job.issued.set()
                job.checked.set()
            else:
                self._pending.append((job, finish))

    def close(self):
        self._jobs.put(None)
        self._thread.join(timeout=10)

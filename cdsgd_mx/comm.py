"""The communication thread: runs each parameter's round (quantize, push, pull) in order, in
the background, so that the next forward/backward overlaps it.

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
        self.error = None


class CommError(RuntimeError):
    pass


class Communicator:
    def __init__(self, name="cdsgd-comm"):
        self._jobs = queue.Queue()
        self._failed = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, label=""):
        self.raise_if_failed()
        job = Round(fn, label)
        self._jobs.put(job)
        return job

    def wait(self, job):
        """Block until job's pull is issued; re-raise any error of the communication thread."""
        job.issued.wait()
        self.raise_if_failed()

    def drain(self):
        """Wait for every submitted job."""
        done = Round(lambda: None, "drain")
        self._jobs.put(done)
        self.wait(done)

    def raise_if_failed(self):
        if self._failed is not None:
            raise CommError("communication thread failed in %s: %s: %s" % (
                self._failed.label, type(self._failed.error).__name__, self._failed.error)) from self._failed.error

    def _run(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if self._failed is None:
                try:
                    job.fn()
                except BaseException as e:  # kept for the main thread, which re-raises it
                    job.error = e
                    self._failed = job
            job.issued.set()

    def close(self):
        self._jobs.put(None)
        self._thread.join(timeout=10)

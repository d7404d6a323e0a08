"""The communication thread: runs each bucket set's round (quantize, push, issue the pull) in
order, in the background, so that the next forward/backward overlaps it.

A round returns once its pulls are handed to MXNet's engine (MXNet orders each pull after the
push of the same key); from then on any engine op that reads the pulled array is ordered after
the pull, so the main thread only waits for a round to be *issued*, never for the network.

Only this thread calls the native kvstore once training runs: MXNet's KVStoreDist is not meant
to be driven from two Python threads at once.
"""
import queue
import threading


class Round:
    """A submitted job. `issued` is set once fn has returned (its pulls are in the engine)."""

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
        """fn() pushes and issues the pulls of one round."""
        self.raise_if_failed()
        job = Round(fn, label)
        self._jobs.put(job)
        return job

    def flush(self):
        """A job done once every round submitted so far is issued (the rounds run in order)."""
        return self.submit(None, "flush")

    def wait(self, job):
        """Block until job is issued; re-raise any error of the communication thread."""
        job.issued.wait()
        self.raise_if_failed()

    def drain(self):
        """Wait for every submitted round."""
        self.wait(self.flush())

    def raise_if_failed(self):
        if self._failed is not None:
            raise CommError("communication thread failed in %s: %s: %s" % (
                self._failed.label, type(self._failed.error).__name__, self._failed.error)) from self._failed.error

    def _run(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.fn is not None and self._failed is None:
                try:
                    job.fn()
                except BaseException as e:  # kept for the main thread, which re-raises it
                    job.error = e
                    self._failed = job
            job.issued.set()

    def close(self):
        self._jobs.put(None)
        self._thread.join(timeout=10)

"""The communication thread: runs each parameter's round (quantize, push, pull) in order, in
the background, so that the next forward/backward overlaps it.

A round has up to three phases. Its push phase runs as soon as the thread reaches it: it
pushes and issues the pull (MXNet's engine orders the pull after what it must follow), and may
return a check that the thread runs at the next flush, after the push phases of every round
submitted before that flush. So the pushes of all buckets of a step leave back to back and
their pulls travel together, instead of one round trip after another. The check reads what
the servers said about the round once the pull has landed, and sends the round again where a
server dropped it (a push from outside the job took its place, auth.py), so that what was
pulled is the applied round's. The round is `issued` at the flush, its pull handed to MXNet's
engine (the main thread may then queue copies of the pulled weights, which the engine orders
after the pull), and `ready` once its check has passed: the main thread waits for that before
it lets anything read those weights, and queues the copies again where a round was sent again
(CDSGD.finish_step). A check may return a follow-up (the next round's proofs), run after the
main thread was told: it costs the step no wait. A failure in any phase is raised at the main
thread's next call.

Only this thread calls the native kvstore once training runs: MXNet's KVStoreDist is not meant
to be driven from two Python threads at once.
"""
import queue
import threading


class Round:
    """A submitted job. `issued` is set once its pull has been handed to MXNet's engine: from
    then on any engine op that reads the pulled array is ordered after the pull. `ready` is set
    once its check has passed too: the pull is (or is ordered after) that of a round the
    servers applied."""

    def __init__(self, fn, label):
        self.fn = fn
        self.label = label
        self.issued = threading.Event()
        self.ready = threading.Event()
        self.done = threading.Event()  # its follow-up (if any) ran too
        self.error = None


class CommError(RuntimeError):
    pass


class Communicator:
    def __init__(self, name="cdsgd-comm"):
        self._jobs = queue.Queue()
        self._failed = None
        self._pending = []  # (round, check) waiting for the next flush
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, label=""):
        """fn() runs the push phase and returns None (round done) or its check."""
        self.raise_if_failed()
        job = Round(fn, label)
        self._jobs.put(job)
        return job

    def flush(self):
        """Check every round submitted so far (in order); returns a job to wait on."""
        return self.submit(None, "flush")

    def wait(self, job):
        """Block until job is ready; re-raise any error of the communication thread."""
        job.ready.wait()
        self.raise_if_failed()

    def wait_issued(self, job):
        """Block until job's pulls are issued (its check may still be running)."""
        job.issued.wait()
        self.raise_if_failed()

    def drain(self):
        """Wait for every submitted round, its follow-up included."""
        job = self.flush()
        job.done.wait()
        self.raise_if_failed()

    def raise_if_failed(self):
        if self._failed is not None:
            raise CommError("communication thread failed in %s: %s: %s" % (
                self._failed.label, type(self._failed.error).__name__, self._failed.error)) from self._failed.error

    def _fail(self, job, error):
        job.error = error
        if self._failed is None:
            self._failed = job

    def _phase(self, job, fn, results):
        """Run one phase of job (unless something failed already); keep what it returns."""
        if self._failed is None:
            try:
                result = fn()
                if result is not None:
                    results.append((job, result))
            except BaseException as e:  # kept for the main thread, which re-raises it
                self._fail(job, e)

    def _run(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.fn is not None:  # a round's push phase
                checks = []
                self._phase(job, job.fn, checks)
                if checks:
                    self._pending.append(checks[0])
                else:
                    for event in (job.issued, job.ready, job.done):
                        event.set()
                continue
            # flush: the rounds waiting for it are issued; check them in order, then tell the main thread
            rounds, checks, follow_ups = [r for r, _ in self._pending], self._pending, []
            self._pending = []
            for r in rounds + [job]:
                r.issued.set()
            for r, check in checks:
                self._phase(r, check, follow_ups)
            for r in rounds + [job]:
                r.ready.set()
            for r, follow_up in follow_ups:
                self._phase(r, follow_up, [])
            for r in rounds + [job]:
                r.done.set()

    def close(self):
        self._jobs.put(None)
        self._thread.join(timeout=10)

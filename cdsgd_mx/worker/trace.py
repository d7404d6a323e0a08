"""Chrome-trace timeline of a worker (chrome://tracing or https://ui.perfetto.dev), like the
paper's Fig. 5: the main thread's forward/backward and step, the communication thread's
quantize, push and pull, so that overlap (or its absence) is visible."""
import ctypes
import json
import os
import queue
import threading
import time
from contextlib import contextmanager


class Tracer:
    def __init__(self, path=None, pid=0):
        self.path = path
        self.pid = pid
        self.events = []
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._tids = {}
        self._watch = None  # queue of the thread that waits for asynchronous transfers to end

    @property
    def enabled(self):
        return self.path is not None

    def _tid(self):
        name = threading.current_thread().name
        with self._lock:
            return self._tids.setdefault(name, len(self._tids))

    def now_us(self):
        return (time.perf_counter() - self._t0) * 1e6

    def add(self, name, start_us, end_us, **args):
        if not self.enabled:
            return
        ev = {"name": name, "ph": "X", "ts": start_us, "dur": max(0.0, end_us - start_us),
              "pid": self.pid, "tid": self._tid(), "args": args}
        with self._lock:
            self.events.append(ev)

    @contextmanager
    def span(self, name, **args):
        if not self.enabled:
            yield
            return
        start = self.now_us()
        try:
            yield
        finally:
            self.add(name, start, self.now_us(), **args)

    def watch(self, name, array, start_us, **args):
        """Record a span that ends when the engine finishes writing `array` (a pull; or a list
        of arrays: all of them), without blocking the caller: a watcher thread waits for it."""
        if not self.enabled:
            return
        import mxnet as mx
        from cdsgd_mx.worker import engine_ops
        # the engine stamps the time once the writes issued so far are done: the span's end is
        # neither held up by writes issued later (the next step's comm_buf = g) nor by this
        # thread's wait for the GIL (a late end would show overlap where a worker waited)
        arrays = array if isinstance(array, list) else [array]
        seconds, done = ctypes.c_double(0.0), mx.nd.zeros((1,))
        engine_ops.stamp(arrays, [done], seconds)
        if self._watch is None:  # its own trace row: not the communication thread's name
            self._watch = queue.Queue()
            threading.Thread(target=self._watcher, args=(self._watch,), name="cdsgd-transfers", daemon=True).start()
        self._watch.put((name, done, seconds, start_us, args))

    def _watcher(self, q):
        while True:
            name, done, seconds, start_us, args = q.get()
            done.wait_to_read()
            self.add(name, start_us, (seconds.value - self._t0) * 1e6, **args)

    def save(self):
        if not self.enabled:
            return None
        meta = [{"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid, "args": {"name": name}}
                for name, tid in self._tids.items()]
        meta.append({"name": "process_name", "ph": "M", "pid": self.pid, "args": {"name": "worker %d" % self.pid}})
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "w") as f:
            # the clock's origin (perf_counter: the machine's monotonic clock, one for all its
            # processes), so that workers' traces can be laid on one time axis (bench.comm)
            json.dump({"traceEvents": meta + self.events, "displayTimeUnit": "ms",
                       "otherData": {"perf_counter_origin_s": self._t0}}, f)
        return self.path

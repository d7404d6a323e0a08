"""Progress of a long loop: a bar on a terminal, elsewhere one plain line every few seconds.

Under a launcher or SLURM a worker's output goes to a pipe or a log file, where a bar's `\\r`
redraws pile up (one 10-epoch fig6 job left 820 KB of them in its log). There each update is a
line of its own, at most one per `every` seconds, and one at the end.
"""
import sys
import time


class Progress:
    def __init__(self, total, desc, stream=None, every=10.0, terminal=None):
        self.stream = stream or sys.stdout
        self.total, self.desc, self.every = total, desc, every
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.done, self.note = 0, ""
        self.start = self.last = time.perf_counter()
        self.bar = None
        if self.terminal:
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, file=self.stream, mininterval=1.0)

    def update(self, n=1, **postfix):
        self.done += n
        self.note = ", ".join("%s %s" % kv for kv in postfix.items())
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(**postfix)
            return
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            self._line(now)

    def _line(self, now):
        rate = self.done / max(now - self.start, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        self.stream.write("%s: %d/%d steps%s, %.1f steps/s, %.0f s left\n" % (
            self.desc, self.done, self.total, ", " + self.note if self.note else "", rate, left))
        self.stream.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        else:
            self._line(time.perf_counter())

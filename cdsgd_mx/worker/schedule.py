"""The step schedule of the four algorithms (Algorithm 1 of the paper and its relatives).

Steps t = 0, 1, 2, ...; n = warmup_steps. W(t) = global weights, x(t) = weights used for
forward/backward, g(t) = a worker's gradient at step t.

- warm-up (t < n), and ssgd/bitsgd always: x(t) = W(t).
- odsgd/cdsgd, t >= n: x(t) = W(t-1) - local step with g(t-1) (one-step delay): so from step
  n - 1 on, a step writes x(t+1) from the local update and leaves its round in flight.
- push: fp32 during warm-up and always for ssgd/odsgd; bitsgd pushes 2-bit codes every step
  after warm-up; cdsgd, with c = t - n, pushes fp32 when c % k == 0 (k-step correction) and
  2-bit codes otherwise.
- pull (pull_compression='2bit', pull_compression.py): after warm-up V follows W by 2-bit codes at
  every step (of A - V, A where W is going: pull_compression.py). A compressed step pulls the codes; cdsgd's correction step pulls
  fp32 W (its push was fp32) and both sides encode the same codes from it (tracked; with k = 1
  every step is fp32 both ways, and V := W). Only
  bitsgd's steps with resync_every > 0 and (t - n) % resync_every == 0 re-sync (V := W): under
  momentum a re-sync is a kick that costs accuracy (docs/performance-history.md, "No re-syncs, and an aim ahead of W"). Warm-up
  steps pull fp32 W and V := W.
"""
import bisect

ALGORITHMS = ("ssgd", "bitsgd", "odsgd", "cdsgd")
COMPRESSING = ("bitsgd", "cdsgd")
DELAYED = ("odsgd", "cdsgd")


class Schedule:
    def __init__(self, algorithm, warmup_steps, k, pull_compression="none", resync_every=0):
        self.algorithm = algorithm
        self.warmup_steps = warmup_steps
        self.k = k
        self.pull_compression = pull_compression
        self.resync_every = resync_every

    def in_warmup(self, t):
        return t < self.warmup_steps

    def compressed(self, t):
        """Does step t push 2-bit codes (else the fp32 gradient)?"""
        if self.in_warmup(t) or self.algorithm not in COMPRESSING:
            return False
        if self.algorithm == "bitsgd":
            return True
        return (t - self.warmup_steps) % self.k != 0

    def pull_compressed(self, t):
        """Does step t pull the 2-bit codes of W(t+1) - V (else fp32 W)?"""
        if self.pull_compression != "2bit" or not self.compressed(t):
            return False
        return self.algorithm == "cdsgd" or not self.resync_every or (t - self.warmup_steps) % self.resync_every != 0

    def pull_tracked(self, t):
        """Does step t pull fp32 W and move V by the codes of W(t+1) - V, on the servers and on
        every worker alike (cdsgd's correction steps with 2-bit pulls), rather than V := W?"""
        return self.pull_compression == "2bit" and self.algorithm == "cdsgd" and self.k > 1 \
            and not self.in_warmup(t) and not self.compressed(t)  # (k = 1: every step fp32, V := W)

    def delayed(self, t):
        """Does step t produce x(t+1) by the local update, leaving its round in flight?"""
        return self.algorithm in DELAYED and t >= self.warmup_steps - 1

    def phase(self, t):
        if self.in_warmup(t):
            return "warmup"
        if self.algorithm == "cdsgd":
            return "compressed" if self.compressed(t) else "correction"
        return "formal"


class InterleavedSchedule:
    """For benchmarks: algorithms taking turns in one job, so that all are timed on the same
    processes. Segments (first step, algorithm): step t runs as its segment's algorithm with no
    warm-up, counted from the segment's start (a CD-SGD segment corrects at its offsets 0, k,
    2k, ...). Looked up by t, so a round checked after the next segment began still counts as
    its own step's. The kvstore must hold every buffer the segments' algorithms use (built as
    cdsgd for all four, bitsgd for S-SGD and BIT-SGD). A segment's first step switches (it
    waits for the last segment's round in flight, or starts the delay)."""

    def __init__(self, k, resync_every=0):
        self.k, self.resync_every = k, resync_every
        self.starts, self.schedules = [], []

    def begin(self, t, algorithm, pull_compression="none"):
        """Steps from t on run as `algorithm` (t: the kvstore's next step)."""
        assert not self.starts or t >= self.starts[-1]
        self.starts.append(t)
        self.schedules.append(Schedule(algorithm, 0, self.k, pull_compression, self.resync_every))

    def pull_compressed(self, t):
        """A segment with 2-bit pulls pulls codes at each of its compressed steps (no re-sync
        inside a benchmark's segment: the servers follow each round's pull flag, so V stays
        the same everywhere whatever the order)."""
        schedule, offset = self._segment(t)
        return schedule.pull_compression == "2bit" and schedule.compressed(offset)

    def _segment(self, t):
        """(the segment's schedule, t counted from the segment's start)"""
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0:
            raise ValueError("step %d comes before the first segment" % t)
        return self.schedules[i], t - self.starts[i]

    def pull_tracked(self, t):
        """A CD-SGD segment with 2-bit pulls: its correction steps (Schedule.pull_tracked)."""
        schedule, offset = self._segment(t)
        return schedule.pull_tracked(offset)

    def compressed(self, t):
        schedule, offset = self._segment(t)
        return schedule.compressed(offset)

    def delayed(self, t):
        schedule, offset = self._segment(t)
        return schedule.delayed(offset)

    def in_warmup(self, t):
        return False

    def phase(self, t):
        return self._segment(t)[0].algorithm

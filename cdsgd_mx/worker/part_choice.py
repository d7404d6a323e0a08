"""Parts or whole buckets for the fp32 rounds, chosen by measurement in each job.

A bucket with parts (buckets.partition) can take an fp32 round whole as well: the server keeps
both ways (a part's stored weights are a stretch of its bucket's, its optimizer states views
of the bucket's), so either way gives the same weights, bit for bit. Which way is faster
depends on the network and the cores (docs/performance.md, "Parts"): where the wire sets the
round, parts (one part's W comes back while the next part's push goes out: CD-SGD's correction
on Inception-BN took 0.68 of its whole-bucket time at 8 workers + 2 servers on 1 Gbit/s NICs);
where the CPU sets it, whole buckets (16x fewer messages: 0.76 at 4 + 1 on 10 Gbit/s NICs, 2
cores).

So the first fp32 steps try both (TRIALS: one untimed step in parts, then parts and whole in
the order P W W P P W, which a steady drift cannot favour), each step timed from its first push
to when the engine has its last W; the workers then share their times (a tally, each worker's
in its own row: every worker gets the same figures, so every worker takes the same way, as it
must: a key's round waits for every worker's push of it). A step took what its slowest worker
took, and each way's median step decides: one slow step (a connection's first rounds, another
process) cannot. (With their sums, ResNet-20's S-SGD rounds went whole in 2 of 10 jobs at 2 + 1
on 1 Gbit/s NICs, and took 1.2-1.9x what parts took: docs/performance.md, "Parts or whole".)
Where the two medians are within CLOSE of each other, the first look could not tell (a
transient slowed both ways: a ResNet-20 job at 2 + 1 on 1 Gbit/s NICs saw parts 42.2 ms and
whole 40.9, went whole and took 44.9 ms a round where 9 others took 30.5-37.2 in parts;
docs/performance.md, "Parts or whole"), and a second look (LOOK again, later in the job)
decides alone. The rest of the job goes the faster way.
CDSGD_PARTS: auto (the default), parts or whole (worker/config.py).

API: PartChoice(mode, backend, rank, workers).whole(t) / mode_of(t) / timing(t) / time_step(t,
start_s, wires); width (of the tally); decided, medians, first_look; MODES; TRIALS (the first
look's order), LOOK (a look's timed steps), CLOSE.
"""
import ctypes

import numpy as np

from cdsgd_mx.wire import protocol

MODES = ("auto", "parts", "whole")
LOOK = (False, True, True, False, False, True)  # whole? per timed trial step: P W W P P W
TRIALS = (False,) + LOOK  # the first look: one untimed step first (page faults, first pulls)
TIMED = len(LOOK)
CLOSE = 0.10  # medians nearer than this (of the faster): a second look decides


class PartChoice:
    """Which way the fp32 rounds of the sets with parts go at each step (the same at every
    worker): whole(t) is asked once per round, by the communication thread, in step order."""

    def __init__(self, mode, backend, rank=0, workers=1):
        if mode not in MODES:
            raise ValueError("mode must be one of %s, got %r" % (", ".join(MODES), mode))
        self.mode, self.backend, self.rank, self.workers = mode, backend, rank, workers
        self.width = workers * TIMED  # the tally: a row of a look's timed steps per worker
        self.decided = None if mode == "auto" else mode == "whole"  # None: still trying
        self.trials = {}    # fp32 step -> whole? (the steps of the trials: what bytes_of_step reports for them)
        self.plan = list(TRIALS) if mode == "auto" else []  # the ways of the trial steps still to come
        self.look = []      # the timed steps of the current look
        self.timings = {}   # timed trial step -> [(start, the engine's stamp, its done array)], one per set
        self.medians = None  # after the decision: (parts, whole) seconds, each way's median step at its slowest worker
        self.first_look = None  # the first look's medians where they were too close to decide

    def whole(self, t):
        """Whether step t's fp32 rounds go whole (the communication thread, at a round's push)."""
        if t in self.trials:
            return self.trials[t]
        if self.decided is not None:
            return self.decided
        if not self.plan:  # a look is over: its times decide, or ask for a second look
            self.decided = self._decide()
            if self.decided is not None:
                return self.decided
            self.plan = list(LOOK)
        self.trials[t] = self.plan.pop(0)
        if t != min(self.trials):  # (the first step untimed)
            self.look.append(t)
        return self.trials[t]

    def mode_of(self, t):
        """whole(t) for a step whose rounds have run (no trial is started): bytes_of_step."""
        return self.trials.get(t, bool(self.decided))

    def timing(self, t):
        """Whether step t's rounds are timed: a trial step after the first."""
        return self.decided is None and t in self.look

    def time_step(self, t, start_s, wires):
        """Step t's round of one set began at start_s (time.perf_counter()); the engine stamps
        the time once every write of `wires` (the set's comm_buf, where every W lands) issued so
        far is done, without holding up this thread."""
        import mxnet as mx
        from cdsgd_mx.worker import engine_ops
        seconds, done = ctypes.c_double(0.0), mx.nd.zeros((1,))
        engine_ops.stamp(wires, [done], seconds)
        self.timings.setdefault(t, []).append((start_s, seconds, done))

    def _decide(self):
        """Every worker's times of the look's steps (a row each): whole buckets if their median
        step, at its slowest worker, took less than parts' median step; None (look again) where
        a first look's medians are within CLOSE."""
        rows = np.zeros((self.workers, TIMED), np.float32)
        for j, t in enumerate(self.look):
            for start, seconds, done in self.timings.get(t, ()):
                done.wait_to_read()
                rows[self.rank, j] += seconds.value - start  # (a step's sets, one after another)
        self.timings = {}
        took = self.backend.tally(protocol.PARTS_KEY, rows.reshape(-1)).reshape(self.workers, TIMED).max(axis=0)
        medians = tuple(float(np.median([took[j] for j, t in enumerate(self.look) if self.trials[t] == way]))
                        for way in (False, True))
        self.look = []
        if self.first_look is None and max(medians) < (1 + CLOSE) * min(medians):
            self.first_look = medians
            return None
        self.medians = medians
        whole = medians[1] < medians[0]
        if self.rank == 0:
            again = "" if self.first_look is None else (
                "; a second look, the first within %d%%: parts %.1f ms, whole buckets %.1f ms"
                % (100 * CLOSE, 1e3 * self.first_look[0], 1e3 * self.first_look[1]))
            print("cdsgd_mx: fp32 rounds %s from now on (%d trial steps each way, the median step at its slowest "
                  "worker: parts %.1f ms, whole buckets %.1f ms%s; CDSGD_PARTS=parts or whole fixes the way)"
                  % ("in whole buckets" if whole else "in parts", LOOK.count(True), 1e3 * medians[0],
                     1e3 * medians[1], again), flush=True)
        return whole

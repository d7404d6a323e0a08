"""A run's record for the replay (cdsgd_mx.experiments.replay): with CDSGD_RECORD=DIR in the
environment, every worker's Trainer writes, at each step before its push, the weights its
forward used (x(t)) and its gradient g(t), so that the simulation can be fed the same
gradients and its weights compared with the run's, step by step.

DIR/rank<r>.json: what the simulation needs (algorithm, k, warm-up, threshold, rates, the
parameters' names and shapes in push order); DIR/rank<r>.rec: one fixed-size record per step
(RECORD(n)), flushed at every step so that a job stopped by a non-finite gradient keeps the step
that stopped it. Size: 8 bytes * (n + 2) per step and worker (LeNet-5: 0.5 MB).

API: ENV, RECORD(n), from_env(trainer) -> Recorder or None, Recorder.step(...), read(dir, rank).
"""
import json
import os

import numpy as np

ENV = "CDSGD_RECORD"
UNTIL = "CDSGD_RECORD_UNTIL"  # optional: record steps 0 .. UNTIL only (the rest runs unrecorded)


def RECORD(n):
    """One step: its number, batch size, global and local rate, then x and g (n values each)."""
    return np.dtype([("head", "<f8", (4,)), ("x", "<f4", (n,)), ("g", "<f4", (n,))])


class Recorder:
    def __init__(self, folder, rank, meta, until=None):
        os.makedirs(folder, exist_ok=True)
        self.n = sum(int(np.prod(s)) for s in meta["shapes"])
        self.until = until
        with open(os.path.join(folder, "rank%d.json" % rank), "w") as f:
            json.dump(dict(meta, rank=rank), f, indent=1)
        self.file = open(os.path.join(folder, "rank%d.rec" % rank), "wb")

    def step(self, t, batch, lr, local_lr, weights, grads):
        """weights, grads: this worker's arrays (numpy), in push order."""
        if self.until is not None and t > self.until:
            return
        rec = np.zeros((), RECORD(self.n))
        rec["head"] = (t, batch, lr, local_lr)
        rec["x"] = np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in weights])
        rec["g"] = np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in grads])
        self.file.write(rec.tobytes())
        self.file.flush()  # a job that stops at this step's push keeps it


def from_env(meta_of, rank):
    """A Recorder when CDSGD_RECORD names a folder, else None. meta_of(): the run's settings."""
    folder = os.environ.get(ENV)
    if not folder:
        return None
    until = os.environ.get(UNTIL)
    return Recorder(folder, rank, meta_of(), int(until) if until else None)


def read(folder, rank):
    """(meta, records memory-mapped) of one worker's record."""
    with open(os.path.join(folder, "rank%d.json" % rank)) as f:
        meta = json.load(f)
    n = sum(int(np.prod(s)) for s in meta["shapes"])
    path = os.path.join(folder, "rank%d.rec" % rank)
    size = RECORD(n).itemsize
    steps = os.path.getsize(path) // size  # (a record cut short by a killed job is left out)
    return meta, np.memmap(path, RECORD(n), "r", shape=(steps,)) if steps else np.zeros(0, RECORD(n))

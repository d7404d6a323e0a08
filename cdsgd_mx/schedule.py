"""The step schedule of the four algorithms (Algorithm 1 of the paper and its relatives).

Steps t = 0, 1, 2, ...; n = warmup_steps. W(t) = global weights, x(t) = weights used for
forward/backward, g(t) = a worker's gradient at step t.

- warm-up (t < n), and ssgd/bitsgd always: x(t) = W(t).
- odsgd/cdsgd, t >= n: x(t) = W(t-1) - local step with g(t-1) (one-step delay): so from step
  n - 1 on, a step writes x(t+1) from the local update and leaves its round in flight.
- push: fp32 during warm-up and always for ssgd/odsgd; bitsgd pushes 2-bit codes every step
  after warm-up; cdsgd, with c = t - n, pushes fp32 when c % k == 0 (k-step correction) and
  2-bit codes otherwise.
"""
ALGORITHMS = ("ssgd", "bitsgd", "odsgd", "cdsgd")
COMPRESSING = ("bitsgd", "cdsgd")
DELAYED = ("odsgd", "cdsgd")


class Schedule:
    def __init__(self, algorithm, warmup_steps, k):
        self.algorithm = algorithm
        self.warmup_steps = warmup_steps
        self.k = k

    def in_warmup(self, t):
        return t < self.warmup_steps

    def compressed(self, t):
        """Does step t push 2-bit codes (else the fp32 gradient)?"""
        if self.in_warmup(t) or self.algorithm not in COMPRESSING:
            return False
        if self.algorithm == "bitsgd":
            return True
        return (t - self.warmup_steps) % self.k != 0

    def delayed(self, t):
        """Does step t produce x(t+1) by the local update, leaving its round in flight?"""
        return self.algorithm in DELAYED and t >= self.warmup_steps - 1

    def phase(self, t):
        if self.in_warmup(t):
            return "warmup"
        if self.algorithm == "cdsgd":
            return "compressed" if self.compressed(t) else "correction"
        return "formal"

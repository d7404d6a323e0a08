"""The paper's time-cost model (section 3.3, eqs. 2-9), its calibration, and the choice of k.

Symbols (Table 1): tau = computation (forward + backward) per iteration; phi = uncompressed
communication per iteration; psi = compressed communication per iteration; delta = the extra
time compression costs. All in the same unit (ms in this project).

2 bits both ways (issue 29) adds psi_pull: the compressed communication per iteration when the
pull is 2-bit too (a compressed round's push and pull, with the servers' and the workers'
codec work in it). With pull=True a compressed iteration costs delta + psi_pull instead of
delta + psi; CD-SGD's corrections stay fp32 both ways and cost phi_pull where it was measured:
the correction round as it runs with 2-bit pulls (fp32 push and pull, and both sides move V by
the codes of W - V), else phi.
"""
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Costs:
    tau: float    # computation per iteration
    phi: float    # fp32 communication per iteration
    psi: float    # 2-bit communication per iteration
    delta: float  # compression overhead per iteration
    psi_pull: Optional[float] = None  # 2-bit communication per iteration with 2-bit pulls too
    phi_pull: Optional[float] = None  # CD-SGD's correction round with 2-bit pulls (V tracked)

    def __post_init__(self):
        for name in ("tau", "phi", "psi", "delta") + tuple(n for n in ("psi_pull", "phi_pull")
                                                           if getattr(self, n) is not None):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError("%s must be a number >= 0, got %r" % (name, value))

    def compressed(self, pull=False):
        """psi, or psi_pull with 2-bit pulls (which must then have been measured)."""
        if not pull:
            return self.psi
        if self.psi_pull is None:
            raise ValueError("psi_pull (a compressed round with a 2-bit pull) was not measured")
        return self.psi_pull


def t_ssgd(c):
    """eq. 2: T = tau + phi."""
    return c.tau + c.phi


def t_loc(c):
    """eq. 4: the local update (OD-SGD) hides the shorter of computation and communication."""
    return c.tau if c.tau > c.phi else c.phi


def t_bit(c, pull=False):
    """eq. 5: T = tau + delta + psi (psi_pull with 2-bit pulls)."""
    return c.tau + c.delta + c.compressed(pull)


def phi_cd(c, i, k, pull=False):
    """eq. 6: CD-SGD's communication in iteration i: compressed unless i mod k == 0."""
    if i % k != 0:
        return c.delta + c.compressed(pull)
    return c.phi_pull if pull and c.phi_pull is not None else c.phi


def t_cd(c, i, k, pull=False):
    """eq. 7: CD-SGD's iteration i costs tau when computation dominates, else its communication."""
    comm = phi_cd(c, i, k, pull)
    if c.tau > comm:
        return c.tau
    return comm


def saving_vs_loc(c, i, k):
    """eq. 8: T^loc - T^cd for iteration i."""
    return t_loc(c) - t_cd(c, i, k)


def saving_vs_bit(c, i, k):
    """eq. 9: T^bit - T^cd for iteration i."""
    return t_bit(c) - t_cd(c, i, k)


def mean_t_cd(c, k, pull=False):
    """CD-SGD's mean iteration time over one period of k iterations; when communication
    dominates it is ((k-1)(delta+psi) + phi) / k, the paper's theoretical average."""
    return sum(t_cd(c, i, k, pull) for i in range(k)) / k


def cd_communication(phi, psi_plus_delta, k):
    """CD-SGD's mean communication per step, eq. 6 averaged over k steps: ((k-1)(psi+delta) + phi)/k
    (an fp32 correction every k-th step, 2-bit rounds between)."""
    return ((k - 1) * psi_plus_delta + phi) / k


def predict(c, k):
    """Predicted mean iteration time of each algorithm (and of BIT-SGD and CD-SGD with 2-bit
    pulls, 'bitsgd_2bit' and 'cdsgd_2bit', where psi_pull was measured)."""
    out = {"ssgd": t_ssgd(c), "bitsgd": t_bit(c), "odsgd": t_loc(c), "cdsgd": mean_t_cd(c, k)}
    if c.psi_pull is not None:
        out.update(bitsgd_2bit=t_bit(c, True), cdsgd_2bit=mean_t_cd(c, k, True))
    return out


def calibrate(compute_ms, fp32_round_ms, compressed_round_ms, compress_ms=0.0, pull_round_ms=None,
              correction_pull_round_ms=None):
    """Costs from measurements: tau = forward/backward alone; phi = an fp32 round alone;
    psi = a 2-bit round alone minus the compression time in it; delta = that compression time
    (quantize + wire encode; from the codec benchmark or a trace); psi_pull = a 2-bit round
    with a 2-bit pull alone, minus the same; phi_pull = CD-SGD's correction round with 2-bit
    pulls alone (None: phi)."""
    psi = max(0.0, compressed_round_ms - compress_ms)
    psi_pull = None if pull_round_ms is None else max(0.0, pull_round_ms - compress_ms)
    return Costs(tau=compute_ms, phi=fp32_round_ms, psi=psi, delta=compress_ms, psi_pull=psi_pull,
                 phi_pull=correction_pull_round_ms)


def choose_k(c, tolerance=0.05, k_max=64, pull=False):
    """k: auto. The smallest k (the most fp32 corrections, i.e. closest to S-SGD's accuracy)
    whose mean iteration time is within `tolerance` of the fastest k up to k_max (with pull,
    compressed iterations cost psi_pull)."""
    if not tolerance >= 0:
        raise ValueError("tolerance must be a number >= 0, got %r" % (tolerance,))
    if int(k_max) < 1:
        raise ValueError("k_max must be >= 1, got %r" % (k_max,))
    best = min(mean_t_cd(c, k, pull) for k in range(1, int(k_max) + 1))
    for k in range(1, int(k_max) + 1):
        if mean_t_cd(c, k, pull) <= (1 + tolerance) * best:
            return k
    return int(k_max)

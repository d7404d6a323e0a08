"""How far a handful of runs can settle a claim about accuracy: mean, standard deviation and n
of a set of runs, the paired difference of two algorithms run with the same seeds and its
t-based confidence interval, and a three-way verdict on a claim read from that interval.

    from cdsgd_mx.experiments import spread
    d = spread.paired(cdsgd_accs, ssgd_accs)          # lists matched by seed
    spread.exceeds(d, -0.001)   # "CD-SGD >= S-SGD - 0.1 pp": 'holds', 'does not hold' or 'cannot tell at this n'

Pairing by seed is what makes a few seeds worth something: runs with the same seed share the
initial weights, the shard and the data order, so the seed-to-seed swing common to both
algorithms cancels out of their difference. Plain Python (no SciPy): the t quantile comes from
integrating Student's density.
"""
import math
from collections import namedtuple
from functools import lru_cache

HOLDS, FAILS, CANNOT_TELL = "holds", "does not hold", "cannot tell at this n"

# each verdict rule in words, for tables that state which rule they used
RULES = {
    "exceeds": "holds if the whole interval lies above the margin, does not hold if it lies wholly below, "
               "else cannot tell",
    "within": "holds if the whole interval lies inside [-margin, +margin], does not hold if it lies wholly "
              "outside, else cannot tell",
    "all_of": "holds if every part holds, does not hold if any part does not, else cannot tell",
}

Summary = namedtuple("Summary", "mean std n min max")
Difference = namedtuple("Difference", "mean std n low high level")  # of a - b; [low, high]: the interval


def summarize(values):
    """Mean, sample standard deviation (n - 1 in the denominator; 0 for one value), n, min, max."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("summarize needs at least one value")
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return Summary(mean, std, n, min(values), max(values))


def _t_cdf_half(theta, df):
    """P(0 <= T <= sqrt(df) tan(theta)) for Student's T with df degrees of freedom. With t =
    sqrt(df) tan(theta) the density becomes c cos(theta)^(df - 1) on [0, pi/2): bounded and
    smooth, so Simpson's rule on a fixed grid is exact to ~1e-12."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    steps = 2000
    h = theta / steps
    total = 0.0
    for i in range(steps + 1):
        w = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total += w * math.cos(i * h) ** (df - 1)
    return c * total * h / 3


@lru_cache(maxsize=256)
def t_quantile(p, df):
    """The p-quantile (0.5 < p < 1) of Student's t with df >= 1 degrees of freedom."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError("t_quantile needs 0.5 < p < 1 and df >= 1, got p=%r, df=%r" % (p, df))
    lo, hi = 0.0, math.pi / 2
    for _ in range(60):  # bisection on theta: the half-CDF rises from 0 to 1/2
        mid = (lo + hi) / 2
        if _t_cdf_half(mid, df) < p - 0.5:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan((lo + hi) / 2)


def interval(values, level=0.95):
    """(mean, low, high): the two-sided t interval of the mean at `level`; with one value the
    interval is unbounded (one run says nothing about its spread)."""
    s = summarize(values)
    if s.n < 2:
        return s.mean, -math.inf, math.inf
    half = t_quantile(0.5 + level / 2, s.n - 1) * s.std / math.sqrt(s.n)
    return s.mean, s.mean - half, s.mean + half


def paired(a, b, level=0.95):
    """The difference a - b of two lists matched position by position (by seed, or by test
    sample): its mean, standard deviation, n and t interval at `level`."""
    if len(a) != len(b):
        raise ValueError("paired needs lists of the same length (matched by seed), got %d and %d" % (len(a), len(b)))
    d = [float(x) - float(y) for x, y in zip(a, b)]
    s = summarize(d)
    mean, low, high = interval(d, level)
    return Difference(mean, s.std, s.n, low, high, level)


Rate = namedtuple("Rate", "k n rate low high level")  # k events in n runs; [low, high]: the interval


def _binomial_cdf(k, n, p):
    """P(X <= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def _solve(f, target):
    """The p in [0, 1] where the decreasing f(p) crosses target (bisection to 1e-12)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > target else (lo, mid)
    return (lo + hi) / 2


def rate(k, n, level=0.95):
    """How often an event came (k runs of n, e.g. diverged): k / n and its exact two-sided
    Clopper-Pearson interval at `level` (never narrower than asked, even at k = 0 or k = n)."""
    if not 0 <= k <= n or n < 1:
        raise ValueError("rate needs 0 <= k <= n and n >= 1, got k=%r, n=%r" % (k, n))
    tail = (1 - level) / 2
    low = 0.0 if k == 0 else _solve(lambda p: _binomial_cdf(k - 1, n, p), 1 - tail)     # P(X >= k) = tail
    high = 1.0 if k == n else _solve(lambda p: _binomial_cdf(k, n, p), tail)             # P(X <= k) = tail
    return Rate(k, n, k / n, low, high, level)


def exceeds(diff, margin=0.0):
    """Verdict on "the true difference is above margin" (a > b: margin 0; a >= b - 0.1 pp on
    accuracies as fractions: margin -0.001)."""
    if diff.low > margin:
        return HOLDS
    if diff.high < margin:
        return FAILS
    return CANNOT_TELL


def within(diff, margin):
    """Verdict on "a and b differ by at most margin either way" (a is about b)."""
    if -margin <= diff.low and diff.high <= margin:
        return HOLDS
    if diff.low > margin or diff.high < -margin:
        return FAILS
    return CANNOT_TELL


def all_of(verdicts):
    """Verdict on a claim made of parts that must all hold ("k = 2 beats every other k")."""
    verdicts = list(verdicts)
    if verdicts and all(v == HOLDS for v in verdicts):
        return HOLDS
    return FAILS if FAILS in verdicts else CANNOT_TELL

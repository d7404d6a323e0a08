"""cdsgd_mx.experiments.spread: the statistics behind every multi-seed verdict, against values worked out
by hand and Student's t table."""
import math

import pytest

from cdsgd_mx.experiments import spread


def test_summary_of_four_values():
    s = spread.summarize([1, 2, 3, 4])
    # mean 2.5; squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, over n - 1 = 3
    assert s.mean == 2.5 and s.std == pytest.approx(math.sqrt(5 / 3)) and s.n == 4
    assert (s.min, s.max) == (1.0, 4.0)
    assert spread.summarize([0.7]) == spread.Summary(0.7, 0.0, 1, 0.7, 0.7)
    with pytest.raises(ValueError, match="at least one value"):
        spread.summarize([])


@pytest.mark.parametrize("df,q975", [(1, 12.7062047), (2, 4.3026527), (4, 2.7764451), (9, 2.2621572),
                                     (30, 2.0422725)])
def test_t_quantile_matches_the_table(df, q975):
    assert spread.t_quantile(0.975, df) == pytest.approx(q975, abs=1e-6)


def test_t_quantile_other_levels_and_bad_input():
    assert spread.t_quantile(0.995, 4) == pytest.approx(4.6040949, abs=1e-6)  # 99% two-sided, df 4
    assert spread.t_quantile(0.95, 1) == pytest.approx(6.3137515, abs=1e-6)
    for p, df in ((0.5, 3), (1.0, 3), (0.975, 0)):
        with pytest.raises(ValueError, match="0.5 < p < 1 and df >= 1"):
            spread.t_quantile(p, df)


def test_paired_difference_and_its_interval_by_hand():
    # differences 0.10, 0.15, 0.10, 0.10: mean 0.1125, std 0.025, n 4; t(0.975, 3) = 3.182446
    d = spread.paired([0.5, 0.6, 0.7, 0.8], [0.4, 0.45, 0.6, 0.7])
    assert (d.mean, d.n, d.level) == (pytest.approx(0.1125), 4, 0.95)
    assert d.std == pytest.approx(0.025)
    half = 3.182446 * 0.025 / 2
    assert (d.low, d.high) == (pytest.approx(0.1125 - half, abs=1e-7), pytest.approx(0.1125 + half, abs=1e-7))
    # symmetric differences: mean 0, std 0.01, n 3, half-width 4.302653 * 0.01 / sqrt(3)
    d = spread.paired([0.99, 0.98, 0.97], [0.98, 0.98, 0.98])
    assert d.mean == pytest.approx(0, abs=1e-15) and d.high == pytest.approx(4.302653 * 0.01 / math.sqrt(3))
    with pytest.raises(ValueError, match="same length"):
        spread.paired([1, 2], [1])


def test_one_seed_gives_no_interval():
    d = spread.paired([0.99], [0.90])
    assert d.mean == pytest.approx(0.09) and (d.low, d.high) == (-math.inf, math.inf)
    assert spread.exceeds(d, 0) == spread.within(d, 1) == spread.CANNOT_TELL


def diff(low, high):
    return spread.Difference((low + high) / 2, 1.0, 5, low, high, 0.95)


@pytest.mark.parametrize("low,high,margin,verdict", [
    (0.1, 0.5, 0.0, "holds"),                      # wholly above
    (-0.5, -0.1, 0.0, "does not hold"),            # wholly below
    (-0.1, 0.5, 0.0, "cannot tell at this n"),     # straddles the margin
    (-0.0009, 0.002, -0.001, "holds"),             # a >= b - 0.1 pp: above -0.001
    (-0.004, -0.002, -0.001, "does not hold"),
])
def test_exceeds_has_three_outcomes(low, high, margin, verdict):
    assert spread.exceeds(diff(low, high), margin) == verdict


@pytest.mark.parametrize("low,high,verdict", [
    (-0.5, 0.8, "holds"),                  # inside [-1, 1]
    (1.2, 3.0, "does not hold"),           # wholly above +1
    (-3.0, -1.5, "does not hold"),         # wholly below -1
    (0.5, 1.5, "cannot tell at this n"),   # partly outside
])
def test_within_has_three_outcomes(low, high, verdict):
    assert spread.within(diff(low, high), 1.0) == verdict


def test_all_of():
    H, F, C = spread.HOLDS, spread.FAILS, spread.CANNOT_TELL
    assert spread.all_of([H, H, H]) == H
    assert spread.all_of([H, C, F]) == F
    assert spread.all_of([H, C, H]) == C
    assert spread.all_of([]) == C


def test_a_rate_has_the_exact_clopper_pearson_interval():
    # closed forms at the edges: k = 0 gives [0, 1 - (0.025)^(1/n)], k = n its mirror
    r = spread.rate(0, 20)
    assert (r.rate, r.low) == (0.0, 0.0) and r.high == pytest.approx(1 - 0.025 ** (1 / 20), abs=1e-9)
    r = spread.rate(20, 20)
    assert r.high == 1.0 and r.low == pytest.approx(0.025 ** (1 / 20), abs=1e-9)
    # published values (e.g. Clopper and Pearson's tables; R's binom.test)
    r = spread.rate(1, 20)
    assert r.rate == 0.05 and r.low == pytest.approx(0.001265, abs=1e-6) and r.high == pytest.approx(0.248733, abs=1e-6)
    r = spread.rate(5, 10)
    assert r.low == pytest.approx(0.187086, abs=1e-6) and r.high == pytest.approx(0.812914, abs=1e-6)
    # the same coverage from a binomial tail at each end
    r = spread.rate(3, 17)
    assert spread._binomial_cdf(2, 17, r.low) == pytest.approx(0.975, abs=1e-9)
    assert spread._binomial_cdf(3, 17, r.high) == pytest.approx(0.025, abs=1e-9)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        spread.rate(3, 2)

"""The time model against hand-computed cases of eqs. 2-9."""
import pytest

from cdsgd_mx.experiments import timemodel as tm

COMM_BOUND = tm.Costs(tau=40, phi=200, psi=100, delta=10)   # communication dominates
COMPUTE_BOUND = tm.Costs(tau=300, phi=200, psi=100, delta=10)
MIDDLE = tm.Costs(tau=150, phi=200, psi=100, delta=10)       # phi > tau > delta + psi


def test_eq2_eq4_eq5():
    assert tm.t_ssgd(COMM_BOUND) == 240
    assert tm.t_loc(COMM_BOUND) == 200 and tm.t_loc(COMPUTE_BOUND) == 300
    assert tm.t_bit(COMM_BOUND) == 150


def test_eq6_eq7():
    k = 4
    assert [tm.phi_cd(COMM_BOUND, i, k) for i in range(5)] == [200, 110, 110, 110, 200]
    assert [tm.t_cd(COMM_BOUND, i, k) for i in range(4)] == [200, 110, 110, 110]   # cases 2, 3
    assert [tm.t_cd(COMPUTE_BOUND, i, k) for i in range(4)] == [300, 300, 300, 300]  # case 1
    assert [tm.t_cd(MIDDLE, i, k) for i in range(4)] == [200, 150, 150, 150]


def test_eq8_cases():
    k = 4
    assert tm.saving_vs_loc(COMPUTE_BOUND, 1, k) == 0                    # case 1: tau > phi
    assert tm.saving_vs_loc(MIDDLE, 1, k) == 200 - 150                    # case 2: phi - tau
    assert tm.saving_vs_loc(COMM_BOUND, 1, k) == 200 - 10 - 100           # case 3: phi - delta - psi
    assert tm.saving_vs_loc(COMM_BOUND, 4, k) == 0                        # case 4: correction step


def test_eq9_cases():
    k = 4
    assert tm.saving_vs_bit(COMPUTE_BOUND, 1, k) == 10 + 100              # case 1: delta + psi
    assert tm.saving_vs_bit(COMM_BOUND, 1, k) == 40                       # case 2: tau
    assert tm.saving_vs_bit(COMM_BOUND, 0, k) == 40 + 10 + 100 - 200      # case 3: may be negative


def test_theoretical_average_and_predictions():
    assert tm.mean_t_cd(COMM_BOUND, 5) == pytest.approx((4 * 110 + 200) / 5)
    p = tm.predict(COMM_BOUND, 5)
    assert p == {"ssgd": 240, "bitsgd": 150, "odsgd": 200, "cdsgd": pytest.approx(128)}


def test_calibration_and_auto_k():
    c = tm.calibrate(compute_ms=45, fp32_round_ms=196, compressed_round_ms=113, compress_ms=3)
    assert (c.tau, c.phi, c.psi, c.delta) == (45, 196, 110, 3)
    # communication-bound: larger k is faster; auto picks the smallest k within 5% of the best
    k = tm.choose_k(c, tolerance=0.05)
    assert tm.mean_t_cd(c, k) <= 1.05 * min(tm.mean_t_cd(c, j) for j in range(1, 65))
    assert tm.mean_t_cd(c, k - 1) > 1.05 * min(tm.mean_t_cd(c, j) for j in range(1, 65))
    assert tm.choose_k(COMPUTE_BOUND) == 1  # compute hides everything: correct every step


@pytest.mark.parametrize("field", ["tau", "phi", "psi", "delta"])
def test_bad_costs(field):
    args = dict(tau=1, phi=1, psi=1, delta=1)
    args[field] = -1
    with pytest.raises(ValueError, match="%s must be a number >= 0" % field):
        tm.Costs(**args)


def test_a_2bit_pull_term():
    """psi_pull (issue 29): compressed iterations cost delta + psi_pull with 2-bit pulls; CD-SGD's
    corrections stay phi; without it measured, asking for it is an error."""
    c = tm.calibrate(10.0, 100.0, 60.0, compress_ms=5.0, pull_round_ms=15.0)
    assert c.psi == 55.0 and c.psi_pull == 10.0
    assert tm.t_bit(c, pull=True) == 10.0 + 5.0 + 10.0
    assert tm.mean_t_cd(c, 5, pull=True) == (4 * 15.0 + 100.0) / 5  # communication dominates
    p = tm.predict(c, 5)
    assert p["bitsgd_2bit"] == 25.0 and p["cdsgd_2bit"] == (4 * 15.0 + 100.0) / 5 and p["cdsgd"] == (4 * 60 + 100) / 5
    assert tm.choose_k(c, pull=True) >= tm.choose_k(c)  # cheaper compressed rounds: fewer corrections pay
    with pytest.raises(ValueError, match="psi_pull"):
        tm.t_bit(tm.calibrate(10.0, 100.0, 60.0), pull=True)
    assert "bitsgd_2bit" not in tm.predict(tm.calibrate(10.0, 100.0, 60.0), 5)


def test_cdsgd_both_ways_corrections_cost_their_own_round():
    """phi_pull: CD-SGD's correction with 2-bit pulls (fp32 both ways, V tracked on both sides)
    costs what it was measured to cost alone; one-way CD-SGD and the other algorithms keep phi."""
    c = tm.calibrate(10.0, 100.0, 60.0, compress_ms=5.0, pull_round_ms=15.0, correction_pull_round_ms=130.0)
    assert c.phi_pull == 130.0
    assert [tm.phi_cd(c, i, 5, pull=True) for i in range(5)] == [130.0] + [15.0] * 4
    assert [tm.phi_cd(c, i, 5) for i in range(5)] == [100.0] + [60.0] * 4
    p = tm.predict(c, 5)
    assert p["cdsgd_2bit"] == (4 * 15.0 + 130.0) / 5 and p["cdsgd"] == (4 * 60 + 100) / 5 and p["ssgd"] == 110.0
    with pytest.raises(ValueError, match="phi_pull must be a number >= 0"):
        tm.Costs(tau=1, phi=1, psi=1, delta=1, phi_pull=-1)

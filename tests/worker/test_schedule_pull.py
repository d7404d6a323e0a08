"""Which steps pull what with 2 bits both ways (issue 40): warm-up re-syncs, CD-SGD's corrections
are tracked (V moves by codes, not V := W) unless k = 1, and BIT-SGD never re-syncs by default."""
from cdsgd_mx.worker.schedule import Schedule


def test_cdsgd_corrections_are_tracked_and_warm_up_resyncs():
    s = Schedule("cdsgd", 2, 3, "2bit")
    assert [s.pull_tracked(t) for t in range(8)] == [False, False, True, False, False, True, False, False]
    assert [s.pull_compressed(t) for t in range(8)] == [False, False, False, True, True, False, True, True]


def test_with_k_1_every_step_is_fp32_both_ways():
    s = Schedule("cdsgd", 2, 1, "2bit")
    assert not any(s.pull_tracked(t) or s.pull_compressed(t) for t in range(8))


def test_bitsgd_pulls_codes_after_warm_up_and_resyncs_only_when_asked():
    assert [Schedule("bitsgd", 1, 3, "2bit").pull_compressed(t) for t in range(6)] == [False] + [True] * 5
    assert [Schedule("bitsgd", 1, 3, "2bit", resync_every=2).pull_compressed(t) for t in range(6)] == \
        [False, False, True, False, True, False]
    assert not any(Schedule("bitsgd", 1, 3, "2bit").pull_tracked(t) for t in range(6))
    assert not any(Schedule("cdsgd", 1, 3, "none").pull_tracked(t) for t in range(6))

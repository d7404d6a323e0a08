"""part_choice.py: the trial order, the decision from every worker's times (each way's median
step at its slowest worker), the fixed
modes, and the one-line errors of CDSGD_PARTS; in process and in milliseconds (a job that
takes the trials over the network: tests/worker/test_engine.py)."""
import ctypes

import numpy as np
import pytest

import cdsgd_mx
from cdsgd_mx.wire import protocol
from cdsgd_mx.worker import part_choice
from cdsgd_mx.worker.part_choice import CLOSE, LOOK, TIMED, TRIALS, PartChoice


class Tally:
    """A backend whose tally adds what the other workers took (`others`) to this worker's."""

    def __init__(self, others):
        self.others, self.calls = np.asarray(others, np.float32), []

    def tally(self, key, value):
        self.calls.append((key, np.array(value)))
        return np.asarray(value, np.float32) + self.others


class Done:
    def wait_to_read(self):
        pass


def timed(choice, times):
    """Run the trials: fp32 steps 0, 1, ... (every other step a 2-bit one in between: never
    asked), the j-th timed step taking times(j, whole) seconds by its stamp (a dict: by the
    way alone). Returns the ways taken."""
    ways, j = [], 0
    for t in range(0, 2 * len(TRIALS), 2):
        whole = choice.whole(t)
        ways.append(whole)
        if choice.timing(t):
            took = times[whole] if isinstance(times, dict) else times(j, whole)
            choice.timings.setdefault(t, []).append((10.0, ctypes.c_double(10.0 + took), Done()))
            j += 1
    return ways


def test_the_trials_go_parts_then_p_w_w_p_p_w_and_the_tally_decides(capsys):
    backend = Tally(np.zeros(TIMED))
    choice = PartChoice("auto", backend, rank=0)
    assert timed(choice, {False: 0.010, True: 0.004}) == list(TRIALS)
    assert choice.decided is None and not backend.calls  # nothing decided before the step after the trials
    assert choice.whole(100) is True and choice.decided is True
    (key, mine), = backend.calls
    assert key == protocol.PARTS_KEY and choice.width == TIMED
    np.testing.assert_allclose(mine, [0.004 if w else 0.010 for w in TRIALS[1:]], rtol=1e-5)  # the first step untimed
    np.testing.assert_allclose(choice.medians, [0.010, 0.004], rtol=1e-5)
    assert "fp32 rounds in whole buckets from now on" in capsys.readouterr().out
    # the trial steps keep the way they went (the bytes they pushed), the later ones the decision
    assert [choice.mode_of(t) for t in range(0, 2 * len(TRIALS), 2)] == list(TRIALS)
    assert choice.mode_of(101) is True and choice.whole(102) is True and len(backend.calls) == 1


def test_a_step_took_what_its_slowest_worker_took():
    """Parts faster here (rank 1 of 2), whole buckets faster on rank 0 by more: every step's
    time is its slower worker's, so every worker takes whole; each worker's row is its own."""
    others = np.zeros((2, TIMED), np.float32)
    others[0] = [0.003 if w else 0.030 for w in TRIALS[1:]]
    backend = Tally(others.reshape(-1))
    choice = PartChoice("auto", backend, rank=1, workers=2)
    timed(choice, {False: 0.004, True: 0.005})
    assert choice.whole(100) is True
    mine = backend.calls[0][1].reshape(2, TIMED)
    assert not mine[0].any() and mine[1].all()
    np.testing.assert_allclose(choice.medians, [0.030, 0.005], rtol=1e-5)


def test_one_slow_step_does_not_decide():
    """Parts take 4 ms but one parts step 50 ms (their sum 58 ms against whole buckets' 18):
    the median parts step is still the faster."""
    choice = PartChoice("auto", Tally(np.zeros(TIMED)), rank=0)
    timed(choice, lambda j, whole: 0.006 if whole else (0.050 if j == 0 else 0.004))
    assert choice.whole(100) is False
    np.testing.assert_allclose(choice.medians, [0.004, 0.006], rtol=1e-5)


def test_parts_where_they_are_faster_and_only_rank_0_says_so(capsys):
    for rank in (0, 1):
        choice = PartChoice("auto", Tally(np.zeros(2 * TIMED)), rank=rank, workers=2)
        timed(choice, {False: 0.004, True: 0.005})
        assert choice.whole(100) is False
        out = capsys.readouterr().out
        assert ("fp32 rounds in parts from now on" in out) == (rank == 0)


def looks(choice, times, steps):
    """Run fp32 steps 0..steps-1, the j-th timed one taking times(j, whole) seconds; the ways taken."""
    ways, j = [], 0
    for t in range(steps):
        whole = choice.whole(t)
        ways.append(whole)
        if choice.timing(t):
            choice.timings.setdefault(t, []).append((10.0, ctypes.c_double(10.0 + times(j, whole)), Done()))
            j += 1
    return ways


def test_a_first_look_too_close_to_tell_takes_a_second_which_decides(capsys):
    """Parts 10.0 ms against whole buckets' 10.5 (within CLOSE) in the first look: no decision,
    the next 6 fp32 steps look again (P W W P P W), and the second look's medians alone decide
    (parts 4 ms, whole 8): parts, said once with both looks."""
    backend = Tally(np.zeros(TIMED))
    choice = PartChoice("auto", backend, rank=0)
    first = lambda j, whole: 0.0105 if whole else 0.0100
    second = lambda j, whole: 0.008 if whole else 0.004
    ways = looks(choice, lambda j, whole: first(j, whole) if j < TIMED else second(j, whole), len(TRIALS) + TIMED + 2)
    assert 0.0105 < (1 + CLOSE) * 0.0100
    assert ways == list(TRIALS) + list(LOOK) + [False, False]
    assert len(backend.calls) == 2 and choice.decided is False
    np.testing.assert_allclose(choice.first_look, [0.0100, 0.0105], rtol=1e-5)
    np.testing.assert_allclose(choice.medians, [0.004, 0.008], rtol=1e-5)
    out = capsys.readouterr().out
    assert out.count("fp32 rounds in parts from now on") == 1
    assert "parts 4.0 ms, whole buckets 8.0 ms; a second look, the first within 10%: parts 10.0 ms, " \
        "whole buckets 10.5 ms;" in out
    # the second look's steps push their own way (bytes_of_step), the later ones the decision's
    assert [choice.mode_of(t) for t in range(len(ways))] == ways


def test_a_second_look_decides_however_close():
    """No third look: a second look as close as the first decides by its medians."""
    backend = Tally(np.zeros(TIMED))
    choice = PartChoice("auto", backend, rank=0)
    ways = looks(choice, lambda j, whole: 0.0100 if whole else 0.0101, len(TRIALS) + TIMED + 3)
    assert ways[-2:] == [True, True] and choice.decided is True and len(backend.calls) == 2
    assert choice.whole(1000) is True and len(backend.calls) == 2


def test_medians_apart_by_more_than_close_decide_at_the_first_look():
    choice = PartChoice("auto", Tally(np.zeros(TIMED)), rank=0)
    ways = looks(choice, lambda j, whole: 0.0100 * (1 + 1.5 * CLOSE) if whole else 0.0100, len(TRIALS) + 2)
    assert ways == list(TRIALS) + [False, False] and choice.first_look is None


@pytest.mark.parametrize("mode,whole", [("parts", False), ("whole", True)])
def test_a_fixed_way_tries_nothing(mode, whole):
    backend = Tally(np.zeros(TIMED))
    choice = PartChoice(mode, backend)
    assert [choice.whole(t) for t in range(20)] == [whole] * 20
    assert not any(choice.timing(t) for t in range(20)) and not backend.calls


@pytest.mark.parametrize("value", ["", "Auto", "on", "0"])
def test_a_bad_parts_setting_is_refused_in_one_line(value):
    from cdsgd_mx.worker.config import parts_choice
    with pytest.raises(cdsgd_mx.ConfigError, match="^CDSGD_PARTS must be one of auto, parts, whole .*got '%s'$" % value):
        parts_choice(environ={"CDSGD_PARTS": value})
    assert parts_choice(environ={}) == "auto" and parts_choice(environ={"CDSGD_PARTS": "whole"}) == "whole"
    assert part_choice.MODES == ("auto", "parts", "whole")

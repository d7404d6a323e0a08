"""part_choice.py: the trial order, the decision from every worker's added times, the fixed
modes, and the one-line errors of CDSGD_PARTS; in process and in milliseconds (a job that
takes the trials over the network: tests/worker/test_engine.py)."""
import ctypes

import numpy as np
import pytest

import cdsgd_mx
from cdsgd_mx.wire import protocol
from cdsgd_mx.worker import part_choice
from cdsgd_mx.worker.part_choice import TRIALS, PartChoice


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
    asked), each timed step taking times[whole] seconds by its stamp. Returns the ways taken."""
    ways = []
    for t in range(0, 2 * len(TRIALS), 2):
        whole = choice.whole(t)
        ways.append(whole)
        if choice.timing(t):
            choice.timings.setdefault(t, []).append((10.0, ctypes.c_double(10.0 + times[whole]), Done()))
    return ways


def test_the_trials_go_parts_then_p_w_w_p_p_w_and_the_tally_decides(capsys):
    backend = Tally([0.0, 0.0])
    choice = PartChoice("auto", backend, rank=0)
    assert timed(choice, {False: 0.010, True: 0.004}) == list(TRIALS)
    assert choice.decided is None and not backend.calls  # nothing decided before the step after the trials
    assert choice.whole(100) is True and choice.decided is True
    (key, mine), = backend.calls
    assert key == protocol.PARTS_KEY
    np.testing.assert_allclose(mine, [3 * 0.010, 3 * 0.004], rtol=1e-5)  # the first (untimed) step left out
    assert "fp32 rounds in whole buckets from now on" in capsys.readouterr().out
    # the trial steps keep the way they went (the bytes they pushed), the later ones the decision
    assert [choice.mode_of(t) for t in range(0, 2 * len(TRIALS), 2)] == list(TRIALS)
    assert choice.mode_of(101) is True and choice.whole(102) is True and len(backend.calls) == 1


def test_the_other_workers_times_count_as_this_ones():
    """Parts faster here, whole buckets faster on the others by more: every worker takes whole."""
    choice = PartChoice("auto", Tally([0.030, 0.003]), rank=1)
    timed(choice, {False: 0.004, True: 0.005})
    assert choice.whole(100) is True
    np.testing.assert_allclose(choice.sums, [0.012 + 0.030, 0.015 + 0.003], rtol=1e-5)


def test_parts_where_they_are_faster_and_only_rank_0_says_so(capsys):
    for rank in (0, 1):
        choice = PartChoice("auto", Tally([0.0, 0.0]), rank=rank)
        timed(choice, {False: 0.004, True: 0.005})
        assert choice.whole(100) is False
        out = capsys.readouterr().out
        assert ("fp32 rounds in parts from now on" in out) == (rank == 0)


@pytest.mark.parametrize("mode,whole", [("parts", False), ("whole", True)])
def test_a_fixed_way_tries_nothing(mode, whole):
    backend = Tally([0.0, 0.0])
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

"""The golden run (issue 45): fig6, 300 steps, 2 workers, CD-SGD, seed 0, portable numerics.
Its final loss, test accuracy and weights are pinned here exactly. It guards what no other test
does: a change of the numbers that nobody meant (code, MXNet, a pin that stopped holding).

A change that moves them must, in the same commit, update GOLDEN and list every recorded result
in docs/reproduction/ that it makes stale in docs/reproduction/STALE.md, until it is
re-recorded (test_every_recorded_result_matches_the_golden_run_or_is_marked_stale)."""
import json
import os

import pytest

from cdsgd_mx.experiments import golden

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDED = os.path.join(ROOT, "docs", "reproduction")

# recorded 2026-11-27 at b2b73c0 on an AMD EPYC (AVX-512) with 2 cores; the same on 1 core
GOLDEN = {"loss": 0.7146001302947601, "test_accuracy": 0.9406,
          "weights_sha256": ["d3e7c6621603b6d449ebcb5c0e1e823c2bd79ddabe578f33a85edbe089a727c3",
                             "026f355b4ca771c58faf4862c86c36d1043186b89c8444b2032aa2c882eb9715"]}


@pytest.mark.xdist_group("fig6-quick")  # shares its run with other tests (tests/jobcache.py)
@pytest.mark.slow
def test_the_golden_run_gives_the_pinned_numbers_exactly():
    """The golden run as reproduce.py makes it beside every portable sweep (train.py with the
    config's `numerics: portable`, no CDSGD_NUMERICS): the quick fig6 sweep's, which
    test_reproduce.py checks too (one run for both: tests/jobcache.py).
    Slow: whichever of the two tests runs first pays for the sweep (about 65 s on 2 cores)."""
    from test_reproduce import fig6_quick
    sweep, proc = fig6_quick()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert golden.fingerprint(os.path.join(sweep, "logs", "golden")) == GOLDEN
    with open(os.path.join(sweep, "golden.json")) as f:
        assert json.load(f) == GOLDEN
    assert "golden run (the test's pinned numbers" in open(os.path.join(sweep, "fig6.md")).read()


def stale_folders():
    with open(os.path.join(RECORDED, "STALE.md")) as f:
        return {line.split("`")[1] for line in f if line.startswith("- `")}


def test_every_recorded_result_matches_the_golden_run_or_is_marked_stale():
    """A recorded sweep carries the golden numbers of the code that made it (reproduce.py runs
    the golden run beside it): equal to GOLDEN, it is current; else it must be in STALE.md."""
    stale = stale_folders()
    current = []
    for name in sorted(os.listdir(RECORDED)):
        folder = os.path.join(RECORDED, name)
        if not os.path.isdir(folder):
            continue
        made_with = None  # reproduce.py writes the golden numbers into golden.json, and seeds.json too
        for name_of in ("golden.json", "seeds.json"):
            path = os.path.join(folder, name_of)
            if made_with is None and os.path.exists(path):
                found = json.load(open(path))
                made_with = found.get("golden") if name_of == "seeds.json" else found
        if made_with == GOLDEN:
            current.append(name)
            assert name not in stale, "%s matches the golden run: take it off STALE.md" % name
        else:
            assert name in stale, ("docs/reproduction/%s was made by other numerics than the golden run pins (its "
                                   "golden: %r): re-record it, or list it in docs/reproduction/STALE.md" % (name, made_with))
    assert stale <= set(os.listdir(RECORDED)), "STALE.md names folders that are not there: %s" % (
        stale - set(os.listdir(RECORDED)))

"""Launched jobs whose results are a pure function of their arguments, run once per test session.

Several tests check the same run from different sides (the uninterrupted run of a checkpoint
test is the simulation test's run with the same arguments): the first to ask runs it, the others
get a copy of its results (docs/testing.md). Only for jobs that are exact and deterministic; a
test that needs a fresh job (timing, faults, files) runs its own."""
import copy

_results = {}


def once(key, run):
    """run() the first time key is asked for; a deep copy of its result every time."""
    if key not in _results:
        _results[key] = run()
    return copy.deepcopy(_results[key])

"""guards.py against a fake backend, in process and in milliseconds: the servers' handshake
answers, the workers' agreement rows, the non-finite vote."""
import contextlib

import numpy as np
import pytest

from cdsgd_mx.worker import guards
from cdsgd_mx.wire import protocol
from cdsgd_mx.worker.config import ConfigError


class FakeBackend:
    """What guards use of a backend: handshake answers, gathered rows, a tally."""

    def __init__(self, rank=0, num_workers=2, answers=None, rows=None, votes=None):
        self.rank, self.num_workers = rank, num_workers
        self.answers = answers or {}
        self.rows, self.votes = rows, votes
        self.opened, self.tallied = [], []

    def gather_rows(self, key, row):
        assert key == protocol.CONFIG_KEY
        return np.vstack([row] + [row.copy() if r is None else r(row.copy()) for r in self.rows])

    def open_tally(self, key, width):
        self.opened.append((key, width))

    def tally(self, key, value):
        self.tallied.append(value.copy())
        return value + self.votes


class FakeSet:
    def __init__(self, keys, bad=None):
        self.keys, self.shapes, self.bad = keys, {k: (3,) for k in keys}, bad or {}

    def layout(self):
        return [[k, 3] for k in self.keys]

    def count_nonfinite(self):
        return sum(self.bad.values())

    def first_nonfinite(self):
        return next(iter(self.bad.items()), (None, 0))


class NoTrace:
    def span(self, *a, **k):
        return contextlib.nullcontext()


def answer(ok_ranks, workers=2, ours=True):
    a = np.zeros((workers, 4), np.float32)
    a[:, 1] = protocol.HANDSHAKE_MARK if ours else 0.0
    a[ok_ranks, 0] = 1.0
    return a


def test_check_servers_names_a_stock_server_and_a_foreign_secret():
    guards.check_servers(FakeBackend(answers={0: answer([0, 1]), 1: answer([0, 1])}))
    with pytest.raises(ConfigError, match=r"^server 1 answered the start-up handshake as MXNet's own server"):
        guards.check_servers(FakeBackend(answers={0: answer([0, 1]), 1: answer([0, 1], ours=False)}))
    with pytest.raises(ConfigError, match=r"^server 0 holds another job secret than worker rank 1:"):
        guards.check_servers(FakeBackend(answers={0: answer([0])}))
    with pytest.raises(ConfigError, match=r"^server 0 holds another job secret than every worker:"):
        guards.check_servers(FakeBackend(answers={0: answer([])}))


SETTINGS = {"algorithm": "cdsgd", "k": 2, "warmup_steps": 5, "threshold": 0.5, "nonfinite": "error",
            "bucket_size": 1024, "aggregate": False, "pull_compression": "none", "resync_every": 10,
            "fp32_sum": "arrival", "parts": "auto"}


def test_check_agreement_names_each_field_and_rank_that_differs():
    sets = [FakeSet([0, 1])]
    guards.check_agreement(FakeBackend(rows=[None]), SETTINGS, sets, ["w", "b"])

    def other(row):
        row[1], row[0], row[9] = 3, 0, row[9] + 1  # k, algorithm, the names' checksum
        return row
    with pytest.raises(ConfigError) as e:
        guards.check_agreement(FakeBackend(rows=[other]), SETTINGS, sets, ["w", "b"])
    assert str(e.value) == ("workers disagree on the configuration: algorithm is 'cdsgd' on rank 0, 'ssgd' on rank 1; "
                            "k is 2 on rank 0, 3 on rank 1; parameter names differ")

    def pulls_2bit(row):
        row[11] = 1  # pull_compression '2bit' on rank 1
        return row
    with pytest.raises(ConfigError) as e:
        guards.check_agreement(FakeBackend(rows=[pulls_2bit]), SETTINGS, sets, ["w", "b"])
    assert str(e.value) == ("workers disagree on the configuration: pull_compression is 'none' on rank 0, '2bit' on "
                            "rank 1")

    def sums_by_rank(row):
        row[13] = 1  # fp32_sum 'rank' on rank 2: it would push rows the others never push
        return row
    with pytest.raises(ConfigError) as e:
        guards.check_agreement(FakeBackend(num_workers=3, rows=[None, sums_by_rank]), SETTINGS, sets, ["w", "b"])
    assert str(e.value) == ("workers disagree on the configuration: fp32_sum is 'arrival' on rank 0, 'arrival' on "
                            "rank 1, 'rank' on rank 2")

    def pinned(row):
        row[14] = 1  # numerics 'portable' on rank 1 (the servers check rank 0's: numerics.py)
        return row
    with pytest.raises(ConfigError) as e:
        guards.check_agreement(FakeBackend(rows=[pinned]), SETTINGS, sets, ["w", "b"])
    assert str(e.value) == "workers disagree on the configuration: numerics is 'native' on rank 0, 'portable' on rank 1"

    def whole(row):
        row[15] = 2  # CDSGD_PARTS=whole on rank 1: it would push whole buckets where rank 0 pushes parts
        return row
    with pytest.raises(ConfigError) as e:
        guards.check_agreement(FakeBackend(rows=[whole]), SETTINGS, sets, ["w", "b"])
    assert str(e.value) == "workers disagree on the configuration: CDSGD_PARTS is 'auto' on rank 0, 'whole' on rank 1"


def test_nonfinite_error_names_the_parameter_and_the_step():
    policy = guards.NonfinitePolicy("error", FakeBackend(), lambda keys: ",".join("p%d" % k for k in keys))
    assert policy.apply([FakeSet([0, 1])], 3, NoTrace()) is False
    with pytest.raises(FloatingPointError, match=r"^non-finite gradient in parameter p1 at step 4 \(2 values\)$"):
        policy.apply([FakeSet([0, 1], bad={1: 2})], 4, NoTrace())


def test_nonfinite_skip_follows_every_workers_vote(capsys):
    backend = FakeBackend(rank=0, num_workers=3, votes=np.array([0, 0, 0], np.float32))
    policy = guards.NonfinitePolicy("skip", backend, lambda keys: "p%d" % keys[0])
    assert policy.apply([FakeSet([0])], 0, NoTrace()) is False  # nobody voted
    backend.votes = np.array([0, 0, 5], np.float32)  # rank 2's gradient was not finite
    assert policy.apply([FakeSet([0])], 1, NoTrace()) is True
    assert policy.apply([FakeSet([0], bad={0: 7})], 2, NoTrace()) is True  # here too: this rank votes 7
    assert policy.skipped_steps == [1, 2]
    assert backend.opened == [(protocol.VOTE_KEY, 3)]  # the tally key, opened once
    assert [v.tolist() for v in backend.tallied] == [[0, 0, 0], [0, 0, 0], [7, 0, 0]]
    out = capsys.readouterr().out
    assert "step 1 skipped on every worker: non-finite gradient on rank 2\n" in out
    assert "step 2 skipped on every worker: non-finite gradient on rank 0, 2 (here: parameter p0 at step 2 (7 values))" in out

"""rounds.py against a fake backend, in process and in milliseconds: what a round pushes for
each kind of step, the bytes it counts, and the resend path when a server drops a round."""
import numpy as np
import pytest

from cdsgd_mx.worker.buckets import Bucket, Slot
from cdsgd_mx.worker.rounds import RoundRunner
from cdsgd_mx.worker.schedule import Schedule
from cdsgd_mx.worker.trace import Tracer


class FakeBackend:
    rank, region = 0, 0

    def __init__(self, drops=0):
        self.calls, self.drops, self.rounds = [], drops, {}

    def __getattr__(self, name):  # every other call is recorded
        return lambda *a, **k: self.calls.append((name,) + a)

    def wire_row(self, key):
        return np.zeros(3, np.float32)  # the payload row: 40 values' codes in 3 words

    def bucket_applied(self, bucket, down=False):
        self.calls.append(("bucket_applied", bucket.weight_key))
        if self.drops:
            self.drops -= 1
            return False
        return True


class FakeCompressor:
    """40 values: 3 code words, no non-finite value; records what it quantized."""

    def __init__(self):
        self.quantized = []

    def compress(self, i, g):
        self.quantized.append((i, g))
        return np.zeros(3, np.uint32), 0


class FakeSet:
    """One bucket of 40 values (no 2-bit pulls: no copy of the weights)."""
    region, device, copy = 0, None, None

    def __init__(self):
        b = Bucket(offset=0, size=40, server=0, weight_key=4, payload_key=5, slots=[Slot(0, 0, 40, 0, 0)])
        b.grad, b.comm, b.loc, b.comm_wire = "grad", "comm", "loc", "wire"
        self.buckets, self.comm_buf, self.compressor = [b], None, FakeCompressor()

    def gradient(self, b, from_grad=False):
        return b.grad if from_grad else b.comm

    def fp32_to_comm(self, b):
        pass


def runner(backend, warmup=1, k=2, alg="cdsgd"):
    return RoundRunner(backend, Schedule(alg, warmup, k), 0.5, Tracer(None), lambda keys: "p0")


def test_each_kind_of_step_pushes_what_the_schedule_says_and_counts_its_bytes():
    backend, bset = FakeBackend(), FakeSet()
    rounds = runner(backend)  # cdsgd, warm-up 1, k = 2: step 0 fp32 (warm-up), 1 fp32 (k), 2 codes
    for t in range(3):
        rounds.check(bset, t) if rounds.push(bset, t) else None
    kinds = [c[0] for c in backend.calls if c[0] in ("push", "push_payload", "pull", "pull_after_acks")]
    assert kinds == ["push", "pull", "push", "pull", "push_payload", "pull_after_acks"]
    assert bset.compressor.quantized == [(0, "comm")]  # a delayed step quantizes comm_buf, not grad_buf
    fp32, codes = 4 * 40, 4 * 3 + 8  # 40 floats; ceil(40 / 16) = 3 words and the row index
    assert rounds.bytes_by_step == {0: fp32, 1: fp32, 2: codes} and rounds.bytes_pushed == 2 * fp32 + codes
    assert [rounds.bytes_of_step([bset], t) for t in range(3)] == [fp32, fp32, codes]


@pytest.mark.parametrize("t,kept", [(0, "grad"), (1, "loc"), (3, None)])
def test_a_dropped_round_is_sent_again_from_where_g_t_still_is(t, kept, capsys):
    """The server dropped the round twice (a push from outside the job took its place): it is
    sent again each time, from grad_buf on a synchronous step, from loc_buf on a delayed fp32
    step (comm_buf holds W by then), as codes on a compressed one."""
    backend, bset = FakeBackend(drops=2), FakeSet()
    rounds = runner(backend, warmup=2)  # step 0 synchronous, 1 delayed fp32 (warm-up's last), 3 codes
    rounds.push(bset, t)
    follow_up = rounds.check(bset, t)
    resends = [c for c in backend.calls if c[0] == "resend"]
    assert len(resends) == 2 and rounds.resent == 2
    assert all(c[2] == (t == 3) for c in resends)  # compressed?
    assert all(c[3] == kept for c in resends if t != 3)
    assert "the server dropped round 0 of bucket 0 (key 4, step %d)" % t in capsys.readouterr().err
    follow_up()
    assert backend.calls[-1][0] == "seal_next"


def test_a_round_dropped_too_often_stops():
    backend, bset = FakeBackend(drops=1000), FakeSet()
    rounds = runner(backend)
    rounds.push(bset, 0)
    with pytest.raises(RuntimeError, match="dropped round 0 of bucket 0 .* 101 times in a row"):
        rounds.check(bset, 0)


def test_the_compressor_keeps_error_feedback_and_gives_back_a_skipped_span():
    """compression.Compressor on the host: codes and residual as the reference kernel gives
    them; keep() puts a span's residual back after a compression (a parameter skipped)."""
    from cdsgd_mx import reference as ref
    from cdsgd_mx.worker.compression import Compressor
    b = Bucket(offset=0, size=40, server=0, weight_key=4, payload_key=5, slots=[Slot(0, 0, 40, 0, 0)])
    comp = Compressor([b], 40, 0.5)
    rng = np.random.RandomState(0)
    residual = np.zeros(40, np.float32)
    for _ in range(3):
        g = rng.normal(0, 0.4, 40).astype(np.float32)
        codes, bad = comp.compress(0, g)
        want, residual = ref.quantize(g, residual, 0.5)
        np.testing.assert_array_equal(codes, want)
        np.testing.assert_array_equal(comp.residual_values(), residual)
        assert bad == 0
    before = comp.residual_values()
    restore = comp.keep([(10, 20)])
    comp.compress(0, np.full(40, 0.3, np.float32))
    restore()
    after = comp.residual_values()
    np.testing.assert_array_equal(after[10:20], before[10:20])
    assert not np.array_equal(after[:10], before[:10])

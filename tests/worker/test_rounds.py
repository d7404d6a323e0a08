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

    def __getattr__(self, name):  # every other call is recorded (with its keywords, if any)
        return lambda *a, **k: self.calls.append((name,) + a + ((k,) if k else ()))

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
        self.buckets, self.comm_wires, self.compressor = [b], None, FakeCompressor()

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
    kinds = [c[0] for c in backend.calls if c[0] in ("push", "pushpull", "push_payload", "pull", "pull_after_acks")]
    assert kinds == ["pushpull", "pushpull", "push_payload", "pull_after_acks"]  # fp32: W comes back as the answer
    assert bset.compressor.quantized == [(0, "comm")]  # a delayed step quantizes comm_buf, not grad_buf
    fp32, codes = 4 * 40, 4 * 3 + 8  # 40 floats; ceil(40 / 16) = 3 words and the row index
    assert rounds.bytes_by_step == {0: fp32, 1: fp32, 2: codes} and rounds.bytes_pushed == 2 * fp32 + codes
    assert [rounds.bytes_of_step([bset], t) for t in range(3)] == [fp32, fp32, codes]


def test_with_rows_keys_fp32_rounds_push_rows_and_pull_after_their_acknowledgement():
    """fp32_sum='rank': an fp32 round pushes this worker's row of the bucket's rows key, and the
    pull of W waits for that push's acknowledgement (MXNet orders a pull only after a push of
    the same key); codes go as before. fp32_rows False (bench.comm's paired_sum): to W again."""
    backend, bset = FakeBackend(), FakeSet()
    bset.buckets[0].rows_key = 6
    rounds = runner(backend)  # cdsgd, warm-up 1, k = 2: step 0 fp32 (warm-up), 1 fp32 (k), 2 codes
    for t in range(3):
        rounds.check(bset, t) if rounds.push(bset, t) else None
    sent = [c for c in backend.calls if c[0] in ("push", "push_row", "push_payload", "pull", "request_acks",
                                                 "pull_after_acks")]
    assert sent == [("push_row", 6), ("request_acks", [6]), ("pull_after_acks", [(6, 4, "wire")])] * 2 + \
        [("push_payload", 5), ("request_acks", [5]), ("pull_after_acks", [(5, 4, "wire")])]
    fp32, codes = 4 * 40 + 8, 4 * 3 + 8  # 40 floats and the row index; 3 code words and the row index
    assert rounds.bytes_by_step == {0: fp32, 1: fp32, 2: codes}
    assert [rounds.bytes_of_step([bset], t) for t in range(3)] == [fp32, fp32, codes]
    backend.calls, rounds.fp32_rows = [], False
    rounds.push(bset, 3)  # fp32 (k)
    assert [c for c in backend.calls if c[0] in ("push", "pushpull", "push_row", "pull")] == [("pushpull", 4, "wire")]
    assert rounds.bytes_by_step[3] == rounds.bytes_of_step([bset], 3) == 4 * 40


@pytest.mark.parametrize("rows_key", [None, 6])
def test_a_dropped_fp32_round_is_sent_again_where_it_went(rows_key):
    backend, bset = FakeBackend(drops=1), FakeSet()
    bset.buckets[0].rows_key = rows_key
    rounds = runner(backend, warmup=2)  # step 0 synchronous: g(t) still in grad_buf
    rounds.push(bset, 0)
    rounds.check(bset, 0)
    resends = [c[1:] for c in backend.calls if c[0] == "resend"]
    assert resends == [(bset.buckets[0], False, "grad", False, False, {"rows": rows_key is not None})]


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


class Wire:
    """A bucket's comm_wire, named by its weight key."""

    def __init__(self, key):
        self.key = key

    def wait_to_read(self):
        raise AssertionError("the communication thread waited for W of key %d" % self.key)


def windowed(backend, buckets, window, alg="ssgd"):
    """A set of `buckets` buckets of 40 values (160 B of fp32 each), and a runner with the window."""
    bset = FakeSet()
    bset.buckets = [Bucket(offset=40 * i, size=40, server=0, weight_key=10 + i, payload_key=100 + i,
                           slots=[Slot(0, 40 * i, 40 * i + 40, 0, 0)]) for i in range(buckets)]
    for b in bset.buckets:
        b.grad, b.comm, b.loc, b.comm_wire = "grad", "comm", "loc", Wire(b.weight_key)
    return bset, RoundRunner(backend, Schedule(alg, 1, 2), 0.5, Tracer(None), lambda keys: "p0", window)


def test_an_fp32_round_keeps_its_window_of_pushes_in_flight():
    """Window 480 B (3 buckets) but never fewer than MIN_IN_FLIGHT (4) buckets in flight: each
    push from the 5th on is held back (on MXNet's engine: the thread does not wait) until the W
    of the bucket 4 before it is in; a 7-bucket window (1120 B reached at 7) lets 7 go first;
    window 0 holds none back."""
    from cdsgd_mx.worker.rounds import MIN_IN_FLIGHT
    assert MIN_IN_FLIGHT == 4
    for window, ahead in ((480, 4), (1100, 7)):
        backend = FakeBackend()
        bset, rounds = windowed(backend, 10, window)
        rounds.push(bset, 0)
        got = [(c[0], c[1]) if c[0] == "pushpull" else (c[0], [w.key for w in c[1]], c[2].key)
               for c in backend.calls if c[0] in ("pushpull", "push_after")]
        want = [("pushpull", 10 + i) for i in range(ahead)]
        for i in range(ahead, 10):
            want += [("push_after", [10 + i - ahead], 10 + i), ("pushpull", 10 + i)]
        assert got == want, window
    backend = FakeBackend()
    bset, rounds = windowed(backend, 10, 0)
    rounds.push(bset, 0)
    assert [c[0] for c in backend.calls if c[0] in ("pushpull", "push_after")] == ["pushpull"] * 10


def test_a_rows_push_waits_for_its_window_here():
    """fp32_sum='rank': a rows push copies comm_wire synchronously, so the communication thread
    waits for the earlier W itself (in order), before the copy."""
    backend = FakeBackend()
    bset, rounds = windowed(backend, 6, 1)
    for b in bset.buckets:
        b.rows_key = 200 + b.weight_key
        b.comm_wire.wait_to_read = lambda key=b.weight_key: backend.calls.append(("W of", key))
    rounds.push(bset, 0)
    got = [c[:2] for c in backend.calls if c[0] in ("push_row", "W of", "push_after")]
    assert got == [("push_row", 210), ("push_row", 211), ("push_row", 212), ("push_row", 213),
                   ("W of", 10), ("push_row", 214), ("W of", 11), ("push_row", 215)]


def test_a_compressed_round_is_not_windowed():
    """Codes are 1/16 of fp32 (what the window is for: a server's NIC taking every worker's fp32
    push in): a BIT-SGD round pushes every bucket without waiting."""
    backend = FakeBackend()
    bset, rounds = windowed(backend, 10, 1, alg="bitsgd")
    rounds.push(bset, 1)  # after warm-up: codes
    assert [c[0] for c in backend.calls if c[0] in ("push_payload", "W of")] == ["push_payload"] * 10


@pytest.mark.parametrize("value", ["-1", "2MB", " ", "1.5"])
def test_a_bad_push_window_is_refused(monkeypatch, value):
    from cdsgd_mx.worker.config import ConfigError, push_window
    assert push_window({}) == 2 << 20 and push_window({"CDSGD_PUSH_WINDOW": "0"}) == 0
    with pytest.raises(ConfigError, match=r"^CDSGD_PUSH_WINDOW must be an integer >= 0 \(bytes of fp32 pushes in "
                                          r"flight; 0: no limit\), got %r$" % value):
        push_window({"CDSGD_PUSH_WINDOW": value})

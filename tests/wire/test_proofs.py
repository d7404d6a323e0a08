"""proofs.py, both sides in one process and in milliseconds: what workers seal, a server proves
and counts; a round with a missing or forged tag is dropped and its count stays put, so the
workers see it as not applied; counts out of step stop loudly."""
import mxnet as mx
import numpy as np
import pytest

from cdsgd_mx.wire import auth, protocol
from cdsgd_mx.worker import buckets as bucketing
from cdsgd_mx.wire.proofs import ServerProofs, WorkerProofs, unseal

N, SIZE = 3, 10


def job(servers=1):
    """N workers' proofs, each with its own comm_buf regions of one bucket, and one server's."""
    secret, nonce = auth.new_secret().encode(), auth.new_nonce()
    keys = [auth.session_key(secret, nonce)] * servers
    workers, buckets = [], []
    for r in range(N):
        plan = bucketing.plan([(0, SIZE)], 1 << 20, N, servers, protocol.Keys(servers))
        bucketing.BucketSet(plan, {0: (SIZE,)}, {0: [mx.nd.zeros((SIZE,))]}, False, region=N * auth.TAG_FLOATS)
        workers.append(WorkerProofs(keys, r, N))
        buckets.append(plan[0])
    drops = []
    server = ServerProofs(keys[0], N, lambda why: drops.append(why) or False)
    server.stored = mx.nd.zeros((SIZE + N * auth.TAG_FLOATS,))  # the key's value: MXNet keeps one per job
    return workers, buckets, server, drops


def round_of(workers, buckets, server, skip=None):
    """Every worker seals and pushes (the server sums the wires), the server proves and counts,
    every worker reads the count back. Returns what each worker's applied() said."""
    for w, b in zip(workers, buckets):
        w.seal(b)
    wires = [b.comm_wire.asnumpy() for r, b in enumerate(buckets) if r != skip]
    total, wk = mx.nd.array(np.sum(wires, axis=0)), buckets[0].weight_key
    if server.proven(wk, total, SIZE, announced=True):
        server.count_round(wk, server.stored, SIZE)
    mx.nd.waitall()
    for b in buckets:  # the pull: the stored value, the server's count after the data
        b.comm_wire[:] = server.stored
        unseal(b)
    return [w.bucket_applied(b) for w, b in zip(workers, buckets)]


def test_a_round_with_every_workers_tag_is_counted_on_both_sides():
    workers, buckets, server, drops = job()
    for count in (1, 2, 3):
        assert round_of(workers, buckets, server) == [True] * N
        assert server.rounds[buckets[0].weight_key] == count and all(w.rounds == server.rounds for w in workers)
    assert drops == [] and server.counted == 3


def test_a_round_short_of_one_tag_is_dropped_and_the_workers_send_it_again():
    workers, buckets, server, drops = job()
    assert round_of(workers, buckets, server, skip=1) == [False] * N  # a push from outside took rank 1's place
    assert server.rounds == {} and "worker rank 1" in drops[0]
    assert round_of(workers, buckets, server) == [True] * N  # resent with the same proofs: the count moves on


def test_a_forged_tag_or_an_unannounced_key_is_dropped():
    workers, buckets, server, drops = job()
    for w, b in zip(workers, buckets):
        w.seal(b)
    total = np.sum([b.comm_wire.asnumpy() for b in buckets], axis=0)
    total[SIZE + 2] += 1  # one bit of rank 0's tag
    assert not server.proven(buckets[0].weight_key, mx.nd.array(total), SIZE, announced=True)
    assert not server.proven(buckets[0].weight_key, mx.nd.array(total), SIZE, announced=False)
    assert "rank 0" in drops[0] and "no command of the job announced" in drops[1]


def test_a_seal_is_written_once_per_round_and_again_after_unseal():
    workers, buckets, _, _ = job()
    w, b = workers[0], buckets[0]
    w.seal(b)
    first = b.comm_region.asnumpy().copy()
    b.comm_region[:] = 0
    w.seal(b)  # already sealed for this count: nothing written
    assert not b.comm_region.asnumpy().any()
    unseal(b)
    w.seal(b)
    np.testing.assert_array_equal(b.comm_region.asnumpy(), first)
    assert first[:auth.TAG_FLOATS].any() and not first[auth.TAG_FLOATS:].any()  # rank 0's slot only


def test_counts_out_of_step_stop_loudly():
    w = WorkerProofs([b"k" * 32], 0, N)
    assert w.applied(7, 1.0) and not w.applied(7, 1.0)
    with pytest.raises(RuntimeError, match="out of step"):
        w.applied(7, 5.0)


def test_payload_rows_need_every_rank_once_with_its_codes_tag():
    from cdsgd_mx import codec
    workers, buckets, server, drops = job()
    words = codec.packed_size(SIZE)
    rows = np.zeros((N, words + auth.TAG_FLOATS), np.float32)
    for r, (w, b) in enumerate(zip(workers, buckets)):
        w.payload_regions[b.payload_key] = region = mx.nd.zeros((auth.TAG_FLOATS,))
        w.seal(b)
        rows[r, words:] = region.asnumpy()
    pk, wk = buckets[0].payload_key, buckets[0].weight_key
    assert server.proven_rows(pk, wk, SIZE, rows, np.arange(N))
    assert not server.proven_rows(pk, wk, SIZE, rows, np.array([0, 1, 1]))  # a rank twice
    rows[2, words] += 1
    assert not server.proven_rows(pk, wk, SIZE, rows, np.arange(N))
    assert "rows [0, 1, 1]" in drops[0] and "worker rank 2" in drops[1]


@pytest.mark.parametrize("tracked", [False, True])
def test_a_round_of_either_fp32_kind_is_told_apart_and_a_short_one_names_the_missing_rank(tracked):
    """2-bit pulls: an fp32 round is sealed 'fp32' (V := W) or 'fp32 tracked' (V moves by codes);
    the server learns which from the tags, and a round short of one worker's tag names that
    worker, whichever kind the others sealed (issue 40)."""
    from cdsgd_mx.wire.proofs import FP32, FP32_TRACKED
    workers, buckets, server, drops = job()
    for w, b in zip(workers, buckets):
        w.seal(b, tracked)
    wk = buckets[0].weight_key
    total = mx.nd.array(np.sum([b.comm_wire.asnumpy() for b in buckets], axis=0))
    assert server.proven(wk, total, SIZE, True, (FP32, FP32_TRACKED)) == (FP32_TRACKED if tracked else FP32)
    assert server.proven(wk, total, SIZE, True) == (False if tracked else FP32)  # a key without 2-bit pulls
    short = mx.nd.array(np.sum([b.comm_wire.asnumpy() for r, b in enumerate(buckets) if r != 2], axis=0))
    assert not server.proven(wk, short, SIZE, True, (FP32, FP32_TRACKED))
    assert drops[-1].endswith("from worker rank 2 (a push from outside the job?); not applied"), drops[-1]

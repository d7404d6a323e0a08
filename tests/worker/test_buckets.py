"""Fused buckets: the plan, what the plugin does per bucket, and the server's per-parameter state."""
import json
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

mx = pytest.importorskip("mxnet")

import cdsgd_mx  # noqa: E402
from cdsgd_mx.worker import buckets
from cdsgd_mx import codec
from cdsgd_mx.wire import auth, protocol  # noqa: E402
from cdsgd_mx.server.node import ServerState  # noqa: E402
from cdsgd_mx.bench import mark_fresh  # noqa: E402
from cdsgd_mx.worker.engine_copies import EngineCopies  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=30), bucket_size=st.integers(1, 5000),
       workers=st.integers(1, 4), servers=st.integers(1, 3), bound=st.integers(2, 4000), fp32_rows=st.booleans())
def test_plan_covers_every_value_once_in_backward_order_within_the_limits(sizes, bucket_size, workers, servers, bound,
                                                                         fp32_rows):
    plan = buckets.plan(list(enumerate(sizes)), bucket_size, workers, servers, protocol.Keys(servers), bound=bound,
                        fp32_rows=fp32_rows)
    limit = min(bucket_size, protocol.max_chunk(bound, workers, fp32_rows))
    rows_fit = (bound - 1) // workers - workers * auth.TAG_FLOATS >= 1  # (else buckets of 1 value: the floor)
    offset, covered = 0, {}
    for b in plan:
        assert b.offset == offset and b.size == sum(s.size for s in b.slots) > 0
        assert b.size <= limit
        assert b.words < bound and b.size < bound  # both keys fit one server
        if fp32_rows and rows_fit:  # so does the rows key: MXNet would split its rows across the servers
            assert workers * (b.size + workers * auth.TAG_FLOATS) < bound
        assert protocol.server_of(b.weight_key, servers) == b.server == protocol.server_of(b.payload_key, servers)
        for s in b.slots:
            assert s.offset == offset
            covered.setdefault(s.key, []).append((s.begin, s.end))
            offset += s.size
        if len(b.slots) > 1:  # a bucket of several parameters holds them whole
            assert all(s.begin == 0 and s.end == sizes[s.key] for s in b.slots)
    for key, ranges in covered.items():  # each parameter contiguous, pieces in order, exactly once
        assert ranges[0][0] == 0 and ranges[-1][1] == sizes[key]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert [k for k in dict.fromkeys(s.key for b in plan for s in b.slots)] == list(range(len(sizes)))[::-1]
    keys = [k for b in plan for k in (b.weight_key, b.payload_key)]
    assert len(set(keys)) == len(keys)
    assert sorted(s.state_id for b in plan for s in b.slots) == list(range(sum(len(b.slots) for b in plan)))
    for key, size in enumerate(sizes):
        if size >= bound:  # MXNet would split such a key over every server: so do we
            assert len(covered[key]) >= min(servers, size)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=30), bucket_size=st.integers(1, 5000),
       part_size=st.integers(1, 3000), workers=st.integers(1, 4), servers=st.integers(1, 3),
       bound=st.integers(2, 4000))
def test_with_rank_sums_and_parts_only_the_rows_keys_keep_to_the_rows_bound(sizes, bucket_size, part_size, workers,
                                                                           servers, bound):
    """fp32_sum='rank' with parts: every unit with a rows key (a part, or a bucket too small to
    have parts) fits the rows' bound, while the buckets, whose codes are one payload, are cut
    where arrival order's are (the same plan, before the parts)."""
    keys = lambda: protocol.Keys(servers)
    ranked = buckets.plan(list(enumerate(sizes)), bucket_size, workers, servers, keys(), bound=bound, fp32_rows=True,
                          part_size=part_size)
    arrival = buckets.plan(list(enumerate(sizes)), bucket_size, workers, servers, keys(), bound=bound)
    assert [(b.offset, b.size, b.server) for b in ranked] == [(b.offset, b.size, b.server) for b in arrival]
    rows_chunk = protocol.max_chunk(bound, workers, True)
    for b in ranked:
        for u in b.parts or [b]:
            assert u.size <= min(part_size, rows_chunk) or u is b and not b.parts and b.size <= part_size
            if (bound - 1) // workers - workers * auth.TAG_FLOATS >= 1:  # (else the floor: 1 value)
                assert u.size <= rows_chunk and workers * (u.size + workers * auth.TAG_FLOATS) < bound


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=30), bucket_size=st.integers(1, 5000),
       part_size=st.integers(1, 700), servers=st.integers(1, 3))
def test_parts_cut_each_bucket_into_whole_slots_of_at_most_the_part_size(sizes, bucket_size, part_size, servers):
    """buckets.partition: the same values in the same order as without parts, slots cut to at
    most part_size (state ids numbered again, once each), and a bucket above part_size cut into
    parts, back to back, of whole slots, each with a weight key of its own on the bucket's
    server."""
    args = (list(enumerate(sizes)), bucket_size, 2, servers)
    whole = buckets.plan(*args, protocol.Keys(servers), bound=5000)
    plan = buckets.plan(*args, protocol.Keys(servers), bound=5000, part_size=part_size)
    assert [(b.offset, b.size, b.server, b.weight_key, b.payload_key) for b in plan] == \
        [(b.offset, b.size, b.server, b.weight_key, b.payload_key) for b in whole]
    for b, w in zip(plan, whole):  # the same values, cut finer
        assert sum(s.size for s in b.slots) == b.size and all(s.size <= part_size for s in b.slots)
        assert {s.key for s in b.slots} == {s.key for s in w.slots}
        for s in w.slots:  # each of the old slots is its new pieces, back to back, at the same place
            pieces = [x for x in b.slots if x.key == s.key and (s.begin <= x.begin < s.end or x.begin == s.begin == s.end)]
            assert pieces[0].begin == s.begin and pieces[-1].end == s.end
            assert all(x.end == y.begin and x.offset + x.size == y.offset for x, y in zip(pieces, pieces[1:]))
            assert all(x.offset - x.begin == s.offset - s.begin for x in pieces)
        if b.size <= part_size:
            assert b.parts == []
            continue
        assert len(b.parts) > 1 and [p.offset for p in b.parts][0] == b.offset
        assert sum(p.size for p in b.parts) == b.size and all(0 < p.size <= part_size for p in b.parts)
        assert all(p.offset + p.size == q.offset for p, q in zip(b.parts, b.parts[1:]))
        assert [s for p in b.parts for s in p.slots] == b.slots  # whole slots, in order
        assert all(p.server == b.server == protocol.server_of(p.weight_key, servers) for p in b.parts)
    ids = [s.state_id for b in plan for s in b.slots]
    assert ids == list(range(len(ids)))
    keys = [k for b in plan for k in [b.weight_key, b.payload_key] + [p.weight_key for p in b.parts]]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("value", ["x", "-1", "1.5"])
def test_a_bad_part_size_is_refused_in_one_line(value):
    from cdsgd_mx.worker.config import part_size
    with pytest.raises(cdsgd_mx.ConfigError, match="^CDSGD_PART_SIZE must be an integer >= 0 .*got '%s'$" % value.replace(".", r"\.")):
        part_size(environ={"CDSGD_PART_SIZE": value})
    assert part_size(environ={}) == buckets.PART_SIZE and part_size(environ={"CDSGD_PART_SIZE": "0"}) is None


def test_rank_order_parts_are_as_large_as_their_rows_keys_may_be():
    """fp32_sum='rank' defaults to parts at the rows' bound (a rank-order part costs a round
    trip more than a pushpull); CDSGD_PART_SIZE still sets the size."""
    from cdsgd_mx.worker.config import part_size
    assert part_size("rank", environ={}) == buckets.RANK_PART_SIZE > buckets.PART_SIZE
    assert part_size("rank", environ={"CDSGD_PART_SIZE": "4096"}) == 4096
    bound, workers = 10 ** 6, 8  # MXNet's default big-array bound; 8 workers' rows of a part fit it
    plan = buckets.plan([(0, 1 << 20)], buckets.DEFAULT_BUCKET_SIZE, workers, 2, protocol.Keys(2), bound=bound,
                        fp32_rows=True, part_size=buckets.RANK_PART_SIZE)
    chunk = protocol.max_chunk(bound, workers, True)
    sizes = [p.size for b in plan for p in b.parts]
    assert max(sizes) <= chunk and len(sizes) == sum(-(-b.size // chunk) for b in plan) < (1 << 20) // buckets.PART_SIZE


def test_plan_fuses_many_small_parameters_into_few_buckets():
    sizes = [64 * 64 * 9] * 30 + [64] * 35  # a ResNet-like model: 65 arrays, 1.1 M values
    plan = buckets.plan(list(enumerate(sizes)), 1 << 18, 2, 1, protocol.Keys(1))
    assert len(plan) == 5
    plan = buckets.plan(list(enumerate(sizes)), 1 << 20, 2, 2, protocol.Keys(2))
    assert len(plan) == 3 and {b.server for b in plan} == {0, 1}  # every server gets a share


def _params(shapes):
    params = mx.gluon.ParameterDict()
    plist = [params.get("p%d" % i, shape=s, init=mx.init.Constant(0.1 * (i + 1))) for i, s in enumerate(shapes)]
    params.initialize()
    return params, plist


SHAPES = [(7, 3), (5,), (40,), (1,), (33,)]


def _train(alg, bucket_size, steps=7):
    params, plist = _params(SHAPES)
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.3, "momentum": 0.5}, kvstore="local", algorithm=alg,
                          warmup_steps=2, k=3, threshold=0.25, bucket_size=bucket_size)
    for t in range(steps):
        for i, p in enumerate(plist):
            x = p.data().asnumpy()
            p.grad()[:] = np.round((np.cos(x * (i + 3) + t) + 0.2 * x) * 64) / 64
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(1)
    tr.wait_all()
    return tr, plist, [p.data().asnumpy() for p in plist], [tr.kvstore.global_weights(i).asnumpy() for i in range(len(plist))]


@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_the_bucket_size_does_not_change_the_result(alg):
    tr_one, _, x_one, w_one = _train(alg, 1 << 20)
    tr_many, _, x_many, w_many = _train(alg, 8)
    assert len(tr_one.kvstore.bucket_sets[0].buckets) == 1 and len(tr_many.kvstore.bucket_sets[0].buckets) > 5
    for a, b in zip(x_one + w_one, x_many + w_many):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(w_one[2], 0.3)  # it trained


@pytest.mark.parametrize("alg", ["bitsgd", "cdsgd"])
@pytest.mark.parametrize("name,kw,pull", [("sgd", {"learning_rate": 0.3, "momentum": 0.5, "wd": 0.01}, "none"),
                                          ("adam", {"learning_rate": 0.1}, "none"),
                                          ("sgd", {"learning_rate": 0.3, "momentum": 0.5, "wd": 0.01}, "2bit")])
def test_parts_do_not_change_the_result(monkeypatch, alg, name, kw, pull):
    """The fp32 rounds part by part (CDSGD_PART_SIZE=8: the 40-value parameter cut in 5) and
    the 2-bit rounds of whole buckets move the same weights and optimizer states, bit for bit,
    as whole-bucket rounds (CDSGD_PART_SIZE=0), in process. With 2-bit pulls also the same V:
    the cut parameter keeps one pull step (pull_compression.pieces_of), and V follows W once a
    bucket's last part is in: the warm-up's V := W (bitsgd never re-syncs after it: resync_every=0)
    and cdsgd's correction at step 5, which tracks."""
    results = []
    for part in ("0", "8"):
        monkeypatch.setenv("CDSGD_PART_SIZE", part)
        monkeypatch.setenv("CDSGD_PARTS", "parts")
        params, plist = _params(SHAPES)
        tr = cdsgd_mx.Trainer(params, name, kw, kvstore="local", algorithm=alg, warmup_steps=2, k=3, threshold=0.25,
                              pull_compression=pull, resync_every=0)
        for t in range(7):
            for i, p in enumerate(plist):
                x = p.data().asnumpy()
                p.grad()[:] = np.round((np.cos(x * (i + 3) + t) + 0.2 * x) * 64) / 64
            mark_fresh(tr)
            tr.step(1)
        tr.wait_all()
        parts = [p for b in tr.kvstore.bucket_sets[0].buckets for p in b.parts]
        assert (len(parts) > 5) == (part == "8")
        results.append([p.data().asnumpy() for p in plist] +
                       [tr.kvstore.global_weights(i).asnumpy() for i in range(len(plist))] +
                       ([tr.kvstore.bucket_sets[0].copy.values()] if pull == "2bit" else []))
        if pull == "2bit":  # the pull's steps: one per parameter's piece of a bucket, parts or not
            bset = tr.kvstore.bucket_sets[0]
            assert [len(pieces) for pieces in bset.copy._pieces] == [len({s.key for s in b.slots}) for b in bset.buckets]
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(results[1][len(SHAPES) + 2], 0.3)  # it trained


def test_gradients_are_bound_to_the_buckets_and_each_step_works_per_bucket(monkeypatch):
    tr, plist, _, _ = _train("cdsgd", 45, steps=1)
    kv = tr.kvstore
    for i, p in enumerate(plist):  # autograd writes straight into grad_buf: no copy to fuse
        assert p.grad() is kv.grad_view(i)
    n_buckets = len(kv.bucket_sets[0].buckets)
    assert n_buckets == 3  # [p4 p3] [p2 p1] [p0]: fewer buckets than parameters
    calls = {"pushpull": 0, "push_payload": 0, "pull": 0, "quantize": 0, "copy": 0}
    for name in ("pushpull", "push_payload", "pull"):
        original = getattr(kv.backend, name)

        def counted(*a, _name=name, _f=original):
            calls[_name] += 1
            return _f(*a)
        monkeypatch.setattr(kv.backend, name, counted)
    quantize = codec.quantize
    monkeypatch.setattr(codec, "quantize", lambda *a, **k: calls.__setitem__("quantize", calls["quantize"] + 1) or quantize(*a, **k))
    copyto = mx.nd.NDArray.copyto

    def counted_copy(self, other):  # the main thread's copies (the local backend copies on the other)
        calls["copy"] += threading.current_thread() is threading.main_thread()
        return copyto(self, other)
    monkeypatch.setattr(mx.nd.NDArray, "copyto", counted_copy)
    run = EngineCopies.run

    def counted_run(self):  # the parameters' copies, issued through MXNet's C API (engine_copies.py)
        calls["copy"] += len(self.pairs) * (threading.current_thread() is threading.main_thread())
        return run(self)
    monkeypatch.setattr(EngineCopies, "run", counted_run)
    for t in range(1, 5):  # warm-up 2, k 3: steps 1..4 push fp32, fp32 (correction), codes, codes
        for p in plist:
            p.grad()[:] = 0.5
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(1)
    tr.wait_all()
    assert calls["quantize"] == calls["push_payload"] == 2 * n_buckets
    # an fp32 round is one pushpull per bucket (W comes back as its answer); a compressed one
    # pushes the codes and pulls W
    assert calls["pushpull"] == 2 * n_buckets and calls["pull"] == 2 * n_buckets
    # per delayed step on the main thread: comm_buf = g and loc_buf = W, one copy per bucket each
    # (comm_buf is an array per bucket, so that the buckets' rounds are in flight together), and
    # one copy per parameter into its data (what forward reads); no copy gathers the gradients
    assert calls["copy"] == 4 * (2 * n_buckets + len(plist))


def test_a_fused_parameter_left_out_of_a_step_is_refused():
    """A bucket set steps once all its parameters are in (one call, or one per parameter as
    Module does: issue 39); a step that leaves some out, after they were pushed, stops, naming
    them (before issue 39 a call without them was refused at once)."""
    params, plist = _params(SHAPES)
    kv = cdsgd_mx.CDSGD(algorithm="ssgd", kvstore="local")
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1))
    kv.broadcast(list(range(len(plist))), [p.data() for p in plist], [p.data() for p in plist])
    kv.param_names = [p.name for p in plist]
    kv.pushpull(list(range(len(plist))), [p.grad() for p in plist], out=[p.data() for p in plist])
    kv.pushpull([0, 2, 3], [plist[i].grad() for i in (0, 2, 3)], out=[plist[i].data() for i in (0, 2, 3)])
    with pytest.raises(ValueError, match="parameters p1, p4 were pushed at earlier steps but not at step 1"):
        kv.pushpull([0], [plist[0].grad()], out=[plist[0].data()])


@pytest.mark.parametrize("fuse_calls", [False, True])
def test_one_parameter_at_a_time_still_works(fuse_calls):
    """The plain KVStore API: broadcast and pushpull per key; each key its own bucket set with
    fuse_calls=False, one set for all of them by default (issue 39), the same weights."""
    params, plist = _params(SHAPES)
    kv = cdsgd_mx.CDSGD(algorithm="bitsgd", kvstore="local", threshold=0.5, fuse_calls=fuse_calls)
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=1.0))
    for i, p in enumerate(plist):
        kv.broadcast(i, p.data(), out=p.data())
    for i, p in enumerate(plist):
        kv.pushpull(i, mx.nd.ones(p.shape), out=p.data())
    kv.wait_all()
    for i, p in enumerate(plist):
        np.testing.assert_allclose(p.data().asnumpy(), 0.1 * (i + 1) - 0.5, rtol=1e-6)
    assert len(kv.bucket_sets) == (1 if fuse_calls else len(plist))


OPTIMIZERS = [("sgd", {"learning_rate": 0.5, "momentum": 0.9, "wd": 0.01}), ("sgd", {"learning_rate": 0.5}),
              ("adam", {"learning_rate": 0.1, "wd": 0.01}), ("nag", {"learning_rate": 0.1, "momentum": 0.9})]


@pytest.mark.parametrize("mults", [[[1, 1]] * 3, [[1, 0], [2, 1], [1, 3]]], ids=["plain", "multipliers"])
@pytest.mark.parametrize("name,kw", OPTIMIZERS)
def test_server_keeps_one_optimizer_state_per_parameter_of_a_bucket(name, kw, mults):
    """A bucket of three parameters updated by the server equals three separate updates, and
    the states are per parameter (slot id), as checkpoints and per-parameter settings need
    (SGD runs fused over the bucket, other optimizers parameter by parameter)."""
    s = ServerState()
    s.set_optimizer(mx.optimizer.create(name, **kw))
    s.command(json.dumps({"op": "register", "weights": [4], "payloads": {}, "slots": {"4": [[10, 0, 3] + mults[0], [11, 3, 8] + mults[1], [12, 8, 9] + mults[2]]}}))
    w0 = np.arange(9, dtype=np.float32) / 10
    weight = mx.nd.array(w0)
    s(4, mx.nd.zeros((9,)), weight)  # registration round
    ref = [mx.nd.array(w0[a:b]) for a, b in ((0, 3), (3, 8), (8, 9))]
    opt = mx.optimizer.create(name, **kw)
    opt.set_lr_mult({j: m[0] for j, m in enumerate(mults)})
    opt.set_wd_mult({j: m[1] for j, m in enumerate(mults)})
    states = [opt.create_state(j, r) for j, r in enumerate(ref)]
    for step in range(3):
        g = np.sin(np.arange(9, dtype=np.float32) + step)
        s(4, mx.nd.array(g), weight)
        for j, ((a, b), r) in enumerate(zip(((0, 3), (3, 8), (8, 9)), ref)):
            opt.update(j, r, mx.nd.array(g[a:b]), states[j])
    np.testing.assert_allclose(weight.asnumpy(), np.concatenate([r.asnumpy() for r in ref]), rtol=1e-6, atol=1e-7)
    if name == "sgd" and not kw.get("momentum"):
        return  # stateless: nothing kept
    assert sorted(s.updater.states) == [10, 11, 12]
    if name == "adam":
        assert [s.updater.states[i][0].shape for i in (10, 11, 12)] == [(3,), (5,), (1,)]
    elif kw.get("momentum"):
        assert [s.updater.states[i].shape for i in (10, 11, 12)] == [(3,), (5,), (1,)]


def test_every_attribute_a_bucket_gets_is_a_declared_field():
    """Bucket declares its views (issue 27): an attribute assigned anywhere in the package on a
    bucket (`b.x = ...`, `bucket.x = ...`) must be one of its dataclass fields."""
    import dataclasses
    import pathlib
    import re
    from cdsgd_mx.worker.buckets import Bucket
    declared = {f.name for f in dataclasses.fields(Bucket)}
    assigned = set()
    for path in (pathlib.Path(__file__).resolve().parents[2] / "cdsgd_mx").rglob("*.py"):  # every module, in any folder
        assigned |= set(re.findall(r"\b(?:b|bucket)\.([a-z_]+)\s*=(?!=)", path.read_text()))
    assert {"grad", "comm_wire", "sealed_for", "loc"} <= assigned  # the scan sees them
    assert assigned <= declared, sorted(assigned - declared)


def test_engine_copies_copy_like_copyto_in_order_and_after_the_writes_before_them():
    """EngineCopies (the parameters' copies through MXNet's C API): the same values as
    NDArray.copyto, a later copy into the same array wins, and a copy reads its source after the
    engine operations issued before it (here an add that is still running)."""
    rng = np.random.RandomState(3)
    src = [mx.nd.array(rng.randn(*s)) for s in SHAPES]
    dst = [mx.nd.zeros(s) for s in SHAPES]
    ref = [mx.nd.zeros(s) for s in SHAPES]
    for a, b in zip(src, ref):
        a.copyto(b)
    src[0] += 1.0  # an engine write issued before the copies: they must see it
    EngineCopies(list(zip(src, dst))).run()
    for a, b in zip(src, dst):
        np.testing.assert_array_equal(b.asnumpy(), a.asnumpy())
    np.testing.assert_array_equal(dst[0].asnumpy(), ref[0].asnumpy() + 1.0)
    later = mx.nd.full(SHAPES[2], 7.0)
    EngineCopies([(src[2], dst[2]), (later, dst[2])]).run()  # issued in list order: the last one stays
    np.testing.assert_array_equal(dst[2].asnumpy(), np.full(SHAPES[2], 7.0, np.float32))


class _Held(mx.operator.CustomOp):
    """An engine operation that finishes only once the test lets it (an Event)."""
    release = threading.Event()

    def forward(self, is_train, req, in_data, out_data, aux):
        _Held.release.wait(60)
        self.assign(out_data[0], req[0], in_data[0])


@mx.operator.register("cdsgd_test_held")
class _HeldProp(mx.operator.CustomOpProp):
    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, in_shape, []

    def create_operator(self, ctx, shapes, dtypes):
        return _Held()


@pytest.mark.parametrize("pull", [False, True], ids=["fp32", "2-bit pulls"])
def test_each_buckets_wire_is_an_array_of_its_own_so_rounds_are_in_flight_together(pull):
    """MXNet's engine orders every operation on an array (its views included) after the writes
    issued before it. A round writes its bucket's comm_buf (and with 2-bit pulls its down_buf):
    with one flat buffer a bucket's round waited for every earlier bucket's, and the NIC
    carried one direction at a time (issue 55). Here a write to bucket 0's wire that cannot
    finish yet must not hold up bucket 1's."""
    plan = buckets.plan([(0, 40), (1, 40)], 40, 2, 1, protocol.Keys(1))
    assert len(plan) == 2
    if pull:
        for b in plan:
            b.down_key = 99
    bset = buckets.BucketSet(plan, {0: (40,), 1: (40,)}, {0: [mx.nd.zeros(40)], 1: [mx.nd.zeros(40)]}, True,
                             region=4, pull=pull)
    _Held.release.clear()
    wires = [(b.comm_wire, b.down_wire) if pull else (b.comm_wire,) for b in plan]
    for w in wires[0]:  # a round of bucket 0 still on the wire
        mx.nd.Custom(mx.nd.ones(w.shape), op_type="cdsgd_test_held").copyto(w)
    done = threading.Event()

    def bucket_1():
        for w in wires[1]:
            w[:] = 1  # bucket 1's round: its own write, then read
            w.wait_to_read()
        done.set()
    threading.Thread(target=bucket_1, daemon=True).start()
    finished = done.wait(30)
    _Held.release.set()
    mx.nd.waitall()
    assert finished, "bucket 1's wire waited for bucket 0's round"
    assert all((w.asnumpy() == 1).all() for ws in wires for w in ws)

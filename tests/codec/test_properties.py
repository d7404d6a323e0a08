"""Property-based tests: every valid input works and matches the reference; every invalid one
gives a clear error (ValueError/TypeError naming the argument), never a crash or a traceback
from deep inside."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cdsgd_mx import codec
from cdsgd_mx import reference as ref
from cdsgd_mx.bench import mark_fresh  # noqa: E402

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
thresholds = st.floats(min_value=2.0 ** -20, max_value=2.0 ** 20, allow_nan=False, allow_infinity=False, width=32)


@FAST
@given(grad=hnp.arrays(np.float32, st.integers(0, 300), elements=floats32),
       threshold=thresholds, data=st.data())
def test_quantize_matches_reference_on_any_floats(grad, threshold, data):
    residual = data.draw(hnp.arrays(np.float32, grad.shape,
                                    elements=st.floats(-4 * threshold, 4 * threshold, width=32)))
    r = residual.copy()
    packed = np.zeros(codec.packed_size(grad.size), np.uint32)
    bad = codec.quantize(grad, r, packed, threshold)
    want_p, want_r = ref.quantize(grad, residual, threshold)
    np.testing.assert_array_equal(packed, want_p)
    np.testing.assert_array_equal(r.view(np.uint32), want_r.view(np.uint32))
    assert bad == int((~np.isfinite(want_r)).sum())


@FAST
@given(words=hnp.arrays(np.uint32, st.integers(0, 64)), threshold=thresholds, acc=st.booleans())
def test_dequantize_matches_reference_on_any_words(words, threshold, acc):
    n = words.size * 16
    out = np.ones(n, np.float32)
    codec.dequantize(words, out, threshold, accumulate=acc)
    want = ref.dequantize(words, n, threshold) + (np.float32(1) if acc else np.float32(0))
    np.testing.assert_array_equal(out.view(np.uint32), want.astype(np.float32).view(np.uint32))


@FAST
@given(codes=st.lists(st.sampled_from([0, 2, 3]), max_size=400))
def test_wire_round_trip_on_any_codes(codes):
    packed = ref._words_of(codes)
    wire = np.zeros(packed.size, np.float32)
    codec.wire_encode(packed, wire)
    assert np.all(np.isfinite(wire)) and np.all((wire >= 1) & (wire < 73))
    back = np.zeros(packed.size, np.uint32)
    codec.wire_decode(wire, back)
    np.testing.assert_array_equal(back, packed)


@FAST
@given(wire=hnp.arrays(np.float32, st.integers(1, 64), elements=floats32))
def test_wire_decode_accepts_exactly_the_valid_range(wire):
    bits = wire.view(np.uint32).astype(np.int64) - 0x3F800000
    invalid = int(((bits < 0) | (bits >= 3 ** 16)).sum())
    out = np.zeros(wire.size, np.uint32)
    if invalid:
        with pytest.raises(ValueError, match="wire: %d of its words" % invalid):
            codec.wire_decode(wire, out)
    else:
        codec.wire_decode(wire, out)
        np.testing.assert_array_equal(out, ref.wire_decode(wire)[0])


bad_thresholds = st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf")),
                           st.floats(min_value=3.5e38, allow_infinity=True, allow_nan=False))


@FAST
@given(threshold=bad_thresholds)
def test_invalid_thresholds_are_refused(threshold):
    with pytest.raises(ValueError, match="threshold must be a finite number > 0"):
        codec.quantize(np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(1, np.uint32), threshold)


@FAST
@given(n=st.integers(0, 100), delta=st.integers(-20, 20).filter(lambda d: d != 0),
       which=st.sampled_from(["residual", "packed"]))
def test_wrong_sizes_are_refused_naming_the_argument(n, delta, which):
    sizes = {"residual": n, "packed": codec.packed_size(n)}
    sizes[which] = max(0, sizes[which] + delta)
    if sizes[which] == (n if which == "residual" else codec.packed_size(n)):
        return  # clamped back to the right size
    with pytest.raises(ValueError, match="%s has %d elements" % (which, sizes[which])):
        codec.quantize(np.zeros(n, np.float32), np.zeros(sizes["residual"], np.float32),
                       np.zeros(sizes["packed"], np.uint32), 0.5)


@FAST
@given(dtype=st.sampled_from([np.float64, np.float16, np.int32, np.int8, np.uint8, np.complex64]),
       which=st.sampled_from(["grad", "residual"]))
def test_wrong_dtypes_are_refused_naming_the_argument(dtype, which):
    arrays = {"grad": np.zeros(16, np.float32), "residual": np.zeros(16, np.float32)}
    arrays[which] = np.zeros(16, dtype)
    with pytest.raises(TypeError, match="%s must be float32" % which):
        codec.quantize(arrays["grad"], arrays["residual"], np.zeros(1, np.uint32), 0.5)


# ---- the Trainer's arguments --------------------------------------------------------------

mx = pytest.importorskip("mxnet")


def _params():
    from mxnet import gluon
    params = gluon.ParameterDict()
    params.get("w", shape=(8,), init=mx.init.One())
    params.initialize()
    return params


def _valid(algorithm, k, warmup_steps, threshold, kvstore):
    return (algorithm in ("ssgd", "bitsgd", "odsgd", "cdsgd") and isinstance(k, int) and not isinstance(k, bool)
            and k >= 1 and isinstance(warmup_steps, int) and not isinstance(warmup_steps, bool)
            and warmup_steps >= 0 and isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
            and math.isfinite(threshold) and threshold > 0 and np.isfinite(np.float32(threshold))
            and kvstore in ("local", None))


@settings(max_examples=80, deadline=None)
@given(algorithm=st.one_of(st.sampled_from(["ssgd", "bitsgd", "odsgd", "cdsgd"]), st.text(max_size=6)),
       k=st.one_of(st.integers(-3, 12), st.floats(allow_nan=True), st.booleans()),
       warmup_steps=st.one_of(st.integers(-3, 6), st.floats(allow_nan=True)),
       threshold=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 3)),
       kvstore=st.sampled_from(["local", None, "dist_async", "device", "nccl"]))
def test_trainer_arguments_work_or_fail_clearly(algorithm, k, warmup_steps, threshold, kvstore):
    import cdsgd_mx
    args = dict(algorithm=algorithm, k=k, warmup_steps=warmup_steps, threshold=threshold, kvstore=kvstore)
    if not _valid(**args):
        with pytest.raises(cdsgd_mx.ConfigError) as err:
            cdsgd_mx.Trainer(_params(), "sgd", {"learning_rate": 0.1}, **args)
        assert "\n" not in str(err.value)
        return
    params = _params()
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, **args)
    params.get("w").grad()[:] = 0.25
    for _ in range(3):
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(1)
    tr.wait_all()
    assert np.all(np.isfinite(params.get("w").data().asnumpy()))

"""fp32_sum (issue 41) in process: its one-line errors, the in-process store that takes it, and
rows keys small enough for one server. Real jobs: test_engine.py (bit for bit against the
simulation), test_security.py (a row from outside the job), test_faults.py (workers that
disagree), tests/experiments/test_train_script.py (4 workers, one seed, two runs)."""
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workers.engine_worker import SHAPES, init_value, offgrid_grad  # noqa: E402

import cdsgd_mx  # noqa: E402
from cdsgd_mx.bench import mark_fresh  # noqa: E402
from cdsgd_mx.experiments import config as C  # noqa: E402
from cdsgd_mx.wire import auth, protocol  # noqa: E402
from cdsgd_mx.worker import buckets  # noqa: E402
from cdsgd_mx.worker.config import ConfigError, check_config  # noqa: E402

BAD = "fp32_sum must be one of arrival, rank, got 'ordered'"


def params():
    pd = gluon.ParameterDict()
    plist = [pd.get("p%d" % i, shape=s, init=mx.init.Constant(init_value(i, s).tolist())) for i, s in enumerate(SHAPES)]
    pd.initialize(ctx=mx.cpu())
    return pd, plist


def test_a_bad_fp32_sum_is_one_line_naming_the_field_and_the_values(monkeypatch):
    with pytest.raises(ConfigError, match="^%s$" % BAD):
        check_config("ssgd", 5, 0, 0.5, "local", fp32_sum="ordered")
    with pytest.raises(ConfigError, match="^%s$" % BAD):
        cdsgd_mx.Trainer(params()[0], "sgd", {"learning_rate": 0.1}, kvstore="local", fp32_sum="ordered")
    with pytest.raises(ConfigError, match="^%s$" % BAD):
        cdsgd_mx.CDSGD(kvstore="local", fp32_sum="ordered")
    monkeypatch.setenv("CDSGD_OPTIONS", "fp32_sum=ordered")  # the doors' options (mx.kv.create('cdsgd'))
    with pytest.raises(ConfigError, match="^%s$" % BAD):
        mx.kv.create("cdsgd")
    with pytest.raises(C.ConfigError, match="^%s$" % BAD):  # an experiment's config (scripts/train.py)
        C.validate({"iterations": 10, "fp32_sum": "ordered"})
    assert C.validate({"iterations": 10, "fp32_sum": "rank"}).fp32_sum == "rank"


def run_local(fp32_sum):
    pd, plist = params()
    tr = cdsgd_mx.Trainer(pd, "sgd", {"learning_rate": 0.25, "momentum": 0.5}, kvstore="local", algorithm="cdsgd",
                          k=3, warmup_steps=2, local_optimizer_params={"learning_rate": 0.5}, fp32_sum=fp32_sum)
    for t in range(6):
        for i, p in enumerate(plist):
            p.grad()[:] = offgrid_grad(p.data().asnumpy(), 0, t, i)
        mark_fresh(tr)
        tr.step(4)
    tr.wait_all()
    assert all(b.rows_key is None for bset in tr.kvstore.bucket_sets for b in bset.buckets)  # one worker: one order
    return [p.data().asnumpy() for p in plist]


def test_kvstore_local_takes_rank_and_trains_as_with_arrival():
    for a, b in zip(run_local("arrival"), run_local("rank")):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_rows_keys_stay_below_the_bound_so_that_one_server_holds_each(workers):
    """MXNet splits a row_sparse key of [N, m] values at or above the big-array bound across
    the servers by rows, which would part a bucket's rows; with fp32 rows keys the buckets are
    cut smaller (the same bound without them would let the rows key outgrow it)."""
    bound, region = 600, workers * auth.TAG_FLOATS
    sizes = [(0, 5000), (1, 37), (2, 1)]
    rows = buckets.plan(sizes, buckets.DEFAULT_BUCKET_SIZE, workers, 2, protocol.Keys(2), bound=bound, fp32_rows=True)
    assert max(workers * (b.size + region) for b in rows) < bound
    dense = buckets.plan(sizes, buckets.DEFAULT_BUCKET_SIZE, workers, 2, protocol.Keys(2), bound=bound)
    assert max(workers * (b.size + region) for b in dense) >= bound

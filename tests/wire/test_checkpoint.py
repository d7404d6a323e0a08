"""Stop and resume gives exactly the weights of an uninterrupted run, for every algorithm."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker.test_engine import K, SHAPES, STEPS, T, WARMUP, launch  # noqa: E402

import cdsgd_mx  # noqa: E402
from cdsgd_mx.wire import checkpoint  # noqa: E402
from cdsgd_mx.bench import mark_fresh  # noqa: E402


@pytest.mark.xdist_group("engine-runs")  # shares its run with other tests (tests/jobcache.py)
@pytest.mark.slow
@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_stop_and_resume_matches_uninterrupted_run(tmp_path, alg):
    # the arguments of test_engine's simulation test: its 2-worker, 2-server run is this whole one
    common = ["--algorithm", alg, "--steps", str(STEPS), "--warmup", str(WARMUP), "--k", str(K), "--threshold", str(T)]
    whole = launch(tmp_path / "whole", 2, 2, *common, shared=True)
    ckpt = str(tmp_path / "ckpt.states")
    launch(tmp_path / "first", 2, 2, *common, "--ckpt", ckpt, "--save-at", "5", allow_missing=True)
    resumed = launch(tmp_path / "second", 2, 2, *common, "--ckpt", ckpt, "--resume-at", "5")
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(resumed[r]["w%d" % i], whole[r]["w%d" % i])
            np.testing.assert_array_equal(resumed[r]["x%d" % i], whole[r]["x%d" % i])


@pytest.mark.xdist_group("pull-runs")  # shares its run with other tests (tests/jobcache.py)
@pytest.mark.slow
@pytest.mark.parametrize("alg", ["bitsgd", "cdsgd"])
def test_stop_and_resume_with_2bit_pulls_matches_uninterrupted_run(tmp_path, alg):
    """V on the servers and the workers is part of the checkpoint: saved at step 4 (bitsgd
    re-syncs every 3rd step, cdsgd corrects every 3rd: step 4 is past a 2-bit pull), resumed
    bit for bit."""
    import json
    from worker.test_engine import CFG
    from wire.test_pull_compression import R, run
    common = ["--algorithm", alg, "--steps", "8", "--warmup", str(WARMUP), "--k", str(K), "--threshold", str(T),
              "--config", json.dumps(dict(CFG, pull="2bit", resync_every=R))]
    whole = run(tmp_path / "whole", alg, 2, 2, 8, shared=True)[0]  # test_pull_compression's run with these arguments
    ckpt = str(tmp_path / "ckpt.states")
    launch(tmp_path / "first", 2, 2, *common, "--ckpt", ckpt, "--save-at", "4", allow_missing=True)
    resumed = launch(tmp_path / "second", 2, 2, *common, "--ckpt", ckpt, "--resume-at", "4")
    for r in range(2):
        np.testing.assert_array_equal(resumed[r]["v"], whole[r]["v"])
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(resumed[r]["w%d" % i], whole[r]["w%d" % i])
            np.testing.assert_array_equal(resumed[r]["x%d" % i], whole[r]["x%d" % i])


def test_corrupted_and_mismatched_checkpoints_give_clear_errors(tmp_path):
    import mxnet as mx
    from mxnet import gluon

    def trainer(**kw):
        params = gluon.ParameterDict()
        params.get("w", shape=(10,), init=mx.init.One())
        params.initialize()
        args = dict(kvstore="local", algorithm="cdsgd", warmup_steps=0)
        args.update(kw)
        tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, **args)
        params.get("w").grad()[:] = 0.1
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(1)
        return tr

    path = str(tmp_path / "c.states")
    trainer().save_states(path)
    trainer().load_states(path)  # round trip works
    with pytest.raises(ValueError, match="another configuration: k=3 here, 5 there"):
        trainer(k=3).load_states(path)
    with pytest.raises(ValueError, match="another configuration: bucket_size=4 here, 1048576 there"):
        trainer(bucket_size=4).load_states(path)
    with pytest.raises(ValueError, match="another configuration: pull_compression='2bit' here, 'none' there"):
        trainer(pull_compression="2bit").load_states(path)
    worker0 = [f for f in checkpoint.files_of(path) if f.endswith(".worker0")][0]
    data = open(worker0, "rb").read()
    open(worker0, "wb").write(data[: len(data) // 2])
    with pytest.raises(ValueError, match="missing, corrupted or truncated"):
        trainer().load_states(path)
    with pytest.raises(ValueError, match="missing, corrupted or truncated"):
        trainer().load_states(str(tmp_path / "nothing.states"))
    import json
    path = str(tmp_path / "old.states")
    trainer().save_states(path)
    old = checkpoint.read_manifest(path)["config"]  # formats 1 and 2: the configuration as the manifest
    for fmt, before in (("1", "fused buckets"), ("2", "all-or-nothing checkpoint sets")):
        json.dump(dict(old, format="cdsgd-mx checkpoint " + fmt), open(path, "w"), indent=1)
        with pytest.raises(ValueError, match="format 'cdsgd-mx checkpoint %s'.*written before %s cannot be resumed"
                           % (fmt, before)):
            trainer().load_states(path)

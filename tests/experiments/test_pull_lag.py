"""The probe of issue 40 (cdsgd_mx.experiments.pull_lag) reads V per parameter the way the
workers hold it: V equals W exactly in warm-up and follows it by codes after, CD-SGD's k-step
corrections included; the command prints its figures; and on the issue's momentum workload 2 bits
both ways keeps one way's accuracy (the rule before issue 40 lost 2-3 points there)."""
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import cdsgd_mx
from cdsgd_mx.experiments import pull_lag


def test_v_is_w_in_warm_up_and_follows_it_by_codes_after_corrections_included():
    mx.random.seed(0)
    net = pull_lag.mlp()
    net.initialize(mx.init.Xavier())
    params = net.collect_params()
    trainer = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore="local",
                               algorithm="cdsgd", k=4, warmup_steps=2, pull_compression="2bit")
    kv = trainer.kvstore
    rng = np.random.RandomState(0)
    lags = []
    for t in range(8):  # steps 0, 1 warm up; 2 and 6 are corrections ((t - 2) % 4 == 0), the others compressed
        x, y = mx.nd.array(rng.normal(0, 1, (16, 784))), mx.nd.array(rng.randint(0, 10, 16))
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
        loss.backward()
        trainer.step(16)
        kv.wait_all()
        w, v = pull_lag.global_flat(kv), pull_lag.v_flat(kv)
        lags.append(float(np.linalg.norm(w - v) / np.linalg.norm(w)))
    assert lags[0] == 0.0 and lags[1] == 0.0, lags  # warm-up pulls fp32 W: V := W on both sides
    assert all(lag > 0 for lag in lags[2:]), lags  # corrections too: V moves by codes, no jump to W
    names = pull_lag.names_of(trainer)
    assert all(kv.global_weights(key).shape == params[name].shape for key, name in enumerate(names))
    per = pull_lag.lag_per_parameter(kv, names)
    assert sorted(per) == sorted(params.keys()) and all(value > 0 for value in per.values())


def test_the_command_prints_accuracy_and_the_lag():
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.experiments.pull_lag", "--steps", "60", "--every", "20",
                           "--algorithms", "bitsgd", "--seeds", "0,1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in ("bitsgd, seed 0: test accuracy one way", "||W - V|| in updates", "V behind W along the last update",
                 "bitsgd: both ways minus one way, paired by seed (points): "):
        assert line in proc.stdout, proc.stdout
    bad = subprocess.run([sys.executable, "-m", "cdsgd_mx.experiments.pull_lag", "--seeds", "0,x"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--seeds must be comma-separated integers, got '0,x'" in bad.stderr


@pytest.mark.slow
def test_both_ways_keeps_one_ways_accuracy_under_momentum():
    """The issue's workload (MLP 784-300-100-10 on MNIST, SGD with momentum 0.9 and wd 1e-4, the
    rate cut 10x at 60%, k = 4, 20 warm-up steps), 600 steps, seeds 0-2, paired by seed. The rule
    before issue 40 (no aim ahead; CD-SGD's corrections and BIT-SGD's every 10th step re-synced)
    lost 2.08-3.27 points with CD-SGD and 0.96-4.45 with BIT-SGD on these seeds, and this test
    failed on it (docs/performance-history.md, "No re-syncs, and an aim ahead of W"); now both ways is no worse than one way by 0.5 point on
    average over the seeds, and by 1 point on any seed. Slow: 12 runs of 600 steps in process, about
    65 s on 2 cores."""
    for algorithm in ("cdsgd", "bitsgd"):
        diffs = []
        for seed in range(3):
            one = pull_lag.run(algorithm, "none", 600, 600, seed=seed)[0]
            both = pull_lag.run(algorithm, "2bit", 600, 600, seed=seed)[0]
            diffs.append(100 * (both - one))
        assert np.mean(diffs) > -0.5 and min(diffs) > -1.0, (algorithm, diffs)

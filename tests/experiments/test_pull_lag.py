"""The probe of issue 40 (cdsgd_mx.experiments.pull_lag) reads V per parameter the way the
workers hold it: V equals W exactly after CD-SGD's k-step correction (an fp32 re-sync) and
differs after a compressed pull, and the command prints its figures."""
import subprocess
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import cdsgd_mx
from cdsgd_mx.experiments import pull_lag


def test_v_is_w_after_a_correction_and_not_after_a_compressed_pull():
    mx.random.seed(0)
    net = pull_lag.mlp()
    net.initialize(mx.init.Xavier())
    params = net.collect_params()
    trainer = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore="local",
                               algorithm="cdsgd", k=4, warmup_steps=2, pull_compression="2bit")
    kv = trainer.kvstore
    rng = np.random.RandomState(0)
    lags = []
    for t in range(8):  # steps 2 and 6 are corrections ((t - 2) % 4 == 0), the others after 2 compressed
        x, y = mx.nd.array(rng.normal(0, 1, (16, 784))), mx.nd.array(rng.randint(0, 10, 16))
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
        loss.backward()
        trainer.step(16)
        kv.wait_all()
        w, v = pull_lag.global_flat(kv), pull_lag.v_flat(kv)
        lags.append(float(np.linalg.norm(w - v) / np.linalg.norm(w)))
    assert lags[2] == 0.0 and lags[6] == 0.0, lags  # re-sync: V := W on both sides
    assert all(lag > 0 for t, lag in enumerate(lags) if t in (3, 4, 5, 7)), lags
    per = pull_lag.lag_per_parameter(kv, list(params.keys()))
    assert sorted(per) == sorted(params.keys()) and all(value > 0 for value in per.values())


def test_the_command_prints_accuracy_and_the_lag():
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.experiments.pull_lag", "--steps", "60", "--every", "20",
                           "--algorithms", "bitsgd"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "bitsgd: test accuracy one way" in proc.stdout and "||W - V|| in updates" in proc.stdout, proc.stdout

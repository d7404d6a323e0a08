"""Device-resident buckets in the plugin (issue 12 item 2), run on CPU contexts.

On a GPU the plugin keeps grad_buf, loc_buf, the residual and the codes on the gradients'
device and moves only the codes (or an fp32 correction round's g(t)) to the host and W back,
once per bucket (buckets.py, device.py). CDSGD_DEVICE_PATH=1 takes that same path on CPU
contexts, so every step of it runs here: all four algorithms with 2 workers x 2 devices and 2
servers equal the simulation, the wire is unchanged, and a checkpoint restores the residual that
lives in the device buffers. What this cannot show is the ordering against a GPU's streams:
that part is the DLPack layer's (tests/worker/test_device.py), whose GPU tests run where a GPU is."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import test_multidevice as two  # noqa: E402
from test_engine import CFG, K, STEPS, T, WARMUP, finish, start  # noqa: E402
from workers.engine_worker import SHAPES  # noqa: E402

ALGORITHMS = ["ssgd", "bitsgd", "odsgd", "cdsgd"]
DEVICE_PATH = {"CDSGD_DEVICE_PATH": "1"}


@pytest.fixture(scope="module")
def device_path_jobs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("devpath")
    args = ["--steps", str(STEPS), "--warmup", str(WARMUP), "--k", str(K), "--threshold", str(T),
            "--config", json.dumps(dict(CFG, devices=2))]
    jobs = {alg: start(tmp / alg, 2, 2, "--algorithm", alg, *args, env=DEVICE_PATH) for alg in ALGORITHMS}
    try:
        return {name: finish(job) for name, job in jobs.items()}
    finally:
        for proc, *_ in jobs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_device_resident_buckets_match_the_simulation(device_path_jobs, alg):
    got = device_path_jobs[alg]
    xs, W = two.sim(alg, 2)
    for r in range(2):
        assert bool(got[r]["device_path"]), "rank %d did not take the device path" % r
        np.testing.assert_array_equal(got[r]["bytes"], got[r]["bytes_expected"])  # the wire is unchanged
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(got[r]["x%d_dev1" % i], got[r]["x%d" % i])
            np.testing.assert_allclose(got[r]["w%d" % i], W[i], rtol=1e-5, atol=1e-5,
                                       err_msg="global W, param %d, rank %d" % (i, r))
            np.testing.assert_allclose(got[r]["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5,
                                       err_msg="forward weights x, param %d, rank %d" % (i, r))


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_one_process_on_the_device_path_matches_the_simulation(monkeypatch, alg):
    monkeypatch.setenv("CDSGD_DEVICE_PATH", "1")
    plist, tr = two.two_device_trainer(alg)
    two.train(plist, tr, range(STEPS))
    assert [s.device is not None for s in tr.kvstore.bucket_sets] == [True]
    xs, W = two.sim(alg, 1)
    for i, on_devices in enumerate(two.device_weights(plist)):
        for x in on_devices:
            np.testing.assert_allclose(x, xs[0][i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(tr.kvstore.global_weights(i).asnumpy(), W[i], rtol=1e-5, atol=1e-5)


def test_a_checkpoint_restores_the_residual_on_the_device(monkeypatch, tmp_path):
    monkeypatch.setenv("CDSGD_DEVICE_PATH", "1")
    two.test_checkpoint_round_trip_with_two_devices(tmp_path)


def test_a_non_finite_gradient_on_the_device_path_is_caught(monkeypatch):
    monkeypatch.setenv("CDSGD_DEVICE_PATH", "1")
    two.test_a_non_finite_gradient_on_another_device_is_caught()

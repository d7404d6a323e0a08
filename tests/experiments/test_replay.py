"""The replay (cdsgd_mx.experiments.replay): a CD-SGD job recorded with CDSGD_RECORD through
scripts/train.py, compared step by step with the simulation on the same gradients. Identical
when nothing is touched; a changed gradient, a non-finite one and a record the simulation does
not model are each said where they are."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cdsgd_mx.experiments import replay
from cdsgd_mx.worker import recorder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 90  # warm-up 50, then CD-SGD with k = 2: codes, fp32 corrections, delayed local updates


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """fig6's settings (local rate 0.4, threshold 0.5, k = 2), 2 workers, a short run."""
    base = tmp_path_factory.mktemp("replay")
    folder = str(base / "record")
    env = dict(os.environ, **{recorder.ENV: folder})
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train.py"), "--config",
                           os.path.join(ROOT, "configs", "fig6_lenet_mnist.yaml"), "epochs=null",
                           "iterations=%d" % STEPS, "train_samples=6000", "test_samples=500", "checkpoint=false",
                           "out=" + str(base / "run")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return folder


def copy_of(folder, tmp_path):
    dst = str(tmp_path / "copy")
    shutil.copytree(folder, dst)
    return dst


def records(folder, rank):
    meta, rec = recorder.read(folder, rank)
    return meta, np.memmap(os.path.join(folder, "rank%d.rec" % rank), rec.dtype, "r+", shape=rec.shape)


def test_a_recorded_run_is_the_simulation_bit_for_bit(recorded):
    meta, rec = recorder.read(recorded, 1)
    assert meta["algorithm"] == "cdsgd" and meta["workers"] == 2 and meta["k"] == 2 and len(rec) == STEPS
    assert rec["head"][0].tolist() == [0, 64, 0.1, 0.4]  # train.py steps with the global batch (32 x 2)
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.experiments.replay", recorded, "--every", "40"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical" in proc.stdout and "at each of the %d steps compared" % STEPS in proc.stdout
    assert "replay: step 40 of %d identical" % STEPS in proc.stdout  # progress


def test_a_changed_gradient_is_found_at_the_step_it_first_moves_a_weight(recorded, tmp_path):
    folder = copy_of(recorded, tmp_path)
    meta, rec = records(folder, 1)
    rec["g"][70, 5] += 0.25  # worker 1's gradient of step 70 (a compressed step after warm-up)
    rec.flush()
    result = replay.replay(folder, out=open(os.devnull, "w"))
    # its local update x(71) = W(70) - lr_loc g(70) is the first weight it touches
    assert result["differs"].startswith("step 71, worker 1, %s:" % meta["names"][0]), result


def test_a_non_finite_gradient_is_named_and_the_weights_before_it_compared(recorded, tmp_path):
    folder = copy_of(recorded, tmp_path)
    meta, rec = records(folder, 0)
    offset = int(np.prod(meta["shapes"][0])) + int(np.prod(meta["shapes"][1]))
    rec["g"][60, offset + 3] = np.inf  # the third parameter of worker 0, step 60
    rec.flush()
    result = replay.replay(folder, out=open(os.devnull, "w"))
    assert result["nonfinite"] == (60, 0, meta["names"][2]) and result["steps"] == 61 and result["differs"] is None
    assert "the algorithm itself diverged" in replay.describe(result)


def test_a_record_the_simulation_does_not_model_stops_in_one_line(recorded, tmp_path):
    folder = copy_of(recorded, tmp_path)
    for rank in (0, 1):
        path = os.path.join(folder, "rank%d.json" % rank)
        meta = json.load(open(path))
        meta["pull_compression"] = "2bit"
        json.dump(meta, open(path, "w"))
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.experiments.replay", folder],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "replay: pull_compression: '2bit'; the simulation models 'none'"
    os.remove(os.path.join(folder, "rank1.json"))
    with pytest.raises(replay.Unsupported, match="1 workers' records, the run had 2"):
        replay.load(folder)

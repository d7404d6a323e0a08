"""CIFAR-10 and ImageNet loaders on small fake files in the real formats: both CIFAR-10
layouts read identically, ranks see disjoint complete shards, missing data is a clear error."""
import os
import pickle
import sys

import numpy as np
import pytest

from cdsgd_mx.experiments import data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fake_cifar(rng, per_batch=6):
    """Six batches of (uint8 images [n,3,32,32], labels)."""
    return [(rng.randint(0, 256, (per_batch, 3, 32, 32)).astype(np.uint8), rng.randint(0, 10, per_batch))
            for _ in range(6)]


def write_py(folder, batches):
    os.makedirs(folder)
    for name, (x, y) in zip(data.CIFAR_PY, batches):
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump({b"data": x.reshape(len(x), -1), b"labels": [int(v) for v in y]}, f)


def write_bin(folder, batches):
    os.makedirs(folder)
    for name, (x, y) in zip(data.CIFAR_BIN, batches):
        rec = np.concatenate([y.astype(np.uint8)[:, None], x.reshape(len(x), -1)], axis=1)
        rec.tofile(os.path.join(folder, name))


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CDSGD_DATA", str(tmp_path / "cache"))


def test_cifar10_both_layouts_read_the_same(tmp_path, empty_cache):
    batches = fake_cifar(np.random.RandomState(0))
    write_py(str(tmp_path / "a" / "cifar-10-batches-py"), batches)
    write_bin(str(tmp_path / "b" / "cifar-10-batches-bin"), batches)
    a = data.load_cifar10(str(tmp_path / "a"))
    b = data.load_cifar10(str(tmp_path / "b"))
    for u, v in zip(a[:4], b[:4]):
        np.testing.assert_array_equal(u, v)
    xtr, ytr, xte, yte, source = a
    assert xtr.shape == (30, 3, 32, 32) and xte.shape == (6, 3, 32, 32) and xtr.dtype == np.float32
    assert "CIFAR-10" in source and "cifar-10-batches-py" in source
    assert "cifar-10-batches-bin" in b[4]
    # labels in file order, images normalized per channel with CIFAR-10's mean and std
    np.testing.assert_array_equal(ytr, np.concatenate([y for _, y in batches[:5]]).astype(np.float32))
    raw = batches[0][0][1, 2, 5, 7]
    assert xtr[1, 2, 5, 7] == pytest.approx((raw / 255.0 - 0.4465) / 0.2616, rel=1e-5)
    np.testing.assert_array_equal(yte, batches[5][1].astype(np.float32))


def test_cifar10_found_in_the_folder_itself_and_in_the_cache(tmp_path, monkeypatch):
    batches = fake_cifar(np.random.RandomState(1), 2)
    write_py(str(tmp_path / "flat"), batches)
    assert data.find_cifar10(str(tmp_path / "flat")) == str(tmp_path / "flat")
    monkeypatch.setenv("CDSGD_DATA", str(tmp_path / "cache"))
    write_bin(str(tmp_path / "cache" / "cifar-10-batches-bin"), batches)
    assert data.find_cifar10(None) == str(tmp_path / "cache" / "cifar-10-batches-bin")
    assert data.find_cifar10(str(tmp_path / "nowhere")) == str(tmp_path / "cache" / "cifar-10-batches-bin")


def test_cifar10_missing_is_one_clear_error(tmp_path, empty_cache, monkeypatch):
    """The launching process's fetch (data.ensure) fails: one line naming where it looked and
    why the fetch failed; the loader itself never downloads (tests/experiments/test_fresh_machine.py)."""
    mx = pytest.importorskip("mxnet")

    def no_network(*args, **kwargs):
        raise OSError("network unreachable")
    monkeypatch.setattr(mx.gluon.data.vision, "CIFAR10", no_network)
    with pytest.raises(FileNotFoundError, match=r"CIFAR-10 not found \(looked in .*nothing-here.*network unreachable"):
        data.ensure("cifar10", str(tmp_path / "nothing-here"))
    with pytest.raises(FileNotFoundError, match=r"CIFAR-10 not found \(looked in .*nothing-here"):
        data.load_cifar10(str(tmp_path / "nothing-here"))


def test_cifar10_shards_through_the_training_script(tmp_path, empty_cache):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import train
    finally:
        sys.path.pop(0)
    from cdsgd_mx.experiments import config as C
    write_py(str(tmp_path / "cifar-10-batches-py"), fake_cifar(np.random.RandomState(2), 7))
    cfg = C.validate(C.parse_overrides(["model=resnet20", "dataset=cifar10", "data_dir=%s" % tmp_path, "batch_size=2", "epochs=1"]))
    seen = []
    for rank in range(3):
        d = train.load_data(cfg, rank, 3)
        assert d.source.startswith("CIFAR-10") and len(d.xte) == 7
        seen.append(d.xtr)
        # augmented batches: right shape, a pure function of (seed, epoch, rank) for resume
        first = [x.copy() for x, _ in d.train_batches(0)]
        again = [x for x, _ in d.train_batches(0)]
        assert first[0].shape == (2, 3, 32, 32) and all(np.array_equal(a, b) for a, b in zip(first, again))
        assert not all(np.array_equal(a, b) for a, b in zip(first, (x for x, _ in d.train_batches(1))))
    flat = np.concatenate(seen).reshape(35, -1)
    assert len({row.tobytes() for row in flat}) == 35  # disjoint and complete: 5 batches x 7


def write_records(folder, name, labels, rng, size=40):
    mx = pytest.importorskip("mxnet")
    pytest.importorskip("cv2")
    rec = mx.recordio.MXIndexedRecordIO(os.path.join(folder, name + ".idx"),
                                        os.path.join(folder, name + ".rec"), "w")
    for i, label in enumerate(labels):
        img = rng.randint(0, 256, (size, size, 3)).astype(np.uint8)
        header = mx.recordio.IRHeader(0, float(label), i, 0)
        rec.write_idx(i, mx.recordio.pack_img(header, img, quality=95, img_fmt=".png"))
    rec.close()


def test_imagenet_records_are_sharded_by_rank(tmp_path):
    rng = np.random.RandomState(3)
    train_labels = np.arange(12) % 5
    write_records(str(tmp_path), "train", train_labels, rng)
    write_records(str(tmp_path), "val", [0, 1, 2, 3, 4], rng)
    assert data.find_imagenet(str(tmp_path)) == str(tmp_path)
    parts = []
    for rank in range(2):
        r = data.ImageNetRecords(str(tmp_path), rank, 2, batch_size=4, shape=(3, 32, 32), seed=0)
        assert r.num_train == 12 and "ImageNet RecordIO" in r.source
        labels = []
        for x, y in r.train_batches(0):
            assert x.shape[1:] == (3, 32, 32) and np.isfinite(x.asnumpy()).all()
            labels += y.asnumpy().tolist()
        parts.append(labels)
        val = np.concatenate([y.asnumpy() for _, y in r.val_batches()])
        assert sorted(val.tolist()) == [0, 1, 2, 3, 4]
    assert len(parts[0]) == len(parts[1]) == 6
    assert sorted(parts[0] + parts[1]) == sorted(train_labels.astype(float).tolist())


def test_imagenet_missing_names_the_files(tmp_path):
    assert data.find_imagenet(str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="must hold train.rec, train.idx, val.rec, val.idx"):
        data.ImageNetRecords(str(tmp_path), 0, 1, 4)


def test_every_rank_takes_the_same_number_of_batches(tmp_path, empty_cache):
    """35 samples on 2 ranks in batches of 6: shards of 18 and 17 would give 3 and 2 batches,
    and the rank with more would wait forever for the other's push (issue 14)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import train
    finally:
        sys.path.pop(0)
    from cdsgd_mx.experiments import config as C
    write_py(str(tmp_path / "cifar-10-batches-py"), fake_cifar(np.random.RandomState(3), 7))
    cfg = C.validate(C.parse_overrides(["model=resnet20", "dataset=cifar10", "data_dir=%s" % tmp_path,
                                        "batch_size=6", "epochs=1"]))
    counts = [[len(list(train.load_data(cfg, rank, 2).train_batches(epoch))) for epoch in range(2)]
              for rank in range(2)]
    assert counts == [[2, 2], [2, 2]]
    assert [train.load_data(cfg, rank, 2).per_epoch for rank in range(2)] == [2, 2]

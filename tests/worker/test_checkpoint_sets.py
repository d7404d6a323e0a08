"""Checkpoints are all-or-nothing sets: a kill at any point of a save, a full disk or a
read-only directory leaves the last complete set loadable and no temp file; every damaged file
gives the one-line ValueError; mixed sets and renamed parameters are refused."""
import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workers import checkpoint_worker as cw  # noqa: E402
from workers.checkpoint_worker import make_trainer, state, step  # noqa: E402

from cdsgd_mx.wire import checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def trained(steps):
    params, tr = make_trainer()
    for t in range(steps):
        step(params, tr, t)
    return params, tr


def continued(ckpt, first, steps=2):
    """Load ckpt into a fresh trainer and take `steps` steps from step `first`: the state."""
    params, tr = make_trainer()
    tr.load_states(ckpt)
    for t in range(first, first + steps):
        step(params, tr, t)
    return state(params, tr)


def reference(saved_at, steps=2):
    """The state of an uninterrupted run at saved_at + steps."""
    params, tr = trained(saved_at + steps)
    return state(params, tr)


def assert_same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def only_the_set(folder, ckpt, others=()):
    """The folder holds the manifest's set and nothing else of the checkpoint (no temp file,
    no other set)."""
    assert sorted(os.listdir(folder)) == sorted([os.path.basename(f) for f in checkpoint.files_of(ckpt)] +
                                                list(others))


def load_error(ckpt, **kw):
    """The exception of loading ckpt: it must be exactly ValueError (or Damaged), one line."""
    params, tr = make_trainer(**kw)
    with pytest.raises(Exception) as e:
        tr.load_states(ckpt)
    tr.kvstore.close()
    assert type(e.value) in (ValueError, checkpoint.Damaged), repr(e.value)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and "checkpoint" in message, message
    return message


@pytest.fixture
def saved(tmp_path):
    """A complete set after 2 steps, in tmp_path/a."""
    folder = tmp_path / "a"
    folder.mkdir()
    ckpt = str(folder / "c.states")
    params, tr = trained(2)
    tr.save_states(ckpt, extra={"epoch": 7})
    return ckpt


def test_a_set_round_trips_and_a_new_save_replaces_the_old_set(saved):
    folder = os.path.dirname(saved)
    files = checkpoint.files_of(saved)
    assert [f.rsplit(".", 1)[-1] for f in files] == ["states", "worker0", "server0"]
    ids = {checkpoint.read_manifest(saved)["id"]} | {f.split(".")[-2] for f in files[1:]}
    assert len(ids) == 1 and ids.pop().startswith("2-")  # one save id, the step first
    only_the_set(folder, saved)
    assert_same(continued(saved, 2), reference(2))
    params, tr = make_trainer()
    assert tr.load_states(saved) == {"epoch": 7}
    step(params, tr, 2)
    tr.save_states(saved)
    assert checkpoint.read_manifest(saved)["id"].startswith("3-")
    only_the_set(folder, saved)  # the old set is gone
    assert_same(continued(saved, 3), reference(3))


@pytest.mark.parametrize("n,when", [(1, "before"), (1, "after"), (2, "before"), (2, "after"), (3, "before"),
                                    (3, "after")])
def test_a_kill_at_any_point_of_a_save_leaves_a_complete_set(saved, n, when):
    """os._exit before / after each rename of the save (server file, worker file, manifest)."""
    proc = subprocess.run([sys.executable, cw.__file__, saved, str(n), when], cwd=str(ROOT),
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stdout[-2000:] + proc.stderr[-2000:]
    folder = os.path.dirname(saved)
    left = os.listdir(folder)
    if (n, when) != (3, "after"):
        assert checkpoint.read_manifest(saved)["step"] == 2  # the previous set
        assert any(".part" in f for f in left) == (when == "before")  # what the kill left behind
        assert_same(continued(saved, 2), reference(2))
    else:
        assert checkpoint.read_manifest(saved)["step"] == 3  # the new set was complete
        assert_same(continued(saved, 3), reference(3))
    only_the_set(folder, saved)  # the load removed the leftovers


@pytest.mark.parametrize("failing", [1, 2, 3])
def test_a_failed_write_names_the_path_and_errno_and_keeps_the_last_set(saved, monkeypatch, failing):
    """The server's file (1), the worker's (2) or the manifest (3) cannot be written."""
    real, calls = checkpoint.write_file, []

    def write_file(path, sid, body):
        calls.append(path)
        if len(calls) == failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        real(path, sid, body)

    params, tr = make_trainer()
    tr.load_states(saved)
    step(params, tr, 2)
    monkeypatch.setattr(checkpoint, "write_file", write_file)
    with pytest.raises(checkpoint.SaveError) as e:
        tr.save_states(saved)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and e.value.errno == errno.ENOSPC
    assert "could not write %s: [Errno 28] No space left on device" % calls[failing - 1] in message
    assert [".server0", ".worker0", ".states"][failing - 1] in calls[failing - 1]
    monkeypatch.undo()
    only_the_set(os.path.dirname(saved), saved)  # the new set's files are gone
    assert checkpoint.read_manifest(saved)["step"] == 2
    assert_same(continued(saved, 2), reference(2))


@pytest.fixture
def tmpfs(tmp_path):
    folder = tmp_path / "fs"
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root): %s" % proc.stderr.strip())
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder):
    """Fill the file system: a file grows until the disk is full."""
    with open(os.path.join(folder, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC


def test_a_full_disk_fails_the_save_cleanly(tmpfs):
    ckpt = str(tmpfs / "c.states")
    params, tr = trained(2)
    tr.save_states(ckpt)
    step(params, tr, 2)
    fill(tmpfs)
    with pytest.raises(checkpoint.SaveError) as e:
        tr.save_states(ckpt)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and e.value.errno == errno.ENOSPC
    assert "could not write %s." % ckpt in message and "[Errno 28] No space left on device" in message
    only_the_set(tmpfs, ckpt, ["filler"])  # no temp file: the disk is as full as before, not fuller
    os.remove(tmpfs / "filler")
    assert_same(continued(ckpt, 2), reference(2))


def test_a_read_only_directory_fails_the_save_cleanly(tmpfs):
    ckpt = str(tmpfs / "c.states")
    params, tr = trained(2)
    tr.save_states(ckpt)
    step(params, tr, 2)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    try:
        with pytest.raises(checkpoint.SaveError) as e:
            tr.save_states(ckpt)
        assert_same(continued(ckpt, 2), reference(2))  # a read-only set loads
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and e.value.errno == errno.EROFS
    assert "could not write %s." % ckpt in message and "[Errno 30] Read-only file system" in message
    only_the_set(tmpfs, ckpt)


def test_every_truncation_and_corruption_of_every_file_gives_the_one_line_error(saved):
    rng = np.random.RandomState(0)
    for path in checkpoint.files_of(saved):
        data = open(path, "rb").read()
        header = data.index(b"\n")
        lengths = sorted({0, 1, header // 2, header - 1, header, header + 1, header + 2, (header + len(data)) // 2,
                          len(data) - 1})
        damaged = [data[:n] for n in lengths]
        for _ in range(12):  # random bytes changed, a third of them in the header
            at = rng.randint(0, header + 1) if len(damaged) % 3 == 0 else rng.randint(0, len(data))
            changed = bytearray(data)
            changed[at] ^= rng.randint(1, 256)
            damaged.append(bytes(changed))
        for bad in damaged:
            with open(path, "wb") as f:
                f.write(bad)
            load_error(saved)
        with open(path, "wb") as f:
            f.write(data)
    assert_same(continued(saved, 2), reference(2))  # restored: loads again


def test_a_mixed_set_is_refused_naming_the_files(saved, tmp_path):
    old = {f.rsplit(".", 1)[-1]: open(f, "rb").read() for f in checkpoint.files_of(saved)}
    params, tr = make_trainer()
    tr.load_states(saved)
    step(params, tr, 2)
    tr.save_states(saved)
    manifest = checkpoint.read_manifest(saved)
    for node in ("worker0", "server0"):
        path = checkpoint.file_path(saved, manifest["id"], node)
        new = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(old[node])  # the file of the save before, under the new set's name
        message = load_error(saved)
        assert "checkpoint file %s holds save 2-" % path in message
        assert "the manifest names save %s: a mixed set" % manifest["id"] in message
        with open(path, "wb") as f:
            f.write(new)


def test_renamed_parameters_are_refused(saved):
    message = load_error(saved, names=("w", "u"))
    # positions in gluon's order, the keys' (names sorted: v, w there; u, w here)
    assert message == ("checkpoint %s holds other parameters: parameter 0 is 'v' there, 'u' here; load it into a "
                       "network whose parameters have the same names" % saved)


def test_a_different_optimizer_is_named_in_one_line_and_the_saved_one_restored(saved, capsys):
    params, tr = make_trainer()
    tr.load_states(saved)
    assert "optimizer differs" not in capsys.readouterr().out  # the same optimizer: nothing said
    params, tr = make_trainer(optimizer_params={"learning_rate": 0.2, "momentum": 0.9})
    tr.load_states(saved)
    lines = [line for line in capsys.readouterr().out.splitlines() if "optimizer" in line]
    assert lines == ["cdsgd_mx: the checkpoint's optimizer differs from this script's (learning_rate 0.1 there, "
                     "0.2 here); restoring the checkpoint's, as gluon's load_states does"]
    assert tr.learning_rate == 0.1
    params, tr = make_trainer(optimizer="nag", optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    tr.load_states(saved)
    out = capsys.readouterr().out
    assert out.count("optimizer differs") == 1 and "name 'sgd' there, 'nag' here" in out


def test_checkpoints_of_older_formats_are_refused_clearly(saved):
    config = checkpoint.read_manifest(saved)["config"]
    json.dump(dict(config, format="cdsgd-mx checkpoint 2"), open(saved, "w"), indent=1)
    message = load_error(saved)
    assert "has format 'cdsgd-mx checkpoint 2', this cdsgd-mx reads 'cdsgd-mx checkpoint 3'" in message


# -- real processes: 2 workers, 2 servers ------------------------------------------------------
def launch(ckpt, out, *args):
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "2", "--timeout", "120", "--",
           sys.executable, str(ROOT / "tests" / "workers" / "engine_worker.py"), "--out", str(out),
           "--algorithm", "cdsgd", "--steps", "9", "--warmup", "2", "--k", "3", "--ckpt", ckpt] + list(args)
    env = dict(os.environ, MXNET_KVSTORE_BIGARRAY_BOUND="600")
    return subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_a_failed_save_of_a_launched_job_stops_it_and_keeps_the_last_set(tmpfs, tmp_path):
    ckpt = str(tmpfs / "c.states")
    first = launch(ckpt, tmp_path / "o1", "--save-at", "3")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    manifest = checkpoint.read_manifest(ckpt)
    assert manifest["step"] == 3 and len(checkpoint.files_of(ckpt)) == 5  # manifest, 2 workers, 2 servers
    npz = ["c.states.x0.npz", "c.states.x1.npz"]  # engine_worker's own files, beside the set
    only_the_set(tmpfs, ckpt, npz)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    try:
        failed = launch(ckpt, tmp_path / "o2", "--resume-at", "3", "--save-at", "5")
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0
    errors = [line for line in out.splitlines() if "SaveError: checkpoint save failed" in line]
    assert errors, out[-3000:]
    for role in ("worker", "server"):  # each worker hears of every node, the servers included
        for i in (0, 1):
            assert re.search(r"%s %d: could not write %s\.[0-9a-f-]+\.%s%d: \[Errno 30\] Read-only file system"
                             % (role, i, re.escape(ckpt), role, i), errors[0]), errors[0]
    assert checkpoint.read_manifest(ckpt)["id"] == manifest["id"]
    only_the_set(tmpfs, ckpt, npz)
    again = launch(ckpt, tmp_path / "o3", "--resume-at", "3", "--save-at", "5")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    assert checkpoint.read_manifest(ckpt)["step"] == 5
    only_the_set(tmpfs, ckpt, npz)  # the old set is gone, on the workers' and the servers' side

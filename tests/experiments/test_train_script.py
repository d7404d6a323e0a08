"""scripts/train.py end to end on a small job, and its config errors."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "scripts", "train.py")
CONFIG = os.path.join(ROOT, "configs", "fig6_lenet_mnist.yaml")


def run(*args, timeout=300):
    return subprocess.run([sys.executable, TRAIN, "--config", CONFIG] + list(args), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_two_workers_on_synthetic_data_write_metrics_and_checkpoints(tmp_path):
    out = str(tmp_path / "run")
    proc = run("dataset=synthetic", "epochs=null", "iterations=12", "warmup_steps=2", "out=" + out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["data"].startswith("synthetic 1x28x28 inputs") and config["k_used"] == 2
    for rank in (0, 1):
        rows = [json.loads(l) for l in open(os.path.join(out, "metrics-rank%d.jsonl" % rank))]
        iters = [r for r in rows if "iteration" in r]
        assert [r["iteration"] for r in iters] == list(range(12))
        # cdsgd, warm-up 2, k = 2: steps 2, 4, ... push fp32, the others 2-bit codes
        assert iters[3]["bytes_pushed"] * 10 < iters[2]["bytes_pushed"]
        assert rows[-1]["epoch"] == 0 and rows[-1]["data"].startswith("synthetic")
    from cdsgd_mx.wire import checkpoint
    manifest = os.path.join(out, "checkpoint.states")
    files = checkpoint.files_of(manifest)
    assert [f.rsplit(".", 1)[-1] for f in files[1:]] == ["worker0", "worker1", "server0"]
    assert all(os.path.exists(f) for f in files)
    assert sorted(f for f in os.listdir(out) if f.startswith("checkpoint")) == sorted(map(os.path.basename, files))
    extra = checkpoint.read_manifest(manifest)["extra"]
    assert sorted(extra) == ["epoch", "run"] and extra["epoch"] == 1
    assert len(extra["run"]) == 16 and int(extra["run"], 16) >= 0  # the launcher's run id (a restart resumes only its own)
    for rank in (0, 1):
        assert checkpoint.load_parameters(manifest, rank)  # each worker's parameters are in the set


def test_network_hosts_runs_each_node_on_an_emulated_host(tmp_path):
    """network: hosts (Table 2's default, issue 48) puts every node on an emulated host with a
    NIC of `bandwidth`, and the run's config.json says where it ran.
    Slow: a 2-worker job on 3 emulated hosts, about 20 s."""
    from cdsgd_mx.cluster import emulate
    if emulate.unavailable():
        pytest.skip(emulate.unavailable())
    out = str(tmp_path / "run")
    proc = run("dataset=synthetic", "epochs=null", "iterations=4", "warmup_steps=2", "network=hosts",
               "bandwidth=100mbit", "checkpoint=false", "out=" + out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["network"] == "hosts" and config["bandwidth"] == "100mbit", config
    assert config["scheduler"].startswith(emulate.SUBNET), config  # not this machine's loopback
    # rank 0 ran over ssh on its host, and still records the user's command, not its own
    command = config["provenance"]["command"]
    assert "network=hosts" in command and "--worker" not in command, command
    shared = str(tmp_path / "shared")
    proc = run("dataset=synthetic", "epochs=null", "iterations=2", "warmup_steps=1", "checkpoint=false",
               "out=" + shared)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    config = json.load(open(os.path.join(shared, "config.json")))
    assert config["network"] == "shared" and config["scheduler"].startswith("127."), config


def load_train_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_script", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("netns,expected_launch,expected_overrides", [
    (None, ["--bandwidth", "1gbit"], ["network=shared"]),  # a namespace: the shared loopback, shaped
    ("no namespaces here", [], ["network=shared", "bandwidth=null", "latency=null"]),  # nothing: unshaped
])
def test_network_hosts_falls_back_where_no_hosts_can_be_made(tmp_path, monkeypatch, capsys, netns,
                                                           expected_launch, expected_overrides):
    """Where emulated hosts cannot be made, network: hosts becomes the shared loopback, shaped
    where a namespace can be made, else unshaped, said in one line; the workers get the network
    they really have as overrides (their config.json records it)."""
    from cdsgd_mx.cluster import emulate, shaping
    train = load_train_script()
    monkeypatch.setattr(emulate, "unavailable", lambda: "no emulated hosts here")
    monkeypatch.setattr(shaping, "netns_unavailable", lambda: netns)
    monkeypatch.setenv(train.COMMAND_ENV, "")  # main() sets it: restored after the test
    launched = []
    monkeypatch.setattr(train.subprocess, "call", lambda cmd: launched.append(cmd) or 0)
    assert train.main(["--config", CONFIG, "dataset=synthetic", "epochs=null", "iterations=2", "network=hosts",
                       "bandwidth=1gbit", "out=" + str(tmp_path / "x")]) == 0
    (cmd,) = launched
    launch_args, worker_args = cmd[:cmd.index("--")], cmd[cmd.index("--"):]
    assert "--emulate-hosts" not in launch_args and "--nic" not in launch_args
    assert ("--bandwidth" in launch_args) == bool(expected_launch)
    if expected_launch:
        assert launch_args[launch_args.index("--bandwidth"):][:2] == expected_launch
    assert worker_args[-len(expected_overrides):] == expected_overrides, worker_args
    said = capsys.readouterr().out
    assert "emulated hosts are not available here (no emulated hosts here)" in said, said
    assert ("unshaped loopback" in said) == (netns is not None), said


def test_one_worker_with_nothing_to_shape_records_no_emulated_hosts(tmp_path):
    """One worker without bandwidth or latency trains in its own process: its config.json must
    not claim emulated hosts."""
    out = str(tmp_path / "one")
    proc = run("dataset=synthetic", "epochs=null", "iterations=2", "workers=1", "network=hosts", "checkpoint=false",
               "out=" + out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["network"] == "shared" and config["scheduler"] is None, config


@pytest.mark.parametrize("override,message", [
    ("k=0", "config error: k must be an integer >= 1 or 'auto', got 0"),
    ("algorithm=adam", "config error: algorithm must be one of ssgd, bitsgd, odsgd, cdsgd, got 'adam'"),
    ("k=auto", "config error: k: auto needs costs"),
    ("nonsense", "config error: override 'nonsense' must look like field=value"),
    ("fp32_sum=ordered", "config error: fp32_sum must be one of arrival, rank, got 'ordered'"),
    ("network=cluster", "config error: network must be one of shared, hosts, got 'cluster'"),
])
def test_config_errors_are_one_line_before_anything_starts(tmp_path, override, message):
    proc = run(override, "out=" + str(tmp_path / "x"), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == message or proc.stderr.strip().startswith(message)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not os.path.exists(str(tmp_path / "x"))


def test_resume_from_a_checkpoint_of_an_older_format_is_one_line(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    (out / "checkpoint.states").write_text(json.dumps({"format": "cdsgd-mx checkpoint 2", "k": 2}, indent=1))
    proc = run("dataset=synthetic", "workers=1", "epochs=null", "iterations=2", "out=" + str(out), "--resume",
               timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("resume error: checkpoint %s has format 'cdsgd-mx checkpoint 2'"
                                          % (out / "checkpoint.states"))
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_resume_continues_exactly(tmp_path):
    import numpy as np
    from cdsgd_mx.wire import checkpoint
    common = ["dataset=synthetic", "epochs=null", "warmup_steps=2", "algorithm=cdsgd"]
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    assert run(*common, "iterations=130", "out=" + whole).returncode == 0
    assert run(*common, "iterations=64", "out=" + part).returncode == 0  # stops after epoch 1
    proc = run(*common, "iterations=130", "out=" + part, "--resume")
    assert proc.returncode == 0, proc.stdout[-3000:]
    made = json.load(open(os.path.join(part, "config.json")))["provenance"]  # both runs' records, in order
    assert made["resumed_at_epoch"] == 1 and "--resume" in made["command"]
    assert "iterations=64" in made["before"]["command"] and "before" not in made["before"]
    for rank in (0, 1):
        a = checkpoint.load_parameters(os.path.join(whole, "checkpoint.states"), rank)
        b = checkpoint.load_parameters(os.path.join(part, "checkpoint.states"), rank)
        assert sorted(a) == sorted(b)
        for name in a:
            np.testing.assert_array_equal(a[name].asnumpy(), b[name].asnumpy())


@pytest.mark.slow
def test_the_same_seed_gives_the_same_run(tmp_path):
    """Two jobs with the same seed (launcher, 2 workers, 1 server; CD-SGD, so compressed pushes
    and delayed steps on the communication thread) log the same losses and test accuracy to the
    last bit on both workers; another seed gives another run (init, shard and order follow it)."""
    common = ["algorithm=cdsgd", "epochs=null", "iterations=24", "warmup_steps=4", "train_samples=2000",
              "test_samples=500", "checkpoint=false"]
    logs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = str(tmp_path / name)
        proc = run(*common, "seed=%d" % seed, "out=" + out)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        logs[name] = []
        for rank in (0, 1):
            rows = [json.loads(l) for l in open(os.path.join(out, "metrics-rank%d.jsonl" % rank))]
            logs[name].append(([r["loss"] for r in rows if "iteration" in r], rows[-1]["test_accuracy"]))
    assert len(logs["a"][0][0]) == 24 and logs["a"][0][1] > 0.1  # evaluated: above chance
    assert logs["a"] == logs["b"]
    assert logs["a"][0][0][0] != logs["c"][0][0][0]  # the first step already differs: another init and batch


def rank_order_run(out, seed, fp32_sum="rank"):
    """A 4-worker CD-SGD job on synthetic data (warm-up, corrections, codes): every rank's loss
    at every step, and its parameters at the end (the checkpoint's)."""
    from cdsgd_mx.wire import checkpoint
    proc = run("workers=4", "dataset=synthetic", "epochs=null", "iterations=30", "warmup_steps=6", "k=3",
               "batch_size=16", "fp32_sum=" + fp32_sum, "seed=%d" % seed, "out=" + out, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    losses = [[json.loads(l)["loss"] for l in open(os.path.join(out, "metrics-rank%d.jsonl" % r)) if '"iteration"' in l]
              for r in range(4)]
    manifest = os.path.join(out, "checkpoint.states")
    return losses, [checkpoint.load_parameters(manifest, r) for r in range(4)]


@pytest.mark.slow
def test_four_workers_summing_in_rank_order_repeat_a_seed_bit_for_bit(tmp_path):
    """fp32_sum='rank' (issue 41): with 4 workers the servers' fp32 sums no longer follow the
    order the pushes arrive in, so two jobs with one seed log the same loss at every step on
    every rank and end with the same parameters, bit for bit."""
    import numpy as np
    (losses_a, params_a), (losses_b, params_b) = (rank_order_run(str(tmp_path / n), 5) for n in "ab")
    assert len(losses_a[0]) == 30 and losses_a == losses_b
    for a, b in zip(params_a, params_b):
        assert sorted(a) == sorted(b)
        for name in a:
            np.testing.assert_array_equal(a[name].asnumpy(), b[name].asnumpy(), err_msg=name)

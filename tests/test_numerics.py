"""Portable numerics (cdsgd_mx.numerics, issue 45): the same run gives the same weights whatever
the core count, thread settings or instruction set the machine would pick by itself."""
import json
import os
import subprocess
import sys

import pytest

from cdsgd_mx import numerics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "scripts", "train.py")
CONFIG = os.path.join(ROOT, "configs", "fig6_lenet_mnist.yaml")
HAS_AVX512 = "avx512f" in numerics.cpu_flags()


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in numerics.PINS and k != numerics.ENV}
    env.update(extra)
    return env


def test_a_cpu_without_avx2_or_fma_stops_in_one_line():
    with pytest.raises(numerics.NumericsError, match="this CPU lacks avx2 and fma"):
        numerics.check_cpu({"sse4_2", "avx"}, "x86_64")
    with pytest.raises(numerics.NumericsError, match="this CPU lacks fma"):
        numerics.check_cpu({"avx2"}, "x86_64")
    with pytest.raises(numerics.NumericsError, match="this machine is aarch64"):
        numerics.check_cpu({"avx2", "fma"}, "aarch64")
    numerics.check_cpu({"avx2", "fma"}, "x86_64")  # enough


def test_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse avx2 fma\n")
    assert numerics.cpu_flags(str(info)) == {"fpu", "sse", "avx2", "fma"}
    assert numerics.cpu_model(str(info)) == "Some CPU"
    assert numerics.cpu_flags(str(tmp_path / "none")) == set()


def test_use_sets_every_pin_and_refuses_after_mxnet_loaded():
    env = {"OMP_NUM_THREADS": "8", "DNNL_MAX_CPU_ISA": "AVX512_CORE"}
    assert "mxnet" in sys.modules  # this test process has loaded MXNet (conftest, cdsgd_mx)
    with pytest.raises(numerics.NumericsError, match="must be in force before MXNet loads.*"
                                                     "DNNL_MAX_CPU_ISA=AVX512_CORE.*OMP_NUM_THREADS=8"):
        numerics.use("portable", env)
    pinned = dict(numerics.PINS)
    numerics.use("portable", pinned)  # already pinned (as a process started with CDSGD_NUMERICS has it): accepted
    assert pinned[numerics.ENV] == "portable" and numerics.active(pinned) == "portable"
    assert numerics.settings(pinned)["env"]["DNNL_MAX_CPU_ISA"] == "AVX2"
    with pytest.raises(numerics.NumericsError, match="native needs a new process"):
        numerics.use("native", pinned)
    with pytest.raises(numerics.NumericsError, match="numerics must be one of native, portable, got 'fast'"):
        numerics.use("fast", {})


def test_a_bad_mode_in_the_environment_is_one_line():
    proc = subprocess.run([sys.executable, "-c", "import cdsgd_mx"], env=clean_env(CDSGD_NUMERICS="fast"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "cdsgd_mx: CDSGD_NUMERICS must be one of native, portable, got 'fast'"


def test_pins_set_after_mxnet_loaded_stop_loudly():
    code = "import os, mxnet; os.environ['CDSGD_NUMERICS'] = 'portable'; import cdsgd_mx"
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "numerics: portable must be in force before MXNet loads" in proc.stderr


ISA_PROBE = ("import cdsgd_mx, mxnet as mx\n"
             "x = mx.nd.ones((2, 3, 8, 8)); w = mx.nd.ones((4, 3, 3, 3))\n"
             "mx.nd.Convolution(x, w, kernel=(3, 3), num_filter=4, no_bias=True).wait_to_read()\n")


def onednn_isa(**env):
    proc = subprocess.run([sys.executable, "-c", ISA_PROBE], env=clean_env(DNNL_VERBOSE="1", **env),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return next(line.split("isa:", 1)[1] for line in proc.stdout.splitlines() if ",isa:" in line)


def test_portable_caps_onednn_at_avx2_in_any_environment():
    """oneDNN says which instruction set it runs: AVX2 under portable numerics, also when the
    environment asked for more; where the CPU has AVX-512, native numerics use it (so the cap
    is what makes the two machines' numbers meet)."""
    assert onednn_isa(CDSGD_NUMERICS="portable", DNNL_MAX_CPU_ISA="AVX512_CORE").strip() == "Intel AVX2"
    if HAS_AVX512:
        assert "AVX-512" in onednn_isa(CDSGD_NUMERICS="native")


def train(out, extra_env=None, prefix=(), numerics_mode="portable", iterations=60):
    """A 2-worker CD-SGD fig6 run past warm-up (50 steps); each rank's final weights digest."""
    cmd = list(prefix) + [sys.executable, TRAIN, "--config", CONFIG, "algorithm=cdsgd", "seed=3", "workers=2",
                          "epochs=null", "iterations=%d" % iterations, "test_samples=500", "checkpoint=false",
                          "numerics=" + numerics_mode, "out=%s" % out]
    proc = subprocess.run(cmd, cwd=ROOT, env=clean_env(**(extra_env or {})), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "\r" not in proc.stdout  # no progress bar off a terminal: one line every few seconds
    digests = []
    for rank in (0, 1):
        with open(os.path.join(out, "metrics-rank%d.jsonl" % rank)) as f:
            digests.append([json.loads(line) for line in f if '"iteration"' not in line][-1]["weights_sha256"])
    config = json.load(open(os.path.join(out, "config.json")))
    return digests, config["provenance"]


@pytest.mark.slow
def test_portable_gives_the_same_weights_on_one_or_two_cores_and_any_thread_or_isa_setting(tmp_path):
    """The run on 1 core (taskset) and on 2 with the environment asking for 2 OpenMP threads,
    AVX-512 and 3 engine threads: the same weights, bit for bit. The check can see a
    difference: native numerics with 1 and with 2 OpenMP threads give other weights, and so
    does another instruction set with the same thread (oneDNN capped at SSE4.1, which every
    x86-64 CPU has; the AVX-512 one is checked by test_portable_caps_onednn_at_avx2...)."""
    one_core, prov = train(tmp_path / "a", prefix=["taskset", "-c", "0"])
    assert prov["numerics"]["mode"] == "portable" and prov["numerics"]["env"]["OMP_NUM_THREADS"] == "1"
    assert prov["cpu"]["cores_usable"] == 1
    asked_more, prov = train(tmp_path / "b", {"OMP_NUM_THREADS": "2", "DNNL_MAX_CPU_ISA": "AVX512_CORE",
                                              "MKL_NUM_THREADS": "2", "MXNET_CPU_WORKER_NTHREADS": "3"})
    assert prov["numerics"]["env"]["MXNET_CPU_WORKER_NTHREADS"] == "3"  # engine threads: not pinned, no effect
    assert prov["numerics"]["env"]["DNNL_MAX_CPU_ISA"] == "AVX2" and prov["cpu"]["cores_usable"] == os.cpu_count()
    assert asked_more == one_core
    native_1, _ = train(tmp_path / "c", {"OMP_NUM_THREADS": "1", "DNNL_MAX_CPU_ISA": "SSE41"}, numerics_mode="native")
    native_2, _ = train(tmp_path / "d", {"OMP_NUM_THREADS": "2", "DNNL_MAX_CPU_ISA": "SSE41"}, numerics_mode="native")
    assert native_1 != native_2  # the thread count moves the numbers where nothing pins it
    assert native_1 != one_core  # the same 1 thread, another instruction set (SSE4.1 here, any CPU): other numbers


def test_trainer_switch_requires_the_mode_in_force():
    import mxnet as mx
    import cdsgd_mx
    net = mx.gluon.nn.Dense(2, in_units=3)
    net.initialize()
    assert numerics.active() == "native"  # the test process runs without CDSGD_NUMERICS
    with pytest.raises(cdsgd_mx.ConfigError, match="numerics='portable': this process runs native numerics; .*"
                                                   "CDSGD_NUMERICS=portable"):
        cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="local", numerics="portable")
    with pytest.raises(cdsgd_mx.ConfigError, match="numerics must be None or one of native, portable, got 'x'"):
        cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="local", numerics="x")
    cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="local", numerics="native")


def test_the_mode_in_force_is_what_was_applied_not_what_the_environment_says_later(monkeypatch):
    """CDSGD_NUMERICS set after `import cdsgd_mx` pins nothing: the Trainer switch, the servers'
    check and the provenance record must not take it for portable."""
    import mxnet as mx
    import cdsgd_mx
    monkeypatch.setenv("CDSGD_NUMERICS", "portable")
    assert numerics.active() == "native" and numerics.settings()["mode"] == "native"
    net = mx.gluon.nn.Dense(2, in_units=3)
    net.initialize()
    with pytest.raises(cdsgd_mx.ConfigError, match="this process runs native numerics"):
        cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="local", numerics="portable")


def test_train_config_with_portable_on_a_cpu_without_avx2_stops_in_one_line(monkeypatch, capsys):
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_script", TRAIN)
    train_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_script)
    monkeypatch.setattr(numerics, "cpu_flags", lambda path="/proc/cpuinfo": {"sse4_2", "avx"})
    assert train_script.main(["--config", CONFIG, "numerics=portable"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("config error: numerics: portable pins AVX2 kernels, and this CPU lacks avx2 and fma "
                           "(use numerics: native, whose numbers then hold on this CPU type only)")
    assert train_script.main(["--config", CONFIG, "numerics=fast"]) == 2
    assert "numerics must be one of native, portable or null, got 'fast'" in capsys.readouterr().err


WORKER = """
import os
os.environ["CDSGD_NUMERICS"] = "portable"  # this worker alone: the launcher gave the servers native
import cdsgd_mx, mxnet as mx
net = mx.gluon.nn.Dense(2, in_units=3)
net.initialize()
trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, algorithm="ssgd")
with mx.autograd.record():
    loss = net(mx.nd.ones((4, 3))).sum()
loss.backward()
trainer.step(4)
trainer.wait_all()
print("trained")
"""


@pytest.mark.slow
def test_servers_stop_a_job_whose_workers_run_other_numerics(tmp_path):
    """A launcher that does not pass CDSGD_NUMERICS to every node (tools/launch.py over ssh
    without --env) makes a mixed job: the servers stop it in one line."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "1", "-s", "1", "--", sys.executable,
                           str(script)], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "trained" not in out, out[-3000:]
    assert "server 0: the workers run portable numerics and this server native" in out, out[-3000:]
    # the same job with the mode in every node's environment trains
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "1", "-s", "1", "--", sys.executable,
                           str(script)], cwd=ROOT, env=clean_env(CDSGD_NUMERICS="portable"), capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0 and "trained" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]

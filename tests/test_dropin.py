"""A faithful drop-in (issue 11): uses of cdsgd-mx that used to train silently wrong."""
import os
import subprocess
import sys

import pytest
from cdsgd_mx.bench import mark_fresh  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def test_importing_the_package_registers_the_kvstore(tmp_path):
    """`import cdsgd_mx; mx.kv.create('cdsgd')` in a 2-worker job gives the plugin on dist_sync,
    not MXNet's plain local store of that name (each worker alone, exit 0)."""
    script = tmp_path / "create.py"
    script.write_text("import cdsgd_mx, mxnet as mx\nkv = mx.kv.create('cdsgd')\n"
                      "print('CREATED', type(kv).__name__, kv.type, kv.num_workers, flush=True)\n")
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")  # every process lists what it imports
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "1", "--timeout", "60", "--",
                           sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count("CREATED CDSGD cdsgd_dist_sync 2") == 2, proc.stdout[-2000:]
    # the scheduler runs ps-lite from MXNet's library without the mxnet package (2 s of CPU less
    # at every job's start); the workers do import it
    imports = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        node, sep, rest = line.partition(" | import time:")
        if sep:
            imports.setdefault(node, []).append(rest.rsplit("|", 1)[-1].strip())
    assert "mxnet" in imports["worker 0"] and "mxnet" in imports["server 0"], sorted(imports)
    assert "cdsgd_mx.cluster.heartbeat" in imports["scheduler"], imports["scheduler"][-20:]
    assert not [m for m in imports["scheduler"] if m == "mxnet" or m.startswith("mxnet.")], "the scheduler imported MXNet"


def test_importing_the_package_on_a_server_runs_ours_never_mxnets():
    """On a server role `import cdsgd_mx` never lets MXNet's own server start (issue 11); since
    issue 30 it runs ours there and exits, as `import mxnet` runs MXNet's (tools/launch.py runs
    one command for every role): here it stops at our server's first check, in one line, and
    nothing after the import runs. Our own entry points (python -m cdsgd_mx.X) are not servers
    by importing the package: there it imports nothing of MXNet."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDSGD_", "DMLC_"))}
    env["DMLC_ROLE"] = "server"
    proc = subprocess.run([sys.executable, "-c", "import sys, cdsgd_mx; print('after the import')"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "after the import" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.strip().startswith("cdsgd_mx server: this node has no job secret") and \
        len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "cdsgd_mx.data", "where"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert proc.returncode == 0 and "cdsgd_mx" in imported, proc.stderr[-2000:]
    assert not [m for m in imported if m == "mxnet" or m.startswith("mxnet.")], "the package imported MXNet on a server"


def test_the_launcher_starts_without_importing_mxnet():
    """The launcher only starts processes: it must not pay MXNet's import (about 2 s of CPU at
    every job's start), while `import cdsgd_mx` in a worker still registers the plugin (above)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "cdsgd_mx.launch", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "cdsgd_mx.cluster.watchdog" in imported, proc.stderr[-2000:]  # the launcher's own modules are listed
    assert not [m for m in imported if m == "mxnet" or m.startswith("mxnet.")], "the launcher imported MXNet"


@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_lr_mult_zero_freezes_exactly_that_parameter_in_one_process(alg):
    """kvstore='local' once froze another parameter (multipliers looked up by chunk key); both
    the global optimizer and the local one (odsgd/cdsgd) must honour lr_mult and wd_mult."""
    import mxnet as mx
    import numpy as np
    import cdsgd_mx
    params = mx.gluon.ParameterDict()
    plist = [params.get("p%d" % i, shape=s, init=mx.init.Constant(0.5)) for i, s in enumerate([(6, 4), (4,), (9,), (3,)])]
    params.initialize()
    plist[1].lr_mult = 0.0   # frozen
    plist[2].wd_mult = 0.0   # no weight decay: with zero gradients it must not move
    tr = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.2, "momentum": 0.5, "wd": 0.1}, kvstore="local",
                          algorithm=alg, warmup_steps=1, k=2, threshold=0.25)
    for t in range(6):
        for i, p in enumerate(plist):
            p.grad()[:] = 0.0 if i == 2 else 1.0
        mark_fresh(tr)  # the gradients were written by hand
        tr.step(1)
    tr.wait_all()
    data = [p.data().asnumpy() for p in plist]
    glob = [tr.kvstore.global_weights(i).asnumpy() for i in range(len(plist))]
    np.testing.assert_array_equal(data[1], 0.5)
    np.testing.assert_array_equal(glob[1], 0.5)
    np.testing.assert_array_equal(data[2], 0.5)
    np.testing.assert_array_equal(glob[2], 0.5)
    for i in (0, 3):
        assert np.all(data[i] < 0.4) and np.all(glob[i] < 0.4)  # the others trained


def test_a_job_on_mxnets_own_servers_stops_at_start_up_saying_what_to_do(tmp_path):
    """Stock servers accept every push but ignore our commands: bitsgd's 2-bit pushes never
    reached the weights and the job exited 0. Now the start-up handshake stops it."""
    import time
    engine = os.path.join(ROOT, "tests", "workers", "engine_worker.py")
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.launch", "-n", "2", "-s", "2", "--stock-server",
                           "--timeout", "90", "--", sys.executable, engine, "--algorithm", "bitsgd", "--warmup", "0",
                           "--steps", "8", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert time.time() - start < 60
    assert "server 0, 1 answered the start-up handshake as MXNet's own server does" in proc.stdout
    assert "serve_if_not_worker()" in proc.stdout and "python -m cdsgd_mx.server" in proc.stdout
    assert not list(tmp_path.glob("rank*.npz"))  # nothing trained


def _one_param(alg, **kw):
    import mxnet as mx
    import cdsgd_mx
    params = mx.gluon.ParameterDict()
    p = params.get("w", shape=(4,), init=mx.init.Zero())
    params.initialize()
    return p, cdsgd_mx.Trainer(params, "sgd", kw.pop("opt"), kvstore="local", algorithm=alg, warmup_steps=0, **kw)


def test_the_local_rate_follows_the_global_schedule():
    """With an lr_scheduler on the global optimizer the local rate stayed at its start (0.1
    while the global fell to 0.0125); it now falls by the same factor, also when set apart."""
    import mxnet as mx
    import numpy as np
    for local, start in ((None, 0.1), ({"learning_rate": 0.4}, 0.4)):
        sched = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
        p, tr = _one_param("odsgd", opt={"learning_rate": 0.1, "lr_scheduler": sched}, local_optimizer_params=local)
        rates = []
        for t in range(7):
            p.grad()[:] = 1.0
            mark_fresh(tr)  # the gradients were written by hand
            tr.step(1)
            rates.append(tr.local_learning_rate)
        tr.wait_all()
        ref = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
        want = [start * ref(t + 1) / 0.1 for t in range(7)]
        np.testing.assert_allclose(rates, want, rtol=1e-6)
        assert rates[-1] < start / 4


@pytest.mark.parametrize("alg", ["ssgd", "odsgd"])
def test_a_new_batch_size_rescales_both_optimizers_in_one_process(alg):
    """step(4) then step(8): the global update and the local one both use 1/8 from then on."""
    import numpy as np
    p, tr = _one_param(alg, opt={"learning_rate": 1.0})
    p.grad()[:] = 8.0
    mark_fresh(tr)  # the gradients were written by hand
    tr.step(4)
    tr.wait_all()
    w1 = tr.kvstore.global_weights(0).asnumpy()
    np.testing.assert_allclose(w1, -2.0)  # W -= 1.0 * 8 / 4
    p.grad()[:] = 8.0
    mark_fresh(tr)  # the gradients were written by hand
    tr.step(8)
    tr.wait_all()
    np.testing.assert_allclose(tr.kvstore.global_weights(0).asnumpy(), -3.0)  # W -= 1.0 * 8 / 8
    assert tr.kvstore.local.optimizer.rescale_grad == 1 / 8
    if alg == "odsgd":  # x(2) = W(1) - 1.0 * 8 / 8 (the local step of step 1)
        np.testing.assert_allclose(p.data().asnumpy(), -3.0)


def test_dist_sync_without_a_launcher_gives_one_line_saying_how_to_launch():
    """Run standalone, the default kvstore='dist_sync' died inside MXNet (Check notnull)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
    code = ("import mxnet as mx, cdsgd_mx\n"
            "params = mx.gluon.ParameterDict(); params.get('w', shape=(3,)); params.initialize()\n"
            "try:\n    cdsgd_mx.Trainer(params, 'sgd', {'learning_rate': 0.1})\n"
            "except cdsgd_mx.ConfigError as e:\n    print('ERROR', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERROR kvstore='dist_sync' runs in a job started by a launcher, but DMLC_ROLE" in proc.stdout
    assert "python -m cdsgd_mx.launch -n WORKERS -s SERVERS" in proc.stdout and "kvstore='local'" in proc.stdout


def test_the_local_rate_schedule_resumes_where_it_was(tmp_path):
    import mxnet as mx
    import numpy as np

    def trainer():
        sched = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
        return _one_param("cdsgd", opt={"learning_rate": 0.1, "lr_scheduler": sched}, k=2)

    def run(p, tr, steps):
        rates = []
        for _ in range(steps):
            p.grad()[:] = 1.0
            mark_fresh(tr)  # the gradients were written by hand
            tr.step(1)
            rates.append(tr.local_learning_rate)
        tr.wait_all()
        return rates

    p, tr = trainer()
    whole = run(p, tr, 7)
    p, tr = trainer()
    first = run(p, tr, 3)
    tr.save_states(str(tmp_path / "s"))
    x = p.data().asnumpy()
    p, tr = trainer()
    p.set_data(mx.nd.array(x))
    tr.load_states(str(tmp_path / "s"))
    np.testing.assert_allclose(first + run(p, tr, 4), whole, rtol=1e-6)

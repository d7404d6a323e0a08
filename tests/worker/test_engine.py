"""The engine with real processes: scheduler + S servers + N workers on loopback."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import jobcache  # noqa: E402
from cdsgd_mx.experiments.simulation import simulate  # noqa: E402
from workers.engine_worker import SHAPES, grad_fn, init_value, offgrid_grad  # noqa: E402

from cdsgd_mx.wire import auth, protocol
from cdsgd_mx.worker import buckets
from cdsgd_mx.worker.rounds import RoundRunner
from cdsgd_mx.worker.schedule import Schedule
from cdsgd_mx import codec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "workers" / "engine_worker.py"
BOUND = 600  # small, so that the (700,) parameter is sliced across servers
CFG = {"lr": 0.25, "momentum": 0.5, "local_lr": 0.5, "batch": 4}
STEPS, WARMUP, K, T = 9, 2, 3, 0.5

pytestmark = pytest.mark.slow


def launch(tmp, workers, servers, *worker_args, stock_server=False, timeout=120, allow_missing=False, shared=False):
    """The job's results. shared=True: a job that other tests check too, with the same
    arguments, runs once per session (tests/jobcache.py; our runs of the engine worker are exact
    and deterministic). Never for a run that is repeated on purpose (stock MXNet's retries)."""
    def run():
        return finish(start(tmp, workers, servers, *worker_args, stock_server=stock_server, timeout=timeout),
                      allow_missing)
    if not shared:
        return run()
    return jobcache.once(("engine", workers, servers, worker_args, stock_server), run)


def start(tmp, workers, servers, *worker_args, stock_server=False, timeout=120, env=None):
    """Starts a job (launcher, scheduler, servers, engine workers); finish() waits for it, so
    that independent jobs can run side by side."""
    out = tmp / "out"
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", str(workers), "-s", str(servers), "--timeout", str(timeout)]
    if stock_server:
        cmd.append("--stock-server")
    cmd += ["--", sys.executable, str(WORKER), "--out", str(out), "--config", json.dumps(CFG)] + list(worker_args)
    env = dict(os.environ, MXNET_KVSTORE_BIGARRAY_BOUND=str(BOUND), **(env or {}))
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out, workers, timeout


def finish(job, allow_missing=False, output=None):
    """The job's results, one dict per rank (None with allow_missing); output: a list that gets
    the job's standard output."""
    proc, out, workers, timeout = job
    try:
        stdout, stderr = proc.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, stdout[-3000:] + stderr[-2000:]
    # nothing reaches these servers from outside the job: a round the check took for dropped
    # (its pull came back before the server's update, e.g. a pull not ordered after the
    # acknowledgement of a payload push) would be sent again and say so
    assert "the server dropped" not in stdout + stderr, (stdout + stderr)[-3000:]
    if output is not None:
        output.append(stdout)
    if allow_missing:
        return None
    return [dict(np.load(out / ("rank%d.npz" % r))) for r in range(workers)]


def sim(alg, workers):
    init = [init_value(i, s) for i, s in enumerate(SHAPES)]
    return simulate(alg, workers, STEPS, WARMUP, K, T, init, grad_fn, CFG["lr"], CFG["momentum"],
                    CFG["local_lr"], CFG["batch"])


@pytest.mark.xdist_group("engine-runs")  # shares its run with other tests (tests/jobcache.py)
@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
@pytest.mark.parametrize("workers,servers", [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)])
def test_weights_match_numpy_simulation(tmp_path, alg, workers, servers):
    got = launch(tmp_path, workers, servers, "--algorithm", alg, "--steps", str(STEPS),
                 "--warmup", str(WARMUP), "--k", str(K), "--threshold", str(T), shared=True)
    xs, W = sim(alg, workers)
    for r in range(workers):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got[r]["w%d" % i], W[i], rtol=1e-5, atol=1e-5,
                                       err_msg="global W, param %d, rank %d" % (i, r))
            np.testing.assert_allclose(got[r]["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5,
                                       err_msg="forward weights x, param %d, rank %d" % (i, r))


@pytest.mark.parametrize("alg", ["bitsgd", "cdsgd"])
def test_an_existing_dist_sync_store_is_wrapped(tmp_path, alg):
    """cdsgd_mx.Trainer(kvstore=mx.kv.create('dist_sync')): the script's own store is used."""
    got = launch(tmp_path, 2, 2, "--algorithm", alg, "--steps", str(STEPS), "--warmup", str(WARMUP), "--k", str(K),
                 "--threshold", str(T), "--config", json.dumps(dict(CFG, existing_store=True)))
    xs, W = sim(alg, 2)
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got[r]["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[r]["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)


def test_the_delay_is_real(tmp_path):
    """The simulation of odsgd differs from ssgd: the comparison above can tell them apart."""
    xs_od, W_od = sim("odsgd", 2)
    xs_s, W_s = sim("ssgd", 2)
    assert not np.allclose(W_od[0], W_s[0], atol=1e-3)
    xs_cd, W_cd = sim("cdsgd", 2)
    assert not np.allclose(W_cd[0], W_od[0], atol=1e-3)


def test_ssgd_equals_stock_gluon_trainer(tmp_path):
    ours = launch(tmp_path / "ours", 2, 2, "--algorithm", "ssgd", "--steps", "6", "--warmup", "0")
    stock = launch(tmp_path / "stock", 2, 2, "--mode", "stock", "--steps", "6", stock_server=True)
    for i in range(len(SHAPES)):
        np.testing.assert_allclose(ours[0]["w%d" % i], stock[0]["w%d" % i], rtol=1e-6, atol=1e-6)
        assert not np.allclose(stock[0]["w%d" % i], init_value(i, SHAPES[i]))  # it trained


def test_ssgd_honours_per_parameter_multipliers_like_stock_gluon(tmp_path):
    """lr_mult 2 on one weight, wd_mult 3 on another, wd_mult 0 on a bias: stock gluon honours
    them when the workers update (update_on_kvstore=False); so must our servers.

    The reference is the simulation with gluon's multipliers, checked against stock gluon
    itself: stock MXNet 1.9.1 is not deterministic here (in about 3 of 8 runs its workers end
    with another (1,) parameter, sometimes different on each worker), so stock is run until
    one run agrees with the simulation, at most 5 times."""
    wd, mults = 0.05, {1: (2.0, 1.0), 2: (1.0, 3.0), 3: (1.0, 0.0)}  # what engine_worker sets
    cfg = json.dumps(dict(CFG, mults=True, wd=wd))
    init = [init_value(i, s) for i, s in enumerate(SHAPES)]
    xs, W = simulate("ssgd", 2, 6, 0, K, T, init, grad_fn, CFG["lr"], CFG["momentum"], CFG["local_lr"],
                     CFG["batch"], wd=wd, mults=mults)
    _, W_plain = simulate("ssgd", 2, 6, 0, K, T, init, grad_fn, CFG["lr"], CFG["momentum"], CFG["local_lr"],
                          CFG["batch"], wd=wd, mults={})

    def agrees(run):
        return all(np.allclose(run[r][name % i], ref[i], rtol=1e-6, atol=1e-6)
                   for r, name, ref in ((0, "w%d", W), (1, "x%d", xs[1])) for i in range(len(SHAPES)))
    stock_runs = []
    while not stock_runs or (not agrees(stock_runs[-1]) and len(stock_runs) < 5):
        stock_runs.append(launch(tmp_path / ("stock%d" % len(stock_runs)), 2, 2, "--mode", "stock_local", "--steps",
                                 "6", "--config", cfg, stock_server=True))
    assert agrees(stock_runs[-1]), "stock gluon never agreed with the simulation of its multipliers"
    ours = launch(tmp_path / "ours", 2, 2, "--algorithm", "ssgd", "--steps", "6", "--warmup", "0", "--config", cfg)
    for i in range(len(SHAPES)):
        for r in range(2):
            np.testing.assert_allclose(ours[r]["w%d" % i], W[i], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(ours[r]["x%d" % i], xs[r][i], rtol=1e-6, atol=1e-6)
        if i != 0:  # p0 has no multiplier: the others must differ from a run without them
            assert not np.allclose(W_plain[i], W[i], atol=1e-4)


def simulation_args(wd):
    """The simulation's settings of a 2-worker job of engine_worker under CFG."""
    return dict(workers=2, steps=STEPS, n=WARMUP, k=K, threshold=T, grad_fn=grad_fn, lr=CFG["lr"],
                momentum=CFG["momentum"], local_lr=CFG["local_lr"], batch=CFG["batch"], wd=wd,
                init=[init_value(i, s) for i, s in enumerate(SHAPES)])


def matches_simulation(tmp_path, alg, cfg, sim, **rules):
    """A 2-worker, 2-server job of engine_worker with config cfg ends with the simulation's x
    on each rank and W (returned) under the extra rules."""
    xs, W = simulate(alg, **sim, **rules)
    ours = launch(tmp_path / "ours", 2, 2, "--algorithm", alg, "--steps", str(STEPS), "--warmup", str(WARMUP),
                  "--k", str(K), "--config", json.dumps(cfg))
    for i in range(len(SHAPES)):
        for r in range(2):
            np.testing.assert_allclose(ours[r]["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(ours[r]["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)
    return W


@pytest.mark.parametrize("alg", ["ssgd", "cdsgd"])
def test_multipliers_changed_mid_training_take_effect_from_the_next_step(tmp_path, alg):
    """lr_mult / wd_mult set before step 4 of 9 on both workers (as unfreezing a layer after N
    epochs does): from step 4 on, the servers and the local optimizer use them, as stock gluon
    does when the workers update (issue 26: they were silently ignored)."""
    wd, mults, at = 0.05, {1: (2.0, 1.0), 2: (1.0, 3.0), 3: (1.0, 0.0)}, 4
    sim = simulation_args(wd)
    W = matches_simulation(tmp_path, alg, dict(CFG, mults=True, mults_at=at, wd=wd), sim, mults=mults, mults_from=at)
    for other in (simulate(alg, mults={}, **sim)[1], simulate(alg, mults=mults, **sim)[1]):  # never / from the start
        assert not all(np.allclose(other[i], W[i], atol=1e-4) for i in (1, 2, 3))


@pytest.mark.parametrize("alg", ["ssgd", "bitsgd", "odsgd", "cdsgd"])
def test_stale_gradients_follow_gluons_rule_when_workers_disagree(tmp_path, alg):
    """ignore_stale_grad=True with branches not taken (issue 26): rank 1 alone has no fresh
    gradient of p2 at odd steps (it contributes nothing; rank 0's alone is applied), and no
    worker has one of p3 at steps 1, 5 and 6 (no update at all: no momentum, no decay, no local
    step, the residual kept). Their old gradients stay in place and must not be pushed again."""
    stale = [[1, t, 2] for t in range(1, STEPS, 2)] + [[-1, t, 3] for t in (1, 5, 6)]
    rule = lambda r, s, i: [r, s, i] in stale or [-1, s, i] in stale  # noqa: E731
    sim = simulation_args(0.05)
    W = matches_simulation(tmp_path, alg, dict(CFG, stale=stale, wd=0.05), sim, stale=rule)
    pushed_again = simulate(alg, **sim)[1]  # what treating them as fresh would give
    assert not np.allclose(pushed_again[2], W[2], atol=1e-4) and not np.allclose(pushed_again[3], W[3], atol=1e-4)


@pytest.mark.parametrize("alg", ["ssgd", "bitsgd"])
def test_allreduce_clip_update_on_the_workers_matches_the_simulation(tmp_path, alg):
    """update_on_kvstore=False (issue 26): allreduce_grads() hands every worker the summed
    gradient (fp32, or BIT-SGD's decoded codes with each worker's error feedback), gluon's
    clip_global_norm scales it, update() runs SGD on the workers: both workers end with the
    simulation's weights, which clipping changed."""
    sim = simulation_args(0.05)
    W = matches_simulation(tmp_path, alg, dict(CFG, clip=5.0, wd=0.05), sim, clip_norm=5.0)
    assert not np.allclose(simulate(alg, **sim)[1][2], W[2], atol=1e-4)


@pytest.mark.parametrize("alg,servers,parts", [("ssgd", 1, False), ("ssgd", 2, False), ("cdsgd", 1, False),
                                               ("cdsgd", 2, False), ("cdsgd", 2, True)])
def test_rank_order_sums_give_the_simulations_weights_bit_for_bit(tmp_path, alg, servers, parts):
    """fp32_sum='rank' (issue 41): 3 workers push gradients off the 1/64 grid, whose fp32 sum
    depends on its order in the last bits; the servers add the workers' rows in rank order, as
    the simulation does, so every worker ends with the simulation's W and x bit for bit (cdsgd:
    two warm-up rounds and a correction every k steps in fp32, the other steps 2-bit codes;
    with 2 servers the (700,) parameter is cut across both). parts: CDSGD_PART_SIZE=64, the
    fp32 rounds as rows of each part's own rows key; else 0, whole buckets (the default part
    size would cut the buckets above the rows' bound, BOUND, into parts)."""
    init = [init_value(i, s) for i, s in enumerate(SHAPES)]
    g = [offgrid_grad(init[2], r, 0, 2) for r in range(3)]
    assert ((g[0] + g[1]) + g[2] != (g[2] + g[1]) + g[0]).any()  # the order shows: the test can fail
    cfg = json.dumps(dict(CFG, fp32_sum="rank", offgrid=True))
    got = finish(start(tmp_path, 3, servers, "--algorithm", alg, "--steps", str(STEPS), "--warmup", str(WARMUP),
                       "--k", str(K), "--threshold", str(T), "--config", cfg,
                       env={"CDSGD_PART_SIZE": "64" if parts else "0"}))
    assert all(bool(g["parts"]) == parts for g in got)
    xs, W = simulate(alg, 3, STEPS, WARMUP, K, T, init, offgrid_grad, CFG["lr"], CFG["momentum"], CFG["local_lr"],
                     CFG["batch"])
    for r in range(3):
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(got[r]["w%d" % i], W[i], err_msg="global W, param %d, rank %d" % (i, r))
            np.testing.assert_array_equal(got[r]["x%d" % i], xs[r][i], err_msg="weights x, param %d, rank %d" % (i, r))


def test_bitsgd_equals_mxnet_2bit_compression(tmp_path):
    ours = launch(tmp_path / "ours", 2, 1, "--algorithm", "bitsgd", "--steps", "8", "--warmup", "0")
    theirs = launch(tmp_path / "mx", 2, 1, "--mode", "mxnet2bit", "--steps", "8", stock_server=True)
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(ours[r]["w%d" % i], theirs[r]["w%d" % i], rtol=1e-5, atol=1e-5)


def test_bytes_pushed_match_the_wire_format(tmp_path):
    got = launch(tmp_path, 2, 2, "--algorithm", "cdsgd", "--steps", str(STEPS), "--warmup", str(WARMUP),
                 "--k", str(K))
    sizes = [int(np.prod(s)) for s in SHAPES]
    plan = buckets.plan(list(enumerate(sizes)), buckets.DEFAULT_BUCKET_SIZE, 2, 2, protocol.Keys(2), bound=BOUND)
    assert sorted((s.key, s.begin, s.end) for b in plan for s in b.slots) == \
        sorted([(0, 0, 37), (1, 0, 35), (3, 0, 1)] + [(2, b, e) for b, e in ((0, 350), (350, 700))])
    proof = 4 * auth.TAG_FLOATS  # one worker's tag after each pushed array (auth.py)
    fp32 = 4 * sum(sizes) + 2 * proof * len(plan)  # a dense push carries a slot per worker
    codes = sum(4 * codec.packed_size(b.size) + 8 + proof for b in plan)
    # 0.25 B/value + padding, row index and tag per bucket
    assert codes <= 0.25 * sum(sizes) + (4 + 8 + proof) * len(plan)
    want = [codes if (t >= WARMUP and (t - WARMUP) % K != 0) else fp32 for t in range(STEPS)]
    for r in range(2):
        assert got[r]["bytes"].tolist() == want
        assert got[r]["bytes_expected"].tolist() == want  # the kvstore's own accounting agrees
    # the values: 0.25 B each against 4 (the per-bucket index and proofs are fixed costs, checked above)
    assert (codes - (8 + proof) * len(plan)) * 10 < fp32 - 2 * proof * len(plan)


def parts_layout():
    """The engine worker's buckets at 2 workers + 2 servers in parts of 64 values (the (700,)
    parameter's halves cut again): (plan, the parts, an fp32 step's bytes by whole?, a 2-bit
    step's bytes), each pushed array with its proof region."""
    sizes = [int(np.prod(s)) for s in SHAPES]
    plan = buckets.plan(list(enumerate(sizes)), buckets.DEFAULT_BUCKET_SIZE, 2, 2, protocol.Keys(2), bound=BOUND,
                        part_size=64)
    units = [u for b in plan for u in b.parts or [b]]
    assert len(units) > 2 * len(plan)
    proof = 4 * auth.TAG_FLOATS
    fp32 = {whole: 4 * sum(sizes) + 2 * proof * (len(plan) if whole else len(units)) for whole in (False, True)}
    return plan, units, fp32, sum(4 * codec.packed_size(b.size) + 8 + proof for b in plan)


def assert_weights_and_bytes(got, xs, W, want):
    """Both workers end with the simulation's W and x, and pushed `want` bytes per step, as the
    kvstore's own accounting says too."""
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got[r]["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[r]["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)
        assert got[r]["bytes"].tolist() == want and got[r]["bytes_expected"].tolist() == want


@pytest.mark.parametrize("alg,window", [("bitsgd", None), ("cdsgd", None), ("cdsgd", "1"), ("ssgd", None),
                                        ("odsgd", None)])
def test_fp32_rounds_in_parts_give_the_simulations_weights(tmp_path, alg, window):
    """CDSGD_PART_SIZE=64 at 2 workers + 2 servers: each bucket's fp32 rounds (warm-up and
    corrections; every step of S-SGD and OD-SGD) go part by part, each part its own weight key holding whole slots (the (700,)
    parameter's halves cut again: buckets.partition), while a 2-bit round pushes the bucket's
    codes once and pulls the bucket's W, which the parts' rounds moved. The weights are the
    simulation's; the bytes pushed are the parts' (a proof region each), so the parts were used.
    With CDSGD_PUSH_WINDOW=1 the window counts parts: from the 5th part of a round on, each
    push follows one earlier part's W."""
    env = {"CDSGD_PART_SIZE": "64", "CDSGD_PARTS": "parts", **({"CDSGD_PUSH_WINDOW": window} if window else {})}
    cfg = dict(CFG, trace=str(tmp_path / "trace{index}.json"))
    got = finish(start(tmp_path, 2, 2, "--algorithm", alg, "--steps", str(STEPS), "--warmup", str(WARMUP),
                       "--k", str(K), "--threshold", str(T), "--config", json.dumps(cfg), env=env))
    xs, W = sim(alg, 2)
    plan, units, fp32, codes = parts_layout()
    assert all(u.size <= 64 for b in plan for u in b.parts)
    want = [codes if Schedule(alg, WARMUP, K).compressed(t) else fp32[False] for t in range(STEPS)]
    assert_weights_and_bytes(got, xs, W, want)
    for r in range(2):
        events = json.load(open(tmp_path / ("trace%d.json" % r)))["traceEvents"]
        pushes = [e for e in events if e["name"] == "push fp32"]
        fp32_steps = [t for t in range(STEPS) if not Schedule(alg, WARMUP, K).compressed(t)]
        assert len(pushes) == len(units) * len(fp32_steps)
        # the buckets' parts in turn (RoundRunner.fp32_units): a bucket's parts share its server
        turns = [i for i, _ in RoundRunner.fp32_units(SimpleNamespace(buckets=plan))]
        assert turns[:4] == [0, 1, 2, 3] and len(set(turns[:4])) == len(plan)
        for t in fp32_steps:
            assert [e["args"]["bucket"] for e in sorted(pushes, key=lambda e: e["ts"]) if e["args"]["step"] == t] == turns
        windows = [e for e in events if e["name"] == "window"]
        assert bool(windows) == bool(window) and all(len(e["args"]["after"]) == 1 for e in windows)
        if window:  # every part from the 5th of each round on, in each fp32 round
            assert len(windows) == len(pushes) - 4 * (len(pushes) // len(units))


@pytest.mark.parametrize("alg,mode,close", [("cdsgd", "whole", None), ("cdsgd", "auto", None), ("ssgd", "auto", None),
                                            ("odsgd", "auto", None), ("cdsgd", "auto", 100.0)])
def test_buckets_with_parts_go_whole_or_the_way_the_trials_chose(tmp_path, alg, mode, close):
    """Buckets with parts (CDSGD_PART_SIZE=64, 2 workers + 2 servers), cdsgd with 14 warm-up
    steps (S-SGD and OD-SGD: every step fp32): CDSGD_PARTS=whole sends every fp32 round whole;
    auto sends the first 7 fp32 steps as part_choice.TRIALS says (parts, then P W W P P W),
    and where rank 0 says the first look was too close to tell, the next 6 as LOOK says, then
    every later one (cdsgd: the last warm-up steps, the corrections) the way rank 0 prints
    that the workers' times chose.
    Either way the simulation's weights, bit for bit as the rounds in parts give them; a step's
    pushes (trace) and bytes are its way's units, and the kvstore's accounting agrees.
    close: part_choice.CLOSE in the workers (100: any first look is too close, a second one
    decides: its tally, a second round of the tally key, gives every worker the same way)."""
    from cdsgd_mx.worker.part_choice import LOOK, TRIALS
    steps, warmup = 18, 14  # (16 fp32 steps for cdsgd: a second look decides at the 14th)
    cfg = dict(CFG, trace=str(tmp_path / "trace{index}.json"), **({} if close is None else {"part_close": close}))
    output = []
    got = finish(start(tmp_path, 2, 2, "--algorithm", alg, "--steps", str(steps), "--warmup", str(warmup),
                       "--k", str(K), "--threshold", str(T), "--config", json.dumps(cfg),
                       env={"CDSGD_PART_SIZE": "64", "CDSGD_PARTS": mode}), output=output)
    schedule = Schedule(alg, warmup, K)
    fp32_steps = [t for t in range(steps) if not schedule.compressed(t)]
    if mode == "whole":
        ways = [True] * len(fp32_steps)
    else:
        said = [line for line in output[0].splitlines() if "fp32 rounds in" in line]
        assert len(said) == 1, output[0][-3000:]  # rank 0 only, once
        decided = "fp32 rounds in whole buckets from now on" in said[0]
        assert decided or "fp32 rounds in parts from now on" in said[0]
        assert close is None or "a second look" in said[0], said
        tried = list(TRIALS) + (list(LOOK) if "a second look" in said[0] else [])
        ways = tried + [decided] * (len(fp32_steps) - len(tried))
    init = [init_value(i, s) for i, s in enumerate(SHAPES)]
    xs, W = simulate(alg, 2, steps, warmup, K, T, init, grad_fn, CFG["lr"], CFG["momentum"], CFG["local_lr"],
                     CFG["batch"])
    plan, units, fp32, codes = parts_layout()
    way = dict(zip(fp32_steps, ways))
    assert_weights_and_bytes(got, xs, W, [fp32[way[t]] if t in way else codes for t in range(steps)])
    for r in range(2):
        events = json.load(open(tmp_path / ("trace%d.json" % r)))["traceEvents"]
        pushes = [e["args"]["step"] for e in events if e["name"] == "push fp32"]
        assert [pushes.count(t) for t in fp32_steps] == [len(plan) if w else len(units) for w in ways]


@pytest.mark.parametrize("alg,fp32_sum", [("ssgd", "arrival"), ("cdsgd", "rank")])
def test_a_window_of_one_byte_waits_before_pushes_and_changes_no_weight(tmp_path, alg, fp32_sum):
    """CDSGD_PUSH_WINDOW=1 with 16-value buckets (50 of them): from the 5th bucket of every fp32
    round on, each push follows the W of one earlier bucket (the trace's 'window' events:
    pushpulls held back on MXNet's engine, and with fp32_sum='rank' rows pushes, waited for by
    the communication thread). The weights are still the simulation's."""
    cfg = dict(CFG, bucket_size=16, fp32_sum=fp32_sum, trace=str(tmp_path / "trace{index}.json"))
    job = start(tmp_path, 2, 2, "--algorithm", alg, "--steps", str(STEPS), "--warmup", str(WARMUP), "--k", str(K),
                "--threshold", str(T), "--config", json.dumps(cfg), env={"CDSGD_PUSH_WINDOW": "1"})
    got = finish(job)
    xs, W = sim(alg, 2)
    for r in range(2):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got[r]["w%d" % i], W[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[r]["x%d" % i], xs[r][i], rtol=1e-5, atol=1e-5)
        events = json.load(open(tmp_path / ("trace%d.json" % r)))["traceEvents"]
        windows = [e for e in events if e["name"] == "window"]
        assert windows and all(len(e["args"]["after"]) == 1 for e in windows)
        waits = {(e["args"]["step"], e["args"]["bucket"]) for e in windows}
        fp32_steps = [t for t in range(STEPS) if not Schedule(alg, WARMUP, K).compressed(t)]
        assert {t for t, _ in waits} == set(fp32_steps), (r, sorted(waits))
        assert min(b for _, b in waits) == 4

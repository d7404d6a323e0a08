"""The watchdog's rules on made-up heartbeats (the real processes are in test_stall.py)."""
from cdsgd_mx.cluster import heartbeat
from cdsgd_mx.cluster.watchdog import Watchdog
from cdsgd_mx.bench import mark_fresh  # noqa: E402

SECRET = b"job secret"
LABELS = ["scheduler", "server 0", "worker 0", "worker 1"]


def beat(node, seq, step=0, phase="train", wait=None, waited=0.0, pid=1, secret=SECRET):
    return heartbeat.encode(secret, {"node": node, "host": "h", "pid": pid, "seq": seq, "phase": phase,
                                     "step": step, "rank": int(node[-1]) if node.startswith("worker") else None,
                                     "wait": wait, "waited": waited})


def everyone(dog, now, seq, **waits):
    for label in LABELS:
        dog.receive(beat(label, seq, step=5, **waits.get(label.replace(" ", ""), {})), now)


def test_a_silent_node_is_warned_about_then_stops_the_job():
    dog = Watchdog(SECRET, LABELS, stall_timeout=20)
    for t in range(5):
        everyone(dog, t, t + 1)
    for t in range(5, 30):  # server 0 falls silent at 4 s; worker 0 waits on it
        for label in LABELS:
            if label != "server 0":
                dog.receive(beat(label, t + 1, step=5, wait="step 4's pull of bucket 0 (key 1)" if label == "worker 0"
                                 else None, waited=t - 4.0), t)
        warnings, verdict = dog.check(set(LABELS), t)
        if t < 15:
            assert verdict is None and not warnings, (t, warnings)
        if t == 15:  # silent for 11 s > min(60, 20 / 2)
            assert any("server 0 (host h): no heartbeat for 11 s" in w for w in warnings)
            assert any("worker 0 (rank 0, host h) has waited 11 s for step 4's pull" in w
                       and "missing: server 0 (host h) (no heartbeat for 11 s)" in w for w in warnings)
        if 15 < t <= 24:
            assert verdict is None and not warnings  # each warning once
        if t == 25:
            assert verdict == "server 0 (host h): no heartbeat for 21 s (stopped or hung?), last in phase train"
            return
    raise AssertionError("never stopped")


def test_a_long_wait_among_live_nodes_names_the_worker_behind():
    dog = Watchdog(SECRET, LABELS, stall_timeout=20)
    for t in range(0, 22):
        everyone(dog, t, t + 1, worker0={"wait": "step 5's pull of bucket 0 (key 1)", "waited": float(t)})
    warnings, verdict = dog.check(set(LABELS), 21.5)
    assert verdict == ("worker 0 (rank 0, host h) has waited 22 s for step 5's pull of bucket 0 (key 1); missing: "
                       "worker 1 (rank 1, host h) (at step 5, busy in its own code)")


def test_a_short_wait_trips_nothing_and_start_up_has_its_own_limit():
    dog = Watchdog(SECRET, LABELS, stall_timeout=20, start_timeout=100)
    for t in range(0, 60):
        for label in LABELS[:3]:  # worker 1 never reports
            dog.receive(beat(label, t + 1, phase="start", wait="start-up" if label == "worker 0" else None,
                             waited=float(t)), t)
        warnings, verdict = dog.check(set(LABELS), t)
        assert verdict is None
    for t in range(60, 102):
        for label in LABELS[:3]:
            dog.receive(beat(label, t + 1, phase="start", wait="start-up" if label == "worker 0" else None,
                             waited=float(t)), t)
        warnings, verdict = dog.check(set(LABELS), t)
    assert verdict.endswith("missing: worker 1 (never reported: not started, or not using cdsgd_mx)")


def test_uneven_steps_stop_at_once_even_with_the_timeout_off():
    dog = Watchdog(SECRET, LABELS, stall_timeout=0)
    dog.receive(beat("worker 0", 1, step=20, phase="exit"), 0)
    dog.receive(beat("worker 1", 1, step=20), 0)
    assert dog.check(set(LABELS), 0) == ([], None)  # the same count: the other is finishing too
    dog.receive(beat("worker 1", 2, step=21, wait="x", waited=0.5), 1)
    _, verdict = dog.check(set(LABELS), 1)
    assert verdict.startswith("uneven steps: worker 0 (rank 0, host h) finished after 20 steps while worker 1 "
                              "(rank 1, host h) is at step 21")


def test_beats_without_the_jobs_mac_or_overtaken_on_the_way_are_ignored():
    dog = Watchdog(SECRET, LABELS, stall_timeout=20)
    dog.receive(beat("worker 0", 1, step=20, phase="exit", secret=b"another job"), 0)
    dog.receive(b"\xff\x00 not a beat", 0)
    dog.receive(beat("worker 9", 1), 0)  # not a node of this job
    assert dog.last == {} and dog.dropped == 3
    dog.receive(beat("worker 0", 5, step=20, phase="exit"), 0)
    dog.receive(beat("worker 0", 4, step=18, phase="train"), 0)  # sent before, arrived after
    assert dog.last["worker 0"][0]["phase"] == "exit"
    dog.receive(beat("worker 0", 1, step=0, phase="start", pid=2), 1)  # a new process (a restart) starts over
    assert dog.last["worker 0"][0]["phase"] == "start"


def test_nodes_silent_at_exit_stop_the_job_the_stopped_one_named_first():
    dog = Watchdog(SECRET, LABELS, stall_timeout=20)
    for label in LABELS:
        dog.receive(beat(label, 1, step=20, phase="exit" if label.startswith("worker") else "train"), 0)
    for t in range(1, 30):  # the workers fell silent in MXNet's exit barriers; scheduler and server beat on
        for label in ("scheduler", "server 0"):
            dog.receive(beat(label, t + 1), t)
        warnings, verdict = dog.check(set(LABELS), t, stopped={"worker 1"})
        if verdict:
            break
    assert t == 21
    assert verdict == ("worker 1 (rank 1, host h): no heartbeat for 21 s (stopped: its process is in state T), last in "
                       "phase exit; silent too: worker 0 (rank 0, host h)")


def test_a_worker_busy_in_an_earlier_phase_is_named_behind_one_at_the_exit_barrier():
    dog = Watchdog(SECRET, LABELS, stall_timeout=20)
    for t in range(0, 22):
        everyone(dog, t, t + 1)
        dog.receive(beat("worker 0", t + 100, step=5, phase="exit", wait="the exit barrier", waited=float(t)), t)
    _, verdict = dog.check(set(LABELS), 21.5)
    assert verdict.endswith("missing: worker 1 (rank 1, host h) (at step 5, busy in its own code)")


def test_a_restart_resumes_only_from_its_own_runs_checkpoint(tmp_path):
    import os
    import sys
    import mxnet as mx
    from mxnet import gluon
    import cdsgd_mx
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts"))
    try:
        import train
    finally:
        sys.path.pop(0)
    params = gluon.ParameterDict()
    params.get("w", shape=(4,), init=mx.init.One())
    params.initialize()
    trainer = cdsgd_mx.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore="local")
    params.get("w").grad()[:] = 1
    mark_fresh(trainer)  # the gradients were written by hand
    trainer.step(1)
    ckpt = str(tmp_path / "checkpoint.states")
    trainer.save_states(ckpt, extra={"epoch": 1, "run": "run-a"})
    assert train.written_by(ckpt, "run-a") and not train.written_by(ckpt, "run-b")
    open(ckpt, "wb").write(b"garbage")
    assert train.written_by(ckpt, "run-b")  # unreadable: loading it will say what is wrong

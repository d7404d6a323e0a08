"""step.py with a fake round runner, local update and bucket set, in process and in
milliseconds: the order Algorithm 1 puts each step's parts in, and what waits for what."""
from cdsgd_mx.worker.schedule import Schedule
from cdsgd_mx.worker.step import StepEngine
from cdsgd_mx.worker.trace import Tracer


class Log(list):
    """Calls from both threads, in order (list.append is atomic)."""
    add = list.append


class FakeSet:
    device = None

    def __init__(self, log):
        self.log = log

    def __getattr__(self, name):  # grad_to_comm, comm_to_loc, scatter, hold_loc, keep_residual ...
        def call(*args, **options):  # (options left at their defaults: grad_to_comm's but_parted)
            assert not any(options.values()), (name, options)
            self.log.add((name,) + args)
            if name in ("hold_loc", "keep_residual"):
                return lambda: self.log.add(("restore " + name[5:],))
        return call


class FakeRounds:
    def __init__(self, log, schedule):
        self.log, self.schedule, self.resent = log, schedule, 0

    def parts_from_grad(self, bset, t):
        return False  # (no parts here: RoundRunner's own tests and the engine's jobs have them)

    def went_in_parts(self, bset, t):
        return False

    def push(self, bset, t, keep_residual=None, parts_from_grad=False):
        self.log.add(("push", t))
        if keep_residual:
            keep_residual()
        return lambda: self.log.add(("check", t)) or (lambda: self.log.add(("sealed", t)))


class FakeLocal:
    def __init__(self, log):
        self.log = log

    def step(self, bset):
        self.log.add(("local update",))


def engine(alg="cdsgd", warmup=2, k=2):
    log = Log()
    e = StepEngine(FakeRounds(log, Schedule(alg, warmup, k)), FakeLocal(log), Tracer(None))
    e.driven_by_trainer = True
    return e, log, FakeSet(log)


def test_a_synchronous_step_waits_for_its_round_then_hands_out_w():
    e, log, bset = engine("bitsgd", warmup=1)
    e.step(bset)  # t = 0
    e.finish_step()
    assert log[:2] == [("grad_to_comm",), ("push", 0)]
    # the parameters get W only after the round's pulls were issued, and its check ran before finish returns
    assert log.index(("scatter", "comm")) > log.index(("push", 0)) and ("check", 0) in log
    log.clear()
    e.step(bset)  # t = 1, compressed: grad_buf is quantized in place, no copy to comm_buf
    e.finish_step()
    assert ("grad_to_comm",) not in log and ("push", 1) in log
    e.close()


def test_a_delayed_step_waits_for_the_previous_round_and_returns_with_its_own_in_flight():
    e, log, bset = engine("cdsgd", warmup=1)  # every step delayed (n - 1 = 0)
    e.step(bset)
    e.finish_step()
    assert e.position(bset) == (1, True)  # round 0 in flight, bringing W(1)
    e.step(bset)
    e.finish_step()
    e.wait_all([])
    order = [x[0] for x in log]
    # per step: W(t) into loc_buf, eq. 11, the parameters = loc_buf, comm_buf = g(t), then the round
    assert order[:5] == ["comm_to_loc", "local update", "scatter", "grad_to_comm", "push"]
    assert ("scatter", "loc") in log and ("scatter", "comm") not in log  # x(t+1) from loc_buf, never W
    # step 1 began with round 0 done (its check ran before step 1's comm_to_loc)
    assert log.index(("check", 0)) < [i for i, x in enumerate(log) if x[0] == "comm_to_loc"][1]
    e.close()


def test_held_parameters_keep_w_and_their_residual():
    e, log, bset = engine("cdsgd", warmup=0, k=3)  # step 1: delayed and compressed
    e.resume(bset, 1, False)
    e.step(bset, held=["p2"])
    e.finish_step()
    e.wait_all([])
    order = [x[0] for x in log]
    assert order.index("hold_loc") < order.index("local update") < order.index("restore loc")
    assert order.index("keep_residual") < order.index("push") < order.index("restore residual")
    e.close()


def test_a_resumed_set_goes_on_at_its_step_and_waits_for_the_round_it_resumed_with():
    e, log, bset = engine("cdsgd", warmup=0, k=3)
    e.resume(bset, 5, True)  # a checkpoint taken with W(5) on its way into comm_buf
    assert e.position(bset) == (5, True)
    e.step(bset)
    e.finish_step()
    e.wait_all([])
    assert ("push", 5) in log and e.position(bset) == (6, True)
    assert [x[0] for x in log][:2] == ["comm_to_loc", "local update"]  # delayed: W(5) first, then eq. 11
    e.close()

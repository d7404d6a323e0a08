"""What every part of bench.comm shares: the systems it times (their names, which run on the
project's server, which time two kinds of round in one job), the round's settings, and each
model built as a job builds it."""

SYSTEMS = ["stock_fp32", "stock_2bit", "ssgd", "bitsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit"]
EXTRA_SYSTEMS = ["paired", "paired_pull", "paired_sum", "ssgd_percall", "bitsgd_percall",  # by name; under the table
                 "ssgd_unwindowed"]
OURS = ("ssgd", "bitsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit")
PER_CALL = ("ssgd_percall", "bitsgd_percall")  # gluon.Trainer with our store: one pushpull per parameter, as Module
UNWINDOWED = {"ssgd_unwindowed": "ssgd"}  # the system with no window of fp32 pushes in flight (CDSGD_PUSH_WINDOW=0)
OUR_JOBS = OURS + ("paired", "paired_pull", "paired_sum") + PER_CALL + tuple(UNWINDOWED)  # jobs on the project's server
PAIRED = {"paired": (("ssgd", "none"), ("bitsgd", "none")),  # (even round, odd round): (algorithm, pull)
          "paired_pull": (("bitsgd", "none"), ("bitsgd", "2bit"))}
ALTERNATING = tuple(PAIRED) + ("paired_sum",)  # jobs whose even and odd rounds are timed apart
ALGORITHM_OF = dict({"paired": "bitsgd", "paired_pull": "bitsgd", "paired_sum": "ssgd"}, **UNWINDOWED)  # (else the system's name)


def algorithm_of(system):
    """The algorithm a system of ours trains with (its both-ways variant: the same one)."""
    return ALGORITHM_OF.get(system, system.replace("_2bit", ""))


def times_fp32_rounds(system):
    """Whether a job of ours times fp32 rounds (every round, CD-SGD's corrections, a paired
    job's S-SGD rounds): those go in parts or whole, as the job's first fp32 steps choose."""
    return algorithm_of(system).replace("_percall", "") in ("ssgd", "cdsgd") or \
        any(algorithm == "ssgd" for algorithm, _ in PAIRED.get(system, ()))


ROUND_NAMES = {"paired": ("ssgd", "bitsgd"), "paired_pull": ("bitsgd", "bitsgd_2bit"),  # (even, odd)
               "paired_sum": ("arrival", "rank")}
# untimed rounds first: registration, buffers, connections, and the first fp32 steps, where the
# job tries parts and whole buckets (worker/part_choice.TRIALS, then its decision); even (ALTERNATING)
WARMUP_ROUNDS = 8
OPTIMIZER = {"learning_rate": 0.01, "momentum": 0.9}
K = 5  # CD-SGD's k in the jobs: a correction (an fp32 round) every 5th round


def build_model(name):
    """The model, initialized, with every deferred shape known."""
    import mxnet as mx
    from cdsgd_mx.experiments import models
    shape = models.INPUT_SHAPES[name]
    net = models.build(name, 1000 if shape[-1] == 224 else 10)
    net.initialize(mx.init.Xavier())
    # training-mode forward: an inference forward lets MKL-DNN reorder conv weights in place,
    # which MXNet's dist kvstore cannot send (empty pushes, 'init N first' on the server)
    with mx.autograd.record():
        net(mx.nd.zeros((1,) + shape))
    return net


def model_info(name):
    params = list(build_model(name).collect_params().values())
    trained = [p for p in params if p.grad_req != "null"]
    size = lambda ps: sum(int(p.data().size) for p in ps)
    return {"arrays": len(params), "values": size(params), "trained_arrays": len(trained),
            "trained_values": size(trained)}

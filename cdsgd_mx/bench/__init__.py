"""Benchmarks (python -m cdsgd_mx.bench.NAME) and what they share."""


def mark_fresh(trainer):
    """What backward does to the parameters it reaches, for runs that write gradients by hand
    (or keep them from step to step): they count as fresh, so gluon's stale-gradient rule (a
    parameter with no fresh gradient is not updated) lets every step push them."""
    for p in trainer._params:
        if p.grad_req != "null":
            for d in p._check_and_get(p._data, list):
                d._fresh_grad = True

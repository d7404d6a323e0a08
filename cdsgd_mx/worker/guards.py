"""Job-level guards: the servers are ours and hold the job's secret, every worker runs the same
configuration, and a non-finite gradient stops the job or drops the step on every worker.

API: check_servers(backend); check_agreement(backend, settings, sets, param_names);
NonfinitePolicy(policy, backend, names).apply(sets, step, tracer) -> skip?, .skipped_steps.
"""
import json
import zlib

import numpy as np

from cdsgd_mx import numerics
from cdsgd_mx.wire import auth, protocol
from cdsgd_mx.worker.config import FP32_SUMS, NONFINITE_POLICIES, PULL_COMPRESSIONS, ConfigError
from cdsgd_mx.worker.part_choice import MODES as PART_MODES
from cdsgd_mx.worker.schedule import ALGORITHMS


def check_servers(backend):
    """Before anything else: every server must be ours. MXNet's own server (a script
    launched with tools/launch.py that forgot serve_if_not_worker(), or a host without
    cdsgd-mx) accepts every push but ignores our commands, so 2-bit pushes would never
    reach the weights while the job trains on and exits 0."""
    answers = sorted(backend.answers.items())
    stock = [s for s, answer in answers if not (answer[:, 1] == protocol.HANDSHAKE_MARK).all()]
    if stock:
        raise ConfigError(
            "server %s answered the start-up handshake as MXNet's own server does, not cdsgd-mx's: start "
            "the servers with `python -m cdsgd_mx.server` (python -m cdsgd_mx.launch does), or with MXNet's "
            "tools/launch.py call cdsgd_mx.server.node.serve_if_not_worker() at the top of the training script, "
            "and install cdsgd-mx on every server host" % ", ".join(str(s) for s in stock))
    for s, answer in answers:
        others = [r for r in range(answer.shape[0]) if answer[r, 0] != 1.0]
        if others:
            raise ConfigError(
                "server %d holds another job secret than %s: the nodes of one job must come from one launcher "
                "run (python -m cdsgd_mx.launch), or all read the same %s" % (
                    s, "every worker" if len(others) == answer.shape[0]
                    else "worker rank %s" % ", ".join(map(str, others)), auth.SECRET_FILE))


def check_agreement(backend, settings, sets, param_names):
    """Before any training: every worker must run the same algorithm, k, warm-up,
    threshold, bucket size and parameters, and sum fp32 pushes alike (fp32_sum: a worker pushing
    to rows keys the others never push to would wait for ever), and run the same numerics mode
    (the servers check rank 0's, numerics.py); a mismatch would silently train something else.
    Not the number of devices: a worker pushes one summed gradient whatever its devices."""
    shapes = json.dumps([[k, list(bset.shapes[k])] for bset in sets for k in bset.keys])
    names = json.dumps(list(param_names or []))
    layout = json.dumps([bset.layout() for bset in sets])
    fields = ["algorithm", "k", "warmup_steps", "threshold", "nonfinite", "bucket_size",
              "number of parameters", "update_on_kvstore", "parameter shapes", "parameter names", "bucket layout",
              "pull_compression", "resync_every", "fp32_sum", "numerics", "CDSGD_PARTS"]
    mine = [ALGORITHMS.index(settings["algorithm"]), settings["k"], settings["warmup_steps"],
            np.float32(settings["threshold"]), NONFINITE_POLICIES.index(settings["nonfinite"]),
            settings["bucket_size"], sum(len(bset.keys) for bset in sets), not settings["aggregate"]] + \
           [zlib.crc32(x.encode()) & 0xFFFF for x in (shapes, names, layout)] + \
           [PULL_COMPRESSIONS.index(settings["pull_compression"]), settings["resync_every"],
            FP32_SUMS.index(settings["fp32_sum"]), numerics.MODES.index(numerics.active()),
            PART_MODES.index(settings["parts"])]  # (a worker pushing whole keys the others push in parts would wait)
    rows = backend.gather_rows(protocol.CONFIG_KEY, np.array(mine, np.float32))
    problems = []
    for i, field in enumerate(fields):
        values = rows[:, i]
        if np.any(values != values[0]):
            shown = [ALGORITHMS[int(v)] if i == 0 else NONFINITE_POLICIES[int(v)] if i == 4
                     else PULL_COMPRESSIONS[int(v)] if i == 11 else FP32_SUMS[int(v)] if i == 13
                     else numerics.MODES[int(v)] if i == 14 else PART_MODES[int(v)] if i == 15
                     else float(v) if i == 3 else int(v) for v in values]
            if 8 <= i <= 10:  # checksums
                problems.append("%s differ" % field)
            else:
                problems.append("%s is %s" % (field, ", ".join("%r on rank %d" % (v, r) for r, v in enumerate(shown))))
    if problems:
        raise ConfigError("workers disagree on the configuration: " + "; ".join(problems))


class NonfinitePolicy:
    """What a NaN/Inf gradient does: 'error' stops with the parameter and the step; 'skip'
    drops the step on every worker (they vote each step: one small push and pull)."""

    def __init__(self, policy, backend, names):
        self.policy, self.backend, self.names = policy, backend, names  # names(keys) -> "p1, p2"
        self.skipped_steps = []  # 'skip': the steps (pushpull calls) dropped on every worker
        self._vote_open = False

    def apply(self, sets, step, tracer):
        """The policy on this step's gathered gradients, before anything is pushed or any
        weight moves. Returns True when the step must be skipped (policy 'skip': some
        worker's gradient is not finite; every worker gets the same answer)."""
        with tracer.span("check gradients", step=step):
            bad = sum(bset.count_nonfinite() for bset in sets)  # one pass per set, waits for backward
        first = None
        if bad:
            for bset in sets:
                k, n = bset.first_nonfinite()
                if k is not None:
                    first = "parameter %s at step %d (%d values)" % (self.names([k]), step, n)
                    break
        if self.policy == "error":
            if first:
                raise FloatingPointError("non-finite gradient in " + first)
            return False
        # 'skip': the workers vote; a step is dropped everywhere or nowhere
        if not self._vote_open:
            self.backend.open_tally(protocol.VOTE_KEY, self.backend.num_workers)
            self._vote_open = True
        mine = np.zeros(self.backend.num_workers, np.float32)
        mine[self.backend.rank] = min(bad, 1 << 20)  # exact in float32
        votes = self.backend.tally(protocol.VOTE_KEY, mine)
        if not votes.any():
            return False
        self.skipped_steps.append(step)
        print("cdsgd_mx: step %d skipped on every worker: non-finite gradient on rank %s%s"
              % (step, ", ".join(str(r) for r in np.flatnonzero(votes)),
                 " (here: %s)" % first if first else ""), flush=True)
        return True

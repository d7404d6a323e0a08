"""gluon's per-update rules on a parameter server (issue 26): what gluon.Trainer does at every
update when the workers update, told to the servers and the local optimizer (eq. 11) so that
training gives what stock gluon gives:
- the optimizer's settings stay as sent (only the learning rate follows, set_learning_rate);
- the local optimizer follows the global learning-rate schedule and rescale_grad;
- lr_mult / wd_mult changed during training take effect from the next update;
- a parameter no worker has a fresh gradient for gets no update at this step (stale).
Where a rule cannot be kept it stops in one line. docs/usage.md lists the idioms.

API: GluonRules(backend, local, names, delayed, wait_all).bind(optimizer) /
follow(sets, step, updates) / set_multipliers(bset, step) / held(all_sets, sets, stale, step).
"""
import numpy as np

from cdsgd_mx.wire import optimizer_spec, protocol
from cdsgd_mx.worker.config import ConfigError


class GluonRules:
    """backend: where commands and the stale count go; local: the LocalUpdate; names(keys): the
    parameters' names for messages; delayed: the algorithm updates locally (odsgd/cdsgd);
    wait_all(): waits for the rounds in flight (their updates keep the old settings)."""

    def __init__(self, backend, local, names, delayed, wait_all):
        self.backend, self.local, self.names, self.delayed, self.wait_all = backend, local, names, delayed, wait_all
        self.optimizer = None
        self.sent = None          # the optimizer's settings the servers have
        self._stale_open = False  # the stale count's key exists on its server
        self.rate = None          # the learning rate the servers have (set_learning_rate sends one)
        self._rate_told = False   # the line about a rate the servers never got was printed

    def bind(self, optimizer):
        """The global optimizer, as just sent to the servers."""
        self.optimizer = optimizer
        self.sent = optimizer_spec.hyper_parameters(optimizer)
        self.rate = optimizer.lr

    def follow(self, sets, step, updates):
        """Before step `step`'s update (the `updates`-th): the global optimizer's settings
        unchanged, the local one following it, and the sets' multipliers as they are now."""
        self._follow_global(updates)
        self._follow_multipliers(sets, step)

    def _follow_global(self, updates):
        """The local optimizer follows the global one, as set_learning_rate does: the same
        rescale_grad (gluon sets it from each step's batch size), and under a learning-rate
        schedule the local rate scaled by the same factor as the servers' rate at this update
        (the servers count one update per step)."""
        opt = self.optimizer
        now = optimizer_spec.hyper_parameters(opt)
        if now != self.sent:  # e.g. trainer.optimizer.wd = 0: the servers would never see it
            changed = sorted(k for k in set(now) | set(self.sent) if now.get(k) != self.sent.get(k))
            raise ConfigError("the optimizer's %s changed during training (%s): the servers' optimizer is set when "
                              "training starts and only its learning rate follows (set_learning_rate); set the others "
                              "before the first step" % (", ".join(changed), ", ".join(
                                  "%r -> %r" % (self.sent.get(k), now.get(k)) for k in changed)))
        if opt.lr_scheduler is None and opt.lr != self.rate and not self._rate_told:
            # gluon.Trainer.set_learning_rate changes only the worker's optimizer: MXNet's own
            # dist_sync servers keep their rate too, and the weights stay equal to theirs
            print("cdsgd_mx: the learning rate is %r on this worker (gluon.Trainer.set_learning_rate?), but the "
                  "servers keep %r, the rate they got at the first step, as MXNet's own dist_sync servers do: change "
                  "it with cdsgd_mx.Trainer.set_learning_rate or kv.set_learning_rate, or an lr_scheduler"
                  % (opt.lr, self.rate), flush=True)
            self._rate_told = True
        self.local.follow(opt, updates)
        self.backend.follow_rescale(opt.rescale_grad)

    def _follow_multipliers(self, sets, step):
        """lr_mult / wd_mult changed since they were sent (gluon reads a Parameter's own at every
        update when the workers update): the servers and the local optimizer use the new ones
        from this step's update on. Per step, one lookup and comparison per parameter slice."""
        opt = self.optimizer
        changed = [bset for bset in sets if any(multipliers(opt, s.key) != (s.lr_mult, s.wd_mult) for s in bset.slots)]
        if not changed:
            return
        self.wait_all()  # the rounds in flight are earlier steps': their updates keep the old multipliers
        slots = []
        for bset in changed:
            self.set_multipliers(bset, step)
            slots += [[s.state_id, s.lr_mult, s.wd_mult] for s in bset.slots]
        self.backend.command({"op": "multipliers", "slots": slots})

    def set_multipliers(self, bset, step):
        """The set's multipliers as the optimizer has them now, for the local optimizer too. A
        stateful local optimizer keeps one state per run of parameters with equal multipliers:
        where a change would regroup those runs, stop (the states would no longer fit)."""
        before = [(s.lr_mult, s.wd_mult) for s in bset.slots]
        runs = [(i, g.shape) for i, g, _ in bset.runs]
        bset.set_multipliers(lambda key: multipliers(self.optimizer, key))
        if runs != [(i, g.shape) for i, g, _ in bset.runs] and self.local.stateful(i for i, _ in runs):
            moved = [s.key for s, b in zip(bset.slots, before) if (s.lr_mult, s.wd_mult) != b]
            bset.set_multipliers(lambda key, old=dict(zip((s.key for s in bset.slots), before)): old[key])
            raise ConfigError("parameter %s: lr_mult/wd_mult changed at step %d, but the local optimizer %r keeps "
                              "state per run of parameters with equal multipliers; set them before the first step, "
                              "or use the stateless local optimizer (local_optimizer='sgd' without momentum)"
                              % (self.names(moved[:1]), step, self.local.name))
        if self.local.bound:
            self.local.set_multipliers(bset)

    def held(self, all_sets, sets, stale, step):
        """gluon's rule for stale gradients, on every worker alike: a parameter no worker has a
        fresh gradient for gets no update at this step (no momentum, no weight decay, no local
        step; its residual stays). The workers count, per parameter, how many have a fresh
        gradient (one small push and pull per step); the servers are told which parameters to
        skip once the rounds in flight (earlier steps', whose updates keep them) are done.
        all_sets: every set of the store (the count's order); returns {bucket set: its
        parameters held}."""
        order = {k: i for i, k in enumerate(k for bset in all_sets for k in bset.keys)}  # as registered
        fresh = np.ones(len(order), np.float32)
        for k in stale:
            fresh[order[k]] = 0.0
        if self.backend.num_workers > 1:
            if not self._stale_open:
                self.backend.open_tally(protocol.STALE_KEY, len(order))
                self._stale_open = True
            fresh = self.backend.tally(protocol.STALE_KEY, fresh)
        held = {bset: {k for k in bset.keys if fresh[order[k]] == 0} for bset in sets}
        held = {bset: keys for bset, keys in held.items() if keys}
        if not held:
            return {}
        if self.delayed and self.local.stateful():
            first = min(next(iter(held.values())))
            raise ConfigError("parameter %s: no worker has a fresh gradient at step %d (ignore_stale_grad=True), and "
                              "the local optimizer %r keeps state a skipped step would still move; use the stateless "
                              "local optimizer (local_optimizer='sgd' without momentum)"
                              % (self.names([first]), step, self.local.name))
        self.wait_all()
        self.backend.command({"op": "skip", "ids": [s.state_id for bset, keys in held.items()
                                                     for s in bset.slots if s.key in keys]})
        return held


def multipliers(optimizer, key):
    """(lr_mult, wd_mult) of parameter `key` as MXNet's Optimizer looks them up: its Parameter
    (gluon's param_dict), else the multipliers set by index, else by name (idx2name)."""
    param = optimizer.param_dict.get(key)
    if param is not None:
        return param.lr_mult, param.wd_mult
    name = optimizer.idx2name.get(key)
    return (optimizer.lr_mult.get(key, optimizer.lr_mult.get(name, 1.0)),
            optimizer.wd_mult.get(key, optimizer.wd_mult.get(name, 1.0)))

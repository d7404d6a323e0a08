"""The local update of OD-SGD and CD-SGD (the paper's eq. 11): x(t+1) = W(t) - lr_loc * g(t),
the local optimizer stepping loc_buf run by run (a run: parameters with equal multipliers).

API: LocalUpdate(name, params).bind(global_opt) / follow(global_opt, updates) /
set_multipliers(bset) / stateful(ids) / step(bset) / set_learning_rate(lr) / learning_rate /
get_states() / set_states(blob).
"""
import mxnet as mx
import numpy as np

from cdsgd_mx import codec


class LocalUpdate:
    """The local optimizer (plain SGD by default), built when the global one is known: it
    takes the global learning rate unless `params` says otherwise, and follows the global
    optimizer's rescale_grad and learning-rate schedule."""

    def __init__(self, name="sgd", params=None):
        self.name = name
        self.params = dict(params or {})  # what the user asked for (set_learning_rate may change it before bind)
        self.optimizer = None
        self.updater = None
        self._start = None  # (global rate, local rate) when bound: a schedule scales both alike

    def bind(self, global_opt):
        params = {"learning_rate": global_opt.learning_rate}
        params.update(self.params)
        params["rescale_grad"] = global_opt.rescale_grad
        self.optimizer = mx.optimizer.create(self.name, **params)
        self.updater = mx.optimizer.get_updater(self.optimizer)
        self._start = (global_opt.learning_rate, self.optimizer.learning_rate)

    @property
    def bound(self):
        return self.optimizer is not None

    def follow(self, global_opt, updates):
        """The same rescale_grad as the global optimizer (gluon sets it from each step's batch
        size) and, under a learning-rate schedule, the local rate scaled by the same factor as
        the servers' rate at this update (`updates` so far; the servers count one per step)."""
        self.optimizer.rescale_grad = global_opt.rescale_grad
        if global_opt.lr_scheduler is not None:
            global_start, local_start = self._start
            now = global_opt.lr_scheduler(global_opt.begin_num_update + updates + 1)
            self.optimizer.set_learning_rate(local_start * (now / global_start if global_start else 1.0))

    def set_multipliers(self, bset):
        """Each parameter's lr_mult / wd_mult, by the state id the set's runs step under."""
        for s in bset.slots:
            self.optimizer.lr_mult[s.state_id] = s.lr_mult
            self.optimizer.wd_mult[s.state_id] = s.wd_mult

    def stateful(self, ids=None):
        """Whether the local optimizer keeps state (e.g. momentum) for some run (of `ids`:
        the runs' state ids; all by default)."""
        if self.updater is None:
            return False
        states = self.updater.states
        return any(states.get(i) is not None for i in (states if ids is None else ids))

    def step(self, bset):
        """loc_buf (holding W(t)) -= the local step with grad_buf's g(t), run by run. Plain SGD
        (no momentum, no weight decay, float32 on a CPU: the default) runs as one native pass per
        run, bit for bit what MXNet's Updater gives (codec.sgd; 0.3 ms against 3.6-4.2 ms through
        the Updater for Inception-BN's 1.65 M values, time the next forward waited for);
        anything else goes through MXNet's Updater."""
        for index, grad, loc in bset.runs:
            if not self._native(index, grad, loc):
                self.updater(index, grad, loc)

    def _native(self, index, grad, loc):
        """The run's step as one native pass, where it is plain SGD; False where it is not."""
        from mxnet.optimizer import SGD
        opt = self.optimizer
        if (type(opt) is not SGD or opt.momentum or opt.multi_precision or loc.dtype != np.float32
                or loc.context.device_type != "cpu" or opt._get_wds([index])[0] != 0):
            return False
        if index not in self.updater.states:  # as the Updater keeps it (checkpoints save it)
            self.updater.states[index] = opt.create_state_multi_precision(index, loc)
            self.updater.states_synced[index] = True
        opt._update_count(index)
        codec.sgd(grad, loc, None, [(0, loc.size, opt._get_lrs([index])[0], 0.0)], 0.0, opt.rescale_grad,
                  opt.clip_gradient or None)
        return True

    def set_learning_rate(self, lr):
        self.optimizer.set_learning_rate(lr)

    @property
    def learning_rate(self):
        return self.optimizer.learning_rate if self.optimizer else None

    def get_states(self):
        """The updater's states and optimizer (checkpoints), or None before bind."""
        return self.updater.get_states(dump_optimizer=True) if self.updater else None

    def set_states(self, blob):
        self.updater.set_states(blob)
        self.optimizer = self.updater.optimizer

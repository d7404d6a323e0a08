"""cdsgd_mx.Trainer: a drop-in for gluon.Trainer that runs S-SGD, BIT-SGD, OD-SGD or CD-SGD.

    trainer = cdsgd_mx.Trainer(net.collect_params(), 'sgd',
                               {'learning_rate': 0.1, 'momentum': 0.9, 'wd': 1e-4},
                               algorithm='cdsgd', k=5, warmup_steps=100, threshold=0.5,
                               local_optimizer_params={'learning_rate': 0.4})
    ... loss.backward(); trainer.step(batch_size)

Same methods as gluon.Trainer. The global optimizer (name + optimizer_params) runs on the
servers (with update_on_kvstore=False, algorithm 'ssgd' or 'bitsgd': the servers only sum and
the workers update, so allreduce_grads() -> clipping -> update() works as in gluon); the
local optimizer (plain SGD by default, at the global learning rate unless
local_optimizer_params says otherwise) steps loc_buf in odsgd/cdsgd. With kvstore='local' or
None the same semantics run in one process (N = 1, no parameter server).
"""
import numpy as np
from mxnet import autograd, gluon

from cdsgd_mx import numerics
from cdsgd_mx.worker.buckets import default_bucket_size
from cdsgd_mx.worker.config import DEFAULT_RESYNC_EVERY, ConfigError, check_config, check_learning_rate
from cdsgd_mx.worker.kvstore import CDSGD
from cdsgd_mx.worker import recorder

DEFAULT_WARMUP_STEPS = 100  # the paper: "it takes little time usually"; a few hundred at most
NO_WORKER_UPDATE = ("%s (the workers update; algorithm 'ssgd' or 'bitsgd'): with update_on_kvstore=None the "
                    "global optimizer runs on the servers, and clipping is optimizer_params={'clip_gradient': C}")


STALE = ("Gradient of Parameter `%s` on context %s has not been updated by backward since last `step`: "
         "call step with ignore_stale_grad=True if only part of the network is used at this step")


def require_numerics(mode):
    """numerics=: the mode must already be in force in this process (numerics.py: pins act only
    when set before MXNet loads, and MXNet is loaded here)."""
    if mode is None:
        return
    if mode not in numerics.MODES:
        raise ConfigError("numerics must be None or one of %s, got %r" % (", ".join(numerics.MODES), mode))
    if numerics.active() != mode:
        raise ConfigError("numerics=%r: this process runs %s numerics; the mode is set before MXNet loads: start the "
                          "job with %s=%s in its environment (or set os.environ[%r] = %r before the first import of "
                          "cdsgd_mx or mxnet)" % (mode, numerics.active(), numerics.ENV, mode, numerics.ENV, mode))


class Trainer(gluon.Trainer):
    """Defaults: algorithm='cdsgd', k=5, warmup_steps=100, threshold=0.5, kvstore='dist_sync',
    local_optimizer='sgd', local_optimizer_params=None (global learning rate), trace=None,
    nonfinite='error', bucket_size=2^20 values, pull_compression='none' ('2bit': 2-bit both
    ways, bitsgd and cdsgd), resync_every=0 (bitsgd with 2-bit pulls: never re-sync),
    fp32_sum='arrival' ('rank': the servers sum fp32 pushes in rank order, so the same seed gives
    the same weights with any number of workers), numerics=None ('portable': require the pinned
    numerics that give the same weights on any x86-64 CPU with AVX2 and any core count; they are
    set before MXNet loads, by CDSGD_NUMERICS=portable in the job's environment (or in
    os.environ before the first import of cdsgd_mx or mxnet); a mode not in force is a
    ConfigError) (see CDSGD).

    The parameters are fused into buckets: their gradients are bound to slices of one flat
    buffer (autograd writes there), and every step hands all of them to the kvstore at once.
    Parameters on several contexts (ctx=[mx.gpu(0), mx.gpu(1)] or [mx.cpu(0), mx.cpu(1)]): the
    worker pushes the sum of its devices' gradients and every device gets the same weights."""

    def __init__(self, params, optimizer, optimizer_params=None, kvstore="dist_sync", algorithm="cdsgd",
                 k=5, warmup_steps=DEFAULT_WARMUP_STEPS, threshold=0.5, local_optimizer="sgd",
                 local_optimizer_params=None, trace=None, compression_params=None, update_on_kvstore=None,
                 nonfinite="error", bucket_size=None, pull_compression="none",
                 resync_every=DEFAULT_RESYNC_EVERY, fp32_sum="arrival", numerics=None):
        require_numerics(numerics)
        aggregate = update_on_kvstore is False  # the servers sum, the workers update (gluon's meaning)
        bucket_size = default_bucket_size(algorithm) if bucket_size is None else bucket_size
        check_config(algorithm, k, warmup_steps, threshold, kvstore, nonfinite, bucket_size, aggregate,
                     pull_compression, resync_every, fp32_sum)
        for name, given in (("optimizer_params", optimizer_params), ("local_optimizer_params", local_optimizer_params)):
            if isinstance(given, dict) and "learning_rate" in given:
                check_learning_rate(name + "['learning_rate']", given["learning_rate"])
        if compression_params:
            raise ConfigError("compression_params: use algorithm='bitsgd' or 'cdsgd' and threshold= instead")
        plist = list(params.values()) if hasattr(params, "values") else list(params)
        for p in plist:
            if p._stype != "default" or getattr(p, "_grad_stype", "default") != "default":
                raise ConfigError("parameter %s: row_sparse parameters and gradients are not supported" % p.name)
            if p.dtype is not None and np.dtype(p.dtype) != np.float32:
                raise ConfigError("parameter %s: dtype must be float32, got %s" % (p.name, np.dtype(p.dtype).name))
        self._cdsgd = CDSGD(algorithm=algorithm, k=k, warmup_steps=warmup_steps, threshold=threshold,
                            kvstore=kvstore if kvstore is not None else "local", local_optimizer=local_optimizer,
                            local_optimizer_params=local_optimizer_params, trace=trace,
                            nonfinite=nonfinite, bucket_size=bucket_size, aggregate=aggregate,
                            pull_compression=pull_compression, resync_every=resync_every, fp32_sum=fp32_sum)
        self._cdsgd.driven_by_trainer = True
        super().__init__(params, optimizer, optimizer_params, kvstore=self._cdsgd, update_on_kvstore=not aggregate)
        # the keys are positions in gluon's order (a ParameterDict's names sorted), not collect_params'
        self._cdsgd.param_names = [p.name for p in self._params]
        check_learning_rate("the optimizer's learning_rate", self._optimizer.learning_rate)
        self._steps = 0
        self._recorder = False  # CDSGD_RECORD=DIR: x and g of every step, for the replay (recorder.py)

    # -- what the algorithm adds ------------------------------------------------------------
    @property
    def kvstore(self):
        """The CDSGD kvstore (rank, num_workers, bytes_pushed, schedule, ...)."""
        return self._cdsgd

    @property
    def algorithm(self):
        return self._cdsgd.algorithm

    @property
    def local_learning_rate(self):
        return self._cdsgd.local_learning_rate

    @property
    def steps_done(self):
        """Steps taken so far, those restored by load_states included: after a restart
        (CDSGD_RESTART > 0) a script skips that many batches."""
        return self._cdsgd.steps_done

    def step(self, batch_size, ignore_stale_grad=False):
        """gluon's step, with every parameter's round handed to the kvstore in one call."""
        if self._cdsgd.aggregate:  # the workers update: gluon's own step, through our allreduce
            self.allreduce_grads()
            self.update(batch_size, ignore_stale_grad)
            return
        self._no_amp()
        with self._cdsgd.tracer.span("step", step=self._steps):
            self._initialize(batch_size)
            pushed = [(i, p) for i, p in enumerate(self._params) if p.grad_req != "null"]
            arrays = [p._check_and_get(p._data, list) for _, p in pushed]
            # stale: backward did not write it on some device of this worker since the last step
            stale = [(i, p, data) for (i, p), data in zip(pushed, arrays) if not all(d._fresh_grad for d in data)]
            if stale and not ignore_stale_grad:  # before anything is pushed: a refused step changes nothing
                _, p, data = stale[0]
                raise UserWarning(STALE % (p.name, next(d.context for d in data if not d._fresh_grad)))
            self._record(batch_size, [p for _, p in pushed])
            self._cdsgd.pushpull([i for i, _ in pushed], [p.list_grad() for _, p in pushed],
                                 out=[p.list_data() for _, p in pushed],
                                 stale=[i for i, _, _ in stale] if ignore_stale_grad else None)
            self._cdsgd.finish_step()
            for data in arrays:  # as gluon does when the workers update: the next backward makes them fresh
                for d in data:
                    d._fresh_grad = False
        self._steps += 1

    def _record(self, batch_size, params):
        """With CDSGD_RECORD set: this step's x and g, before anything is pushed."""
        if self._recorder is False:  # (the first step: the kvstore knows its rank now)
            self._recorder = recorder.from_env(lambda: self._record_meta(params), self._cdsgd.rank)
        if self._recorder:
            self._recorder.step(self._steps, batch_size, self._optimizer.learning_rate, self.local_learning_rate,
                                [p.list_data()[0].asnumpy() for p in params],
                                [sum(g.asnumpy() for g in p.list_grad()) for p in params])

    def _record_meta(self, params):
        opt, c = self._optimizer, self._cdsgd
        return {"algorithm": c.algorithm, "k": c.k, "warmup_steps": c.warmup_steps, "threshold": c.threshold,
                "workers": c.num_workers, "pull_compression": c.pull_compression, "nonfinite": c.nonfinite,
                "optimizer": type(opt).__name__.lower(), "momentum": float(getattr(opt, "momentum", 0.0) or 0.0),
                "wd": float(opt.wd), "clip_gradient": opt.clip_gradient, "local_optimizer": c.local.name,
                "names": [p.name for p in params], "shapes": [list(p.shape) for p in params],
                "multipliers": [[p.lr_mult, p.wd_mult] for p in params]}

    def allreduce_grads(self):
        """update_on_kvstore=False: every parameter's gradient becomes the sum over all workers
        (and devices), as gluon's allreduce_grads does: S-SGD sums fp32 gradients, BIT-SGD the
        decoded 2-bit codes of gradient + residual (error feedback stays on each worker)."""
        if not self._cdsgd.aggregate:
            raise ConfigError(NO_WORKER_UPDATE % "allreduce_grads() then update() needs update_on_kvstore=False")
        self._no_amp()
        with self._cdsgd.tracer.span("allreduce", step=self._steps):
            if not self._kv_initialized:
                self._init_kvstore()
            if self._params_to_init:
                self._init_params()
            pushed = [(i, p) for i, p in enumerate(self._params) if p.grad_req != "null"]
            grads = [p.list_grad() for _, p in pushed]
            self._cdsgd.pushpull([i for i, _ in pushed], grads, out=grads)
            self._cdsgd.finish_step()
        self._steps += 1

    def update(self, batch_size, ignore_stale_grad=False):
        """update_on_kvstore=False: gluon's update on the workers, from the summed gradients."""
        if not self._cdsgd.aggregate:
            raise ConfigError(NO_WORKER_UPDATE % "allreduce_grads() then update() needs update_on_kvstore=False")
        super().update(batch_size, ignore_stale_grad)

    def _no_amp(self):
        """AMP's dynamic loss scaling (amp.init_trainer) changes the gradients' scale every few
        steps and skips overflowing steps on each worker alone: not supported, said before
        anything is pushed."""
        if getattr(self, "_amp_loss_scaler", None) is not None:
            raise ConfigError("AMP's dynamic loss scaling (amp.init_trainer) is not supported: its loss scale changes "
                              "rescale_grad every few steps and skips overflowing steps on each worker alone; train "
                              "in float32 without amp.init_trainer")

    def _initialize(self, batch_size):
        """What gluon's step does first: the kvstore and the parameters on the servers."""
        self._check_and_rescale_grad(self._scale / batch_size)
        if not self._kv_initialized:
            self._init_kvstore()
        if self._params_to_init:
            self._init_params()

    def _init_params(self):
        """gluon's, but with one broadcast for all parameters ready (so they are fused into
        buckets: those trained, and apart those with grad_req 'null'), then each trained
        parameter's gradient bound to its slice of the buckets' grad_buf."""
        ready = [p for p in self._params_to_init if not p._deferred_init]
        self._params_to_init = [p for p in self._params_to_init if p._deferred_init]
        trained = [p for p in ready if p.grad_req != "null"]
        for group in (trained, [p for p in ready if p.grad_req == "null"]):
            if group:
                self._kvstore.broadcast([self._param2idx[p.name] for p in group],
                                        [p._check_and_get(p._data, list)[0] for p in group],
                                        [p._check_and_get(p._data, list) for p in group])
        for p in trained:
            view = self._cdsgd.grad_view(self._param2idx[p.name])
            grads = p.list_grad()
            # the first device's gradient only, where the buckets live on its context (a CPU);
            # the other devices' keep their arrays and are added into grad_buf every step
            if grads[0] is not view and grads[0].context == view.context:
                data = p._check_and_get(p._data, list)
                fresh = [d._fresh_grad for d in data]  # marking resets it; gluon's stale check reads it
                grads[0].copyto(view)  # this step's gradient, already computed
                p._grad = [view] + grads[1:]
                autograd.mark_variables(data, p._grad, p.grad_req)
                for d, f in zip(data, fresh):
                    d._fresh_grad = f

    def set_learning_rate(self, lr, local_lr=None):
        """Global learning rate (on the servers too) and the local one: local_lr, or scaled
        by the same factor, so one schedule drives both."""
        check_learning_rate("lr", lr)
        if local_lr is not None:
            check_learning_rate("local_lr", local_lr)
        if self._cdsgd.aggregate:  # the workers' optimizer is the only one
            self._optimizer.set_learning_rate(lr)
            return
        if not self._kv_initialized:
            # before the first step nothing is on the servers yet: set_optimizer will carry it
            ratio = lr / self._optimizer.learning_rate if self._optimizer.learning_rate else 1.0
            self._optimizer.set_learning_rate(lr)
            params = self._cdsgd.local.params
            if local_lr is not None:
                params["learning_rate"] = local_lr
            elif "learning_rate" in params:
                params["learning_rate"] *= ratio
            return
        self._cdsgd.set_learning_rate(lr, local_lr)

    def save_states(self, fname, extra=None):
        """gluon's save_states, as one all-or-nothing checkpoint set (cdsgd_mx.wire.checkpoint):
        fname is its manifest; `extra`, a small JSON-able dict (e.g. {"epoch": 3}), is kept
        in it and returned by load_states. Raises checkpoint.SaveError (an OSError) if any node
        cannot write its file; the last complete set stays."""
        self._ready_for_checkpoint()
        self._cdsgd.save_optimizer_states(fname, dump_optimizer=True, extra=extra)

    def load_states(self, fname):
        """gluon's load_states from the last complete set of checkpoint fname: the optimizer,
        its states and the parameters' weights; returns the set's `extra` dict."""
        self._ready_for_checkpoint()
        extra = self._cdsgd.load_optimizer_states(fname)
        self._optimizer = self._cdsgd._updater.optimizer
        self._optimizer.param_dict = {i: param for i, param in enumerate(self._params)}
        return extra

    def _ready_for_checkpoint(self):
        if not self._kv_initialized:
            self._init_kvstore()
        if self._params_to_init:
            self._init_params()

    def save_trace(self):
        """Writes the chrome-trace JSON given as trace= (returns its path, or None)."""
        return self._cdsgd.save_trace()

    def wait_all(self):
        self._cdsgd.wait_all()

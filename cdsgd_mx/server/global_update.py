"""The global update on a server: W(t+1) from the workers' summed fp32 gradient, or from their
2-bit rows decoded and summed, by the global optimizer the workers sent, with one optimizer
state per parameter (slot) of a bucket and each parameter's lr_mult / wd_mult; or, where the
workers update (update_on_kvstore=False), the sum itself. docs/design.md "Semantics".

API: GlobalUpdate().set_optimizer(opt) / register(wk, slots) / set_multipliers(pairs) /
skip_next(ids) / apply_sum(wk, weight, grad) / apply_codes(pk, wk, weight, wire, n, threshold) /
states() / restore(optimizer, states); optimizer, updater.
"""
import numpy as np

from cdsgd_mx import codec


class GlobalUpdate:
    """The global optimizer over one server's buckets (server.ServerState owns one)."""

    def __init__(self):
        self.optimizer = None
        self.updater = None       # MXNet's Updater: the optimizer's state per slot id
        self.slots = {}           # weight key -> [(state id, begin, end)]: the bucket's parameters
        self.multipliers = {}     # state id -> (lr_mult, wd_mult) of its parameter
        self.skip = set()         # state ids whose next update is skipped: no worker had a fresh gradient
        self.summing = set()      # weight keys that hold the workers' summed gradient (the workers update)
        self._decoded = {}        # payload key -> the decoded sum of the workers' codes
        self._momentum = {}       # weight key -> SGD's flat momentum (per-parameter states are its views)
        self.parts = {}           # a part's weight key -> (its bucket's weight key, begin, end, the bucket's size)

    # -- configuration ------------------------------------------------------------------
    def set_optimizer(self, optimizer):
        import mxnet as mx
        self._momentum = {}
        self.optimizer = optimizer
        self.updater = mx.optimizer.get_updater(optimizer)
        self._apply_multipliers()

    def register(self, wk, slots):
        """A bucket's parameters: [(state id, begin, end, lr_mult, wd_mult)]."""
        self.slots[wk] = [(int(i), int(b), int(e)) for i, b, e, _, _ in slots]
        self.set_multipliers((i, lr, wd) for i, _, _, lr, wd in slots)

    def set_multipliers(self, triples):
        """[(state id, lr_mult, wd_mult)], from the next update on."""
        self.multipliers.update((int(i), (float(lr), float(wd))) for i, lr, wd in triples)
        self._apply_multipliers()

    def skip_next(self, ids):
        """The next update of these parameters is skipped (gluon's stale-gradient rule)."""
        self.skip.update(int(i) for i in ids)

    def _apply_multipliers(self):
        """Each parameter's lr_mult / wd_mult, by its state id (MXNet pickles the optimizer
        without gluon's param_dict, so they travel in the register command)."""
        if self.optimizer is not None:
            for i, (lr, wd) in self.multipliers.items():
                self.optimizer.lr_mult[i] = lr
                self.optimizer.wd_mult[i] = wd

    # -- checkpoints ------------------------------------------------------------------------
    def states(self):
        """The optimizer's state per slot id, as numpy (what a checkpoint saves)."""
        return {k: _to_numpy(v) for k, v in self.updater.states.items()} if self.updater else {}

    @staticmethod
    def read_states(saved):
        """states() as saved, back as NDArrays (raises on anything malformed)."""
        return {k: _to_ndarray(v) for k, v in saved.items()}

    def restore(self, optimizer, states):
        """The optimizer (None where the workers update) and its states, as read_states gives them."""
        if optimizer is not None:
            self.set_optimizer(optimizer)
        self._momentum = {}  # rebuilt from the restored states at the next update
        for k, v in states.items() if self.updater else ():
            self.updater.states[k] = v
            self.updater.states_synced[k] = True

    # -- updates ----------------------------------------------------------------------------
    def apply_sum(self, wk, weight, grad):
        """A dense round: grad is the workers' summed gradient."""
        if wk in self.summing:  # the workers update: they pull the sum
            weight[:] = grad
        else:
            self.apply_gradient(wk, weight, grad)

    def apply_codes(self, pk, wk, weight, wire, n, threshold):
        """A compressed round: wire holds every worker's row of payload key pk (2-bit codes of
        n values, then its tag)."""
        if wk in self.summing:  # the workers update: they pull the decoded sum
            weight[0:n] = self._decoded_sum(pk, n, wire, threshold, weight.context)
            weight.wait_to_read()
        elif self._plain_sgd(wk, weight, np.float32):
            # one native pass: every worker's row decoded and summed chunk by chunk in cache, and
            # SGD's step taken from it (tags skipped), bit for bit what decode_sum and MXNet's
            # own kernel give; the decoded gradient is never stored
            opt = self.optimizer
            mom = self._flat_momentum(wk, weight) if opt.momentum > 0 else None
            codec.decode_sgd(wire, weight, mom, n, threshold, self._sgd_runs(wk, n), opt.momentum,
                             opt.rescale_grad, opt.clip_gradient or None)
            self._skipped(wk, n)
        else:
            self.apply_gradient(wk, weight, self._decoded_sum(pk, n, wire, threshold, weight.context))  # waits

    @staticmethod
    def _views(arr, ranges):
        """arr (a bucket's flat weight, gradient or momentum) cut at `ranges`: made anew on every
        call (a few slices per run; a cache keyed by the array's address was suspected in a
        rare corrupted first update and removed)."""
        flat = arr.reshape((-1,))
        return [flat[b:e] for b, e in ranges]

    def _updated(self, wk, size):
        """The bucket's parameters this update moves: [(state id, begin, end)], without those a
        skip command named (their weights and states stay as they are)."""
        slots = self.slots.get(wk) or [(wk, 0, size)]
        return [s for s in slots if s[0] not in self.skip] if self.skip else slots

    def _skipped(self, wk, size):
        """The bucket's update is done: its skipped parameters are skipped only once."""
        if self.skip:
            self.skip.difference_update(i for i, _, _ in self.slots.get(wk) or [(wk, 0, size)])

    def _slot_ranges(self, wk, size):
        return [(b, e) for _, b, e in self._updated(wk, size)]

    def _runs(self, wk, size):
        """Consecutive parameters of a bucket with the same multipliers: (first state id, begin,
        end). One run per bucket unless lr_mult / wd_mult differ (or a skipped one is between)."""
        runs = []
        for i, b, e in self._updated(wk, size):
            if runs and self.multipliers.get(i) == self.multipliers.get(runs[-1][0]) and runs[-1][2] == b:
                runs[-1][2] = e
            else:
                runs.append([i, b, e])
        return runs

    def apply_gradient(self, wk, weight, grad):
        """The global optimizer on every parameter of the bucket, each with its own state and
        multipliers. SGD (with or without momentum) runs its own kernel once per run of
        parameters with the same multipliers (once per bucket when none are set), the states
        being views of one flat momentum; other optimizers go through MXNet's Updater parameter
        by parameter. MXNet 1.9.1's multi_sgd_mom_update measured 15x slower than one
        sgd_mom_update over the same values here (docs/performance-history.md, "The server's update:
        one pass per bucket")."""
        from mxnet import ndarray as nd
        opt = self.optimizer
        if not self._plain_sgd(wk, weight, grad.dtype):
            ids = [i for i, _, _ in self._updated(wk, weight.size)]
            slots = self._slot_ranges(wk, weight.size)
            if ids:
                self.updater(ids, self._views(grad, slots), self._views(weight, slots))
            weight.wait_to_read()
            self._skipped(wk, weight.size)
            return
        runs = self._sgd_runs(wk, weight.size)
        if weight.dtype == np.float32 and weight.context.device_type == "cpu":
            # one native pass, bit for bit MXNet's kernel: a server's fp32 round of many small
            # partitions spent about 0.4 ms per bucket on the kernel's invocation and its wait
            mom = self._flat_momentum(wk, weight) if opt.momentum > 0 else None
            codec.sgd(grad, weight, mom, runs, opt.momentum, opt.rescale_grad, opt.clip_gradient or None)
            self._skipped(wk, weight.size)
            return
        ranges = [(b, e) for b, e, _, _ in runs]
        weights, grads = self._views(weight, ranges), self._views(grad, ranges)
        moms = self._views(self._flat_momentum(wk, weight), ranges) if opt.momentum > 0 else None
        for r, (_, _, lr, wd) in enumerate(runs):
            kwargs = {"rescale_grad": opt.rescale_grad, "lr": lr, "wd": wd}
            if opt.clip_gradient:
                kwargs["clip_gradient"] = opt.clip_gradient
            if moms is not None:
                nd.sgd_mom_update(weights[r], grads[r], moms[r], out=weights[r], momentum=opt.momentum, **kwargs)
            else:
                nd.sgd_update(weights[r], grads[r], out=weights[r], **kwargs)
        weight.wait_to_read()
        self._skipped(wk, weight.size)

    def _plain_sgd(self, wk, weight, grad_dtype):
        """Whether the update is MXNet's own SGD kernel (with or without momentum), which the
        server runs once per run of parameters instead of through the Updater."""
        if self.optimizer is None:
            raise RuntimeError("no optimizer was set on the server (kv.set_optimizer) before key %d was pushed" % wk)
        from mxnet.optimizer import SGD
        return type(self.optimizer) is SGD and weight.dtype == grad_dtype

    def _sgd_runs(self, wk, size):
        """What SGD's own update does first for every parameter of the bucket (count the
        update: learning-rate schedules read it), then the bucket's runs with their rates:
        [(begin, end, lr, wd)]."""
        opt = self.optimizer
        opt._update_count([i for i, _, _ in self._updated(wk, size)])
        return [(b, e, opt._get_lrs([first])[0], opt._get_wds([first])[0]) for first, b, e in self._runs(wk, size)]

    def _flat_momentum(self, wk, weight, size=None):
        """One momentum array for the bucket (size: its values, if not weight's); each
        parameter's state (what checkpoints save and the Updater would use) is its view. States
        restored by load() are gathered in."""
        flat = self._momentum.get(wk)
        if flat is None and wk in self.parts:  # a part's is its stretch of its bucket's (one state per parameter)
            owner, begin, end, size = self.parts[wk]
            flat = self._flat_momentum(owner, weight, size)[begin:end]
            self._momentum[wk] = flat
        if flat is None:
            from mxnet import ndarray as nd
            size = size or weight.size
            flat = nd.zeros((size,), ctx=weight.context)
            slots = self.slots.get(wk) or [(wk, 0, size)]
            for (i, _, _), view in zip(slots, self._views(flat, self._slot_ranges(wk, size))):
                if self.updater.states.get(i) is not None:
                    view[:] = self.updater.states[i].reshape((-1,))
                self.updater.states[i] = view
                self.updater.states_synced[i] = True
            self._momentum[wk] = flat
        return flat

    def _decoded_sum(self, pk, n, wire, threshold, ctx):
        """The sum of every worker's decoded row of payload key pk (one native call, tags
        skipped), in a buffer kept per payload key."""
        from mxnet import ndarray as nd
        if pk not in self._decoded:
            self._decoded[pk] = nd.zeros((n,), ctx=ctx)
        codec.decode_sum(wire, self._decoded[pk], threshold)
        return self._decoded[pk]



def _to_numpy(state):
    """An optimizer state (NDArray, None, or nested tuples/lists of them) with numpy arrays."""
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(_to_numpy(s) for s in state)
    return state.asnumpy()


def _to_ndarray(state):
    from mxnet import ndarray as nd
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(_to_ndarray(s) for s in state)
    return nd.array(state, dtype=state.dtype)

"""The CD-SGD KVStore plugin: the paper's buffers, the compressed push, k-step correction and
the one-step delayed local update, over one native dist_sync kvstore per worker.

    kv = mx.kv.create('cdsgd')            # defaults: cdsgd on dist_sync, see CDSGD.__init__
    kv = mx.kv.create('dist_sync_odsgd')  # named algorithm, options from CDSGD_OPTIONS (doors.py)
    kv = cdsgd_mx.CDSGD(algorithm='odsgd', kvstore='local')

Parameters are fused into buckets (buckets.py): the parameters of one broadcast() call are laid
out in flat buffers and every per-step operation runs once per bucket. Buffers (the paper's
names, Fig. 4), per bucket set:
- comm_buf: g(t) handed to the communication thread, then overwritten by the pulled global
  weights W(t+1) (one buffer serves both, as in the paper);
- sml_buf:  the 2-bit codes of g(t) + residual, per bucket (MXNet's packed layout);
- loc_buf:  x(t+1), the weights the next forward/backward reads, copied into the parameters;
- residual: the error-feedback memory of the quantizer, changed only on compressed steps.
A worker may have several devices (one array per device in value and out): grad_buf gets the
sum of their gradients, and the weights are copied to every device (docs/design.md, "Devices").

One step t of pushpull(keys, grads, out=weights), along the gradient's path (each stage its
own file; docs/design.md draws it): gather into grad_buf (buckets.py) -> the non-finite policy
(guards.py) -> gluon's per-update rules (gluon_rules.py) -> the step engine, Algorithm 1's
timing (step.py) -> the local update, eq. 11
(local_update.py) -> the round on the communication thread (rounds.py) -> the backend
(backends/). This module is MXNet's KVStoreBase face and the Trainer's seams.
"""
import atexit
import os
import sys

import mxnet as mx
import numpy as np
from mxnet.kvstore import KVStoreBase

from cdsgd_mx.worker import buckets as bucketing
from cdsgd_mx.wire import auth, optimizer_spec, proofs, protocol
from cdsgd_mx.worker import backends, guards, job_checkpoint
from cdsgd_mx.cluster import heartbeat
from cdsgd_mx.worker.backends import DistBackend
from cdsgd_mx.worker.compression import Compressor
from cdsgd_mx.worker.config import (DEFAULT_RESYNC_EVERY, LAUNCH_VARIABLES, ConfigError, check_config,
                                    existing_dist_sync, part_size, parts_choice, push_window,
                                    store_name)
from cdsgd_mx.worker.fusion import CallFusion
from cdsgd_mx.worker.gluon_rules import GluonRules
from cdsgd_mx.worker.local_update import LocalUpdate
from cdsgd_mx.wire.pull_compression import down_size_of, relative_error
from cdsgd_mx.worker.part_choice import PartChoice
from cdsgd_mx.worker.rounds import RoundRunner
from cdsgd_mx.worker.schedule import COMPRESSING, DELAYED, Schedule
from cdsgd_mx.worker.step import StepEngine
from cdsgd_mx.worker.trace import Tracer

CHECKPOINT_FORMAT = job_checkpoint.checkpoint.FORMAT  # 3: all-or-nothing sets; 2: fused buckets; 1: per parameter


@KVStoreBase.register
class CDSGD(KVStoreBase):
    """KVStore running S-SGD, BIT-SGD, OD-SGD or CD-SGD on MXNet's parameter server.

    algorithm: 'ssgd' | 'bitsgd' | 'odsgd' | 'cdsgd' (default 'cdsgd')
    k: k-step correction period of cdsgd: every k-th step after warm-up pushes fp32 (default 5)
    warmup_steps: steps of plain S-SGD first (default 0 here; the Trainer documents its own)
    threshold: 2-bit quantization threshold (default 0.5, MXNet's default)
    kvstore: 'dist_sync' (the parameter server; default; MXNet's other names for it, 'dist',
        'dist_sync_device' and 'dist_device_sync', run the same), an existing store of one of
        those types (wrapped: it must not have gradient compression set), or 'local' / None
        (one process)
    local_optimizer, local_optimizer_params: the optimizer of the local update (default plain
        'sgd' with the global learning rate; eq. 11 of the paper)
    trace: path of a chrome-trace JSON file written by save_trace() (None: no tracing)
    nonfinite: what a NaN/Inf gradient does (checked every step before anything is pushed):
        'error' (default) stops with an error naming the parameter and the step; 'skip' drops
        that step on every worker (the workers vote each step, one small push and pull), as if
        its batch never came
    bucket_size: values per fused bucket (default 2^20; its fp32 rounds go in 2^16-value parts
        or whole, as the job measures faster: buckets.py, part_choice.py). The parameters of one broadcast() call are fused, and
        parameters broadcast one per call (Module, gluon.Trainer) are fused together at the
        first pushpull; every step must bring each of them once
    fuse_calls: False keeps a bucket set per one-parameter broadcast() (exact from the first
        step where some parameters are never pushed; slower: a round per parameter)
    aggregate: the servers only sum the gradients and pushpull's out gets the sum (gluon's
        update_on_kvstore=False: the workers update, e.g. after clipping the sum); 'ssgd'
        (fp32) or 'bitsgd' (2-bit codes with error feedback, decoded and summed on the servers)
    pull_compression: 'none' (default: every round pulls fp32 W) or '2bit' (2-bit both ways,
        'bitsgd' and 'cdsgd'): a compressed round pulls the 2-bit codes of A - V (A: W(t+1)
        ahead by its momentum), V the weights every worker holds, with the error kept on the
        servers (pull_compression.py); cdsgd's k-step correction pulls fp32 W and moves V by
        the codes of W - V on both sides; bitsgd re-syncs (V := W) every resync_every steps
        (default 0: never; a re-sync costs accuracy under momentum)
    fp32_sum: how the servers sum the workers' fp32 pushes (warm-up, ssgd, odsgd, cdsgd's
        corrections): 'arrival' (default: MXNet's own, in the order the pushes arrive, so with 3
        or more workers two runs of one seed differ in the last bits) or 'rank' (each worker
        pushes its own row of a row_sparse key and the servers add the rows in rank order: the
        same seed gives the same weights bit for bit; kvstore='local' has one order anyway)
    """

    def __init__(self, algorithm="cdsgd", k=5, warmup_steps=0, threshold=0.5, kvstore="dist_sync",
                 local_optimizer="sgd", local_optimizer_params=None, trace=None, nonfinite="error",
                 bucket_size=None, aggregate=False, pull_compression="none",
                 resync_every=DEFAULT_RESYNC_EVERY, fuse_calls=True, fp32_sum="arrival"):
        if bucket_size is None:
            bucket_size = bucketing.default_bucket_size(algorithm)
        check_config(algorithm, k, warmup_steps, threshold, kvstore, nonfinite, bucket_size, aggregate,
                     pull_compression, resync_every, fp32_sum)
        window = push_window()
        self.pull_compression = pull_compression
        self.fp32_sum = fp32_sum
        self.fuse_calls = bool(fuse_calls)
        self.resync_every = int(resync_every)
        self.aggregate = bool(aggregate)
        self.nonfinite = nonfinite
        self.algorithm = algorithm
        self.k = int(k)
        self.warmup_steps = int(warmup_steps)
        self.threshold = float(threshold)
        self.bucket_size = int(bucket_size)
        self._schedule = Schedule(algorithm, self.warmup_steps, self.k, pull_compression, self.resync_every)
        kvstore = store_name(kvstore)  # MXNet's 'dist', 'dist_sync_device', ... run as dist_sync
        existing = existing_dist_sync(kvstore)
        if kvstore == "dist_sync" and not existing:
            missing = [v for v in LAUNCH_VARIABLES if not os.environ.get(v)]
            if missing:  # MXNet would abort the process (Check notnull: DMLC_NUM_WORKER)
                raise ConfigError("kvstore='dist_sync' runs in a job started by a launcher, but %s %s not set: start "
                                  "it with `python -m cdsgd_mx.launch -n WORKERS -s SERVERS -- python SCRIPT`, or "
                                  "pass kvstore='local' to train in this one process"
                                  % (", ".join(missing), "is" if len(missing) == 1 else "are"))
        try:
            self._backend = backends.create(kvstore)  # dist_sync (or the store the script made), or in process
        except auth.SecretError as e:
            raise ConfigError(str(e)) from None
        if isinstance(self._backend, DistBackend):
            guards.check_servers(self._backend)  # the handshake ran in the backend, before any command
        # fp32 rounds through rows keys, summed in rank order (in process one worker's sum has one order)
        self._fp32_rows = fp32_sum == "rank" and isinstance(self._backend, DistBackend)
        # the fp32 rounds go part by part (buckets.partition) ...
        self.part_size = part_size(fp32_sum)
        # ... or whole, where the job's first fp32 steps find that faster (part_choice.py); a
        # bucket with rank-order parts has no rows key of its own, so those go part by part
        self.parts = parts_choice()
        if self._fp32_rows and self.parts == "whole":
            raise ConfigError("CDSGD_PARTS=whole needs fp32_sum='arrival': with fp32_sum='rank' a bucket's fp32 rounds "
                              "go part by part (CDSGD_PART_SIZE=0 gives buckets without parts)")
        self._nonfinite = guards.NonfinitePolicy(nonfinite, self._backend, self._names)
        self._type = "cdsgd_" + ("dist_sync" if existing else kvstore or "local")
        self._optimizer = None
        self.local = LocalUpdate(local_optimizer, local_optimizer_params)  # eq. 11, bound in set_optimizer
        self._sets = []              # BucketSets, one per broadcast() call
        self._set_of = {}            # parameter key -> its BucketSet
        self._keys = protocol.Keys(self._backend.num_servers)
        self._registered = 0         # how many sets the servers know
        self._agreed = False         # the start-up configuration check ran
        self._tally_open = False     # the key of the part choice's tally (part_choice.py)
        self._updates = 0            # steps not skipped: the global optimizer's updates so far
        self._update_of_step = 0     # the current step's update (the local rate's schedule reads it)
        self.param_names = None      # set by the Trainer, for the start-up check and messages
        self._beats = isinstance(self._backend, DistBackend)  # this store's steps are the job's (heartbeat.py)
        self.tracer = Tracer(trace, pid=self._backend.rank)
        self.rounds = RoundRunner(self._backend, self._schedule, self.threshold, self.tracer, self._names, window)
        if self.part_size is not None and not self._fp32_rows:
            self.rounds.choice = PartChoice(self.parts, self._backend, self._backend.rank, self.num_workers)
        self.engine = StepEngine(self.rounds, self.local, self.tracer, self.aggregate)  # Algorithm 1's timing
        self.fusion = CallFusion(self)  # one-parameter calls (Module, gluon.Trainer) collected into buckets
        self.rules = GluonRules(self._backend, self.local, self._names, self.algorithm in DELAYED, self.wait_all)
        atexit.register(self._at_exit)  # stop the communication thread before MXNet shuts down (once it exists)

    # ---- KVStoreBase API -------------------------------------------------------------------
    @property
    def type(self):
        return self._type

    @property
    def rank(self):
        return self._backend.rank

    @property
    def schedule(self):
        """Which steps are compressed or delayed (schedule.py); benchmarks may set another."""
        return self._schedule

    @schedule.setter
    def schedule(self, schedule):
        self._schedule = self.rounds.schedule = schedule

    @property
    def bytes_pushed(self):
        """All pushes of this worker since creation."""
        return self.rounds.bytes_pushed

    @property
    def bytes_by_step(self):
        """Step -> bytes pushed by this worker at that step."""
        return self.rounds.bytes_by_step

    @property
    def resent(self):
        """Rounds sent again after a server dropped them (a push from outside the job)."""
        return self.rounds.resent

    @property
    def bucket_sets(self):
        """The BucketSets, one per broadcast() call, in order (read-only: for tests and tools)."""
        return tuple(self._sets)

    @property
    def backend(self):
        """Where pushes and pulls go (backends.Backend): for tests and tools."""
        return self._backend

    @property
    def driven_by_trainer(self):
        """The Trainer calls finish_step once per step (else each pushpull finishes its own)."""
        return self.engine.driven_by_trainer

    @driven_by_trainer.setter
    def driven_by_trainer(self, value):
        self.engine.driven_by_trainer = value

    @property
    def skipped_steps(self):
        """nonfinite='skip': the steps (pushpull calls) dropped on every worker."""
        return self._nonfinite.skipped_steps

    @property
    def num_workers(self):
        return self._backend.num_workers

    @staticmethod
    def is_capable(capability):
        """'optimizer': yes (the global optimizer runs on the servers); anything else raises
        ValueError, as MXNet's own stores do."""
        if capability.lower() == KVStoreBase.OPTIMIZER:
            return True
        raise ValueError("Unknown capability: {}".format(capability))

    def set_optimizer(self, optimizer):
        """The global optimizer (runs on the servers); also builds the local optimizer with
        the same rescale_grad (gluon sets it to 1/batch_size before calling this)."""
        self._optimizer = optimizer
        try:
            self._backend.set_optimizer(optimizer)
        except optimizer_spec.SpecError as e:
            raise ConfigError(str(e)) from None
        self.local.bind(optimizer)
        self.rules.bind(optimizer)
        for bset in self._sets[:self._registered]:
            self.local.set_multipliers(bset)

    def broadcast(self, key, value, out, priority=0):
        """Initializes parameters on the servers from rank 0's values and pulls them to out.
        key, value, out: one parameter, or lists of them: the parameters of one call are fused
        into buckets (the Trainer hands over all its parameters at once). A parameter's out may
        be a list, one array per device of this worker: each gets W(0)."""
        keys, values, outs = _as_lists(key, value, out)
        self.fusion.broadcast(keys, outs)
        values = [v[0] for v in values]  # the devices start from the servers' W(0) anyway
        shapes = {}
        for k, v in zip(keys, values):
            if v.dtype != np.float32:
                raise TypeError("parameter %s: only float32 parameters are supported, got %s" % (k, np.dtype(v.dtype).name))
            if v.stype != "default":
                raise TypeError("parameter %s: only dense (default stype) parameters are supported, got %s" % (k, v.stype))
            if k in self._set_of or k in shapes:
                raise ValueError("parameter %s was already initialized" % k)
            shapes[k] = tuple(v.shape)
        plan = bucketing.plan([(k, int(np.prod(shapes[k]))) for k in keys], self.bucket_size, self.num_workers,
                              self._backend.num_servers, self._keys,
                              first_state=len(self._slots()) + self.fusion.abandoned, fp32_rows=self._fp32_rows,
                              part_size=self.part_size)
        # the buffers live on the first device's context (its gradients are then bound to
        # grad_buf); on a GPU comm_buf, the proofs and the wire stay on the host and the
        # codec runs on the device (device-resident buckets, buckets.py; CDSGD_DEVICE_PATH=1
        # takes that path on a CPU context too)
        first = outs[0][0].context
        device = first if first.device_type != "cpu" or os.environ.get("CDSGD_DEVICE_PATH") == "1" else None
        pull = self.pull_compression == "2bit"
        for b in plan if pull else ():  # the codes of W - V come from a key of their own, on the bucket's server
            b.down_key = self._keys.on(b.server)
        bset = bucketing.BucketSet(plan, shapes, dict(zip(keys, outs)), self.algorithm in DELAYED,
                                   region=self._backend.region, ctx=first if first.device_type == "cpu" else mx.cpu(),
                                   device=device, pull=pull)
        if self.algorithm in COMPRESSING:  # the quantizer with its residual, where the gradients live
            bset.compressor = Compressor(plan, bset.size, self.threshold, device=device)
        # MKL-DNN may keep a parameter in a blocked layout that cannot be sliced: go through
        # numpy copies; only rank 0's values reach the servers (MXNet's init)
        flat = np.empty(bset.size, np.float32)
        for k, v in zip(keys, values):
            data = v.asnumpy().reshape(-1)
            for slot in bset.slots:
                if slot.key == k:
                    flat[slot.offset:slot.offset + slot.size] = data[slot.begin:slot.end]
        parts = [p for b in plan for p in b.parts]  # (their stored weights are the server's to fill)
        self._backend.init([b.weight_key for b in plan] + [p.weight_key for p in parts],
                           [mx.nd.array(flat[b.offset:b.offset + b.size]) for b in plan] +
                           [mx.nd.zeros((p.size,)) for p in parts])
        if self.algorithm in COMPRESSING:
            self._backend.init_payloads(plan, pull)
        if pull:
            self._backend.init([b.down_key for b in plan], [mx.nd.zeros((down_size_of(b),)) for b in plan])
        for b in plan:
            self._backend.pull(b.weight_key, b.comm_wire)
        bset.scatter("comm")  # W(0) stays in comm_buf: a delayed first step starts from it
        for i, b in enumerate(plan if pull else ()):
            bset.copy.start(i, b.comm)  # V = W(0), as on the servers
        for devices in outs:
            for o in devices:
                o.wait_to_read()
        self._sets.append(bset)
        for k in keys:
            self._set_of[k] = bset

    def grad_view(self, key):
        """The slice of its bucket set's grad_buf that parameter `key`'s gradient on the first
        device can be bound to (autograd then writes there and nothing is copied)."""
        return self._set_of[key].grad_views[key]

    def pushpull(self, key, value, out=None, priority=0, stale=None):
        """One step of the parameters `key` (one or a list). A bucket set steps once every one of
        its parameters has come in this step, in one call or in several (Module and gluon.Trainer
        hand one parameter per call: fusion.py); a call that brings a parameter already brought
        in this step begins the next one. A key's value and out
        may be lists, one array per device of this worker: the gradients are summed into one
        push (as MXNet's kvstore reduces locally) and every device gets the new weights.
        stale: None, or the keys whose gradient backward did not write on this worker since
        the last step (gluon's ignore_stale_grad=True; every worker passes a list at the same
        steps): this worker's gradient of those contributes nothing, and a parameter no worker
        has a fresh gradient for is not updated at all (gluon_rules.GluonRules.held)."""
        if out is None:  # MXNet's meaning: the result goes into value (gluon's update_on_kvstore=False)
            if self._optimizer is None and not self._agreed:
                self._sum_only()
            if not self.aggregate:
                raise ValueError("pushpull needs out= (the parameters' weights): the optimizer runs on the servers")
            out = value
        keys, grads, outs = _as_lists(key, value, out)
        stale = None if stale is None else set(stale)
        if self._optimizer is None and not self.aggregate:
            raise RuntimeError("set_optimizer() must be called before pushpull()")
        for k in keys:
            if k not in self._set_of:
                raise KeyError("parameter %s was not initialized with broadcast()" % k)
        self._fuse_fresh()
        self._ensure_registered()
        step, begins = self.engine.begin(keys)  # the training step: counted once, however many calls bring it
        if self._beats:
            heartbeat.set_phase("train")
        if self._beats and begins:  # steps begun: the watchdog compares them across workers
            heartbeat.set_step(self.engine.steps, self.rank)
        if begins:
            replanned = self.fusion.end_of_step(step)  # sets the step before left waiting for parameters
            if replanned:
                self._ensure_registered()
                self._run(replanned, step - 1, None, self._update_of_step)
            self._update_of_step = self._updates  # one update per step, not per call
            self._updates += 1
        sets = []  # (after end_of_step: it may have planned the keys' sets again)
        for k in keys:
            if self._set_of[k] not in sets:
                sets.append(self._set_of[k])
        grads = dict(zip(keys, grads))
        for bset in sets:
            bset.outs.update((k, o) for k, o in zip(keys, outs) if k in bset.outs)
            bset.gather({k: grads[k] for k in bset.keys if k in grads})
            if stale:
                bset.zero_grad([k for k in bset.keys if k in stale])
        complete = self.fusion.collect(sets, keys)  # a set steps once all its parameters are in
        if complete and len(complete) != len(self._sets) and self.nonfinite == "skip":
            raise ConfigError("nonfinite='skip' drops a whole step on every worker, so it needs the step's parameters "
                              "in one bucket set; this step's are in several (pushed by several calls): use "
                              "nonfinite='error' there")
        if complete:
            self._ensure_registered()  # a first step's set planned again without parameters never pushed
            self._run(complete, step, stale, self._update_of_step)

    def _run(self, sets, step, stale, update):
        """Step `step` of the bucket sets whose gradients are all gathered: the non-finite
        policy, gluon's rules, then Algorithm 1's step."""
        if self._nonfinite.apply(sets, step, self.tracer):
            self._updates -= 1  # a skipped step is no update (its sets are the whole step: checked above)
            return
        held = {}
        if not self.aggregate:  # (aggregate: the workers' own optimizer does all this)
            self.rules.follow(sets, step, update)
            held = self.rules.held(self._sets, sets, stale, step) if stale is not None else {}
        for bset in sets:
            self.engine.step(bset, held.get(bset, ()))

    # ---- checkpoints (one all-or-nothing set across the nodes: job_checkpoint.py) -------------
    def save_optimizer_states(self, fname, dump_optimizer=False, extra=None):
        """Everything the algorithm depends on, at a step boundary, as one checkpoint set (see
        job_checkpoint.save); every worker calls it at the same step."""
        job_checkpoint.save(self, fname, extra)

    def load_optimizer_states(self, fname):
        """Restores the last complete set of checkpoint fname and returns its `extra` (see
        job_checkpoint.load)."""
        return job_checkpoint.load(self, fname)

    @property
    def _updater(self):
        """gluon.Trainer.load_states reads the optimizer back from here."""
        class _View:
            optimizer = self._optimizer
        return _View()

    # ---- the algorithm ---------------------------------------------------------------------
    def _slots(self):
        return [s for bset in self._sets for s in bset.slots]

    def _names(self, keys):
        names = self.param_names
        return ", ".join(str(names[k]) if names and isinstance(k, int) and 0 <= k < len(names) else str(k)
                         for k in keys)

    def _settings(self):
        """What every worker of the job must agree on (guards.check_agreement)."""
        return {"algorithm": self.algorithm, "k": self.k, "warmup_steps": self.warmup_steps,
                "threshold": self.threshold, "nonfinite": self.nonfinite, "bucket_size": self.bucket_size,
                "aggregate": self.aggregate, "pull_compression": self.pull_compression,
                "resync_every": self.resync_every, "fuse_calls": self.fuse_calls, "fp32_sum": self.fp32_sum,
                "parts": self.parts}

    def _sum_only(self):
        """The first pushpull came without out= and no optimizer was set: the script's workers
        update (gluon.Trainer(..., update_on_kvstore=False) given this store), so the servers
        only sum and each call's gradients get the sum, as MXNet's own store does."""
        try:
            check_config(self.algorithm, self.k, self.warmup_steps, self.threshold, None, self.nonfinite,
                         self.bucket_size, True, self.pull_compression, self.resync_every, self.fp32_sum)
        except ConfigError as e:
            raise ConfigError("pushpull without out= (gluon's update_on_kvstore=False: the workers update): %s" % e) \
                from None
        self.aggregate = self.engine.aggregate = True

    def _fuse_fresh(self):
        """Before the first step (or a checkpoint's load): parameters broadcast one per call
        (Module, gluon.Trainer) become one bucket set (fusion.py)."""
        if not self._agreed and self.fuse_calls:
            self.fusion.fuse_fresh()

    def _ensure_registered(self):
        """Before the first step of new bucket sets: the start-up agreement check (once), then
        tell the servers which parameters each bucket holds (and, when compressing, which
        payload key decodes into which weight key)."""
        if not self._agreed:
            guards.check_agreement(self._backend, self._settings(), self._sets, self.param_names)
            self._agreed = True
        for bset in self._sets[self._registered:]:
            if not self.aggregate:
                self.rules.set_multipliers(bset, self.engine.steps)
        new = [b for bset in self._sets[self._registered:] for b in bset.buckets]
        for b in new if self._fp32_rows else ():  # after the agreement check: every worker takes the same keys
            for u in b.parts or [b]:  # (a bucket with parts pushes its fp32 rounds only part by part)
                u.rows_key = self._keys.on(b.server)
        if new:
            self._backend.register(new, self.threshold, self.algorithm in COMPRESSING, self.aggregate)
        choice = self.rounds.choice
        if choice is not None and choice.decided is None and not self._tally_open and any(b.parts for b in new):
            self._backend.open_tally(protocol.PARTS_KEY, choice.width)  # (every worker registers the same sets at the same step)
            self._tally_open = True
        self._registered = len(self._sets)

    # ---- helpers for the Trainer -------------------------------------------------------------
    def finish_step(self):
        """End of a Trainer step: let the communication thread finish this step's rounds; wait
        only if some were synchronous (their rounds must be ready before the next forward)."""
        self.engine.finish_step()

    @property
    def part_choice_pending(self):
        """Whether the job's fp32 rounds are still trying parts and whole buckets (part_choice.py):
        it has buckets with parts, and their trials are not over."""
        return self._tally_open and self.rounds.choice.decided is None

    @property
    def fp32_way(self):
        """How the fp32 rounds of buckets with parts go now: 'parts', 'whole buckets', 'trying
        both' (part_choice.py); None where no bucket has parts (bench.comm reports it)."""
        choice = self.rounds.choice
        if choice is None or not any(b.parts for bset in self._sets for b in bset.buckets):
            return None
        return {None: "trying both", False: "parts", True: "whole buckets"}[choice.decided]

    @property
    def steps_done(self):
        """Training steps begun (skipped ones included; one per step whether it came in one
        pushpull call or one per parameter), counting those a checkpoint restored: where a
        resumed script's data loop goes on."""
        return self.engine.steps

    def push_bytes_of_step(self, t):
        """Bytes this worker pushes at step t by the schedule and the buckets (what a round
        counts into bytes_by_step once the step's rounds have run)."""
        return self.rounds.bytes_of_step(self._sets, t)

    def wait_all(self):
        """Wait for every round in flight (e.g. before reading global weights or saving)."""
        self.engine.wait_all(self._sets)

    def barrier(self):
        """Wait for every round in flight, then until every worker gets here (e.g. to start
        a timed round together: a worker still pulling the last round would count as its cost)."""
        self.wait_all()
        self._backend.barrier()

    def set_learning_rate(self, lr, local_lr=None):
        """Global learning rate on the servers (after rounds in flight finish) and the local
        one: local_lr, or scaled by the same factor as the global one."""
        self.wait_all()
        old = self._optimizer.learning_rate
        self._optimizer.set_learning_rate(lr)
        self._backend.set_learning_rate(lr)
        self.rules.rate = lr
        if self.local.bound:
            if local_lr is None:
                local_lr = self.local.learning_rate * (lr / old if old else 1.0)
            self.local.set_learning_rate(local_lr)

    @property
    def local_learning_rate(self):
        return self.local.learning_rate

    @property
    def pull_error(self):
        """With 2-bit pulls: ||W - V|| / ||W|| over every bucket after its last compressed pull
        (the error the servers keep, relative to the weights); None without."""
        if self.pull_compression == "none" or not self._sets:
            return None
        return relative_error(np.concatenate([bset.copy.norms for bset in self._sets]))

    def global_weights(self, key):
        """W: the current global weights of parameter `key`, pulled from the servers."""
        self.wait_all()
        bset = self._set_of[key]
        held = [b for b in bset.buckets if any(s.key == key for s in b.slots)]
        wires = [mx.nd.zeros((b.size + bset.region,)) for b in held]  # a pull fills the whole stored value
        for b, wire in zip(held, wires):
            self._backend.pull(b.weight_key, wire)
            proofs.unseal(b)  # MXNet pulls into the array pushed last (comm.h): comm_buf's proof is gone
        whole = np.zeros(bset.size, np.float32)
        for b, wire in zip(held, wires):
            whole[b.offset:b.offset + b.size] = wire.asnumpy()[:b.size]
        for i, b in enumerate(bset.buckets if bset.copy else ()):
            if b in held:  # that pull wrote W over comm_buf, where the workers' V must stay (2-bit pulls)
                bset.copy.to_comm(i, b)
        out = np.empty(int(np.prod(bset.shapes[key])), np.float32)
        for b in held:
            for s in b.slots:
                if s.key == key:
                    out[s.begin:s.end] = whole[s.offset:s.offset + s.size]
        return mx.nd.array(out.reshape(bset.shapes[key]))

    def save_trace(self):
        return self.tracer.save()

    def _at_exit(self):
        """Interpreter exit: close, then pass MXNet's exit barrier of the workers here, while
        the heartbeat still runs (MXNet's own, in the store's destructor, comes after the
        interpreter has stopped every other thread: a node stopped there would look like any
        other exiting node)."""
        if not self._beats:
            self.close()
            return
        heartbeat.set_phase("exit")  # its steps are final: the watchdog compares them with the others'
        comm = self.engine.comm
        self.close()
        if comm is not None and comm._failed is not None:  # a round failed since the last step: say so, fail
            sys.stderr.write("cdsgd_mx: worker %s: the rounds left at exit failed: %s: %s; exiting without the "
                             "kvstore barrier\n" % (self.rank, type(comm._failed.error).__name__, comm._failed.error))
            sys.stderr.flush()
            os._exit(1)
        with heartbeat.waiting("the exit barrier (every worker ends its training)"):
            self._backend.kv._barrier()

    def close(self):
        """Finish rounds in flight and stop the communication thread (also run at exit)."""
        self.engine.close()


def _devices(arrays, name):
    """A key's arrays, one per device of this worker: an array or a non-empty list of them."""
    if isinstance(arrays, (list, tuple)):
        if not arrays:
            raise ValueError("%s: no array given (one per device expected)" % name)
        return arrays
    return [arrays]


def _as_lists(key, value, out):
    """(keys, values, outs) for one key or a list of keys; each value and out a list with one
    array per device of this worker (MXNet's convention: a list per key)."""
    if isinstance(key, (list, tuple)):
        if len(value) != len(key) or len(out) != len(key):
            raise ValueError("value and out must hold one entry per key (%d keys)" % len(key))
        return list(key), [_devices(v, "value") for v in value], [_devices(o, "out") for o in out]
    return [key], [_devices(value, "value")], [_devices(out, "out")]

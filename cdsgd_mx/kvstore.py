"""The CD-SGD KVStore plugin: the paper's buffers, the compressed push, k-step correction and
the one-step delayed local update, over one native dist_sync kvstore per worker.

    kv = mx.kv.create('cdsgd')            # defaults: cdsgd on dist_sync, see CDSGD.__init__
    kv = cdsgd_mx.CDSGD(algorithm='odsgd', kvstore='local')

Per parameter (names from the paper, Fig. 4):
- comm_buf: the gradient g(t) handed to the communication thread, then overwritten by the
  pulled global weight W(t+1) (one buffer serves both, as in the paper);
- sml_buf:  the 2-bit codes of g(t) + residual, per chunk (MXNet's packed layout);
- loc_buf:  the weights the next forward/backward reads: the parameter's own data array;
- residual: the error-feedback memory of the quantizer, changed only on compressed steps.

One step t of pushpull(key, grad, out=loc_buf) (Algorithm 1, per parameter):
  synchronous steps (warm-up before n-1, ssgd, bitsgd): push g(t) (fp32 or codes), pull W(t+1)
      into loc_buf; the call returns once the pull is issued (the engine orders the next
      forward after it).
  delayed steps (odsgd/cdsgd from step n-1 on):
      1. wait until W(t), the previous round's pull, is issued into comm_buf;
      2. loc_buf = W(t), then the local optimizer steps it with g(t)  -> x(t+1)   (eq. 11)
      3. comm_buf = g(t); hand round t (quantize?, push, pull W(t+1) into comm_buf) to the
         communication thread and return: forward/backward of t+1 runs meanwhile.
"""
import atexit
import json
import os
import zlib

import mxnet as mx
import numpy as np
from mxnet.kvstore import KVStoreBase

from . import codec, protocol
from .backends import DistBackend, LocalBackend
from .comm import CommError, Communicator
from .schedule import ALGORITHMS, COMPRESSING, Schedule
from .trace import Tracer

KVSTORE_TYPES = ("dist_sync", "local")


class ConfigError(ValueError):
    """A bad argument: the message names it and the allowed values."""


NONFINITE_POLICIES = ("error", "skip")


def check_config(algorithm, k, warmup_steps, threshold, kvstore, nonfinite="error"):
    if algorithm not in ALGORITHMS:
        raise ConfigError("algorithm must be one of %s, got %r" % (", ".join(ALGORITHMS), algorithm))
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError("k must be an integer >= 1, got %r" % (k,))
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
        raise ConfigError("warmup_steps must be an integer >= 0, got %r" % (warmup_steps,))
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) \
            or not np.isfinite(threshold) or threshold <= 0:
        raise ConfigError("threshold must be a finite number > 0, got %r" % (threshold,))
    if kvstore is not None and kvstore not in KVSTORE_TYPES:
        raise ConfigError("kvstore must be one of %s or None, got %r" % (", ".join(KVSTORE_TYPES), kvstore))
    if nonfinite not in NONFINITE_POLICIES:
        raise ConfigError("nonfinite must be one of %s, got %r" % (", ".join(NONFINITE_POLICIES), nonfinite))


# ---- per-parameter state -------------------------------------------------------------------

class ParamState:
    def __init__(self, index, shape, chunks, compressing):
        self.index = index
        self.shape = shape
        self.size = int(np.prod(shape))
        self.chunks = chunks
        self.t = 0                                   # this parameter's step counter
        self.comm_buf = mx.nd.zeros(shape)
        self.residual = mx.nd.zeros((self.size,)) if compressing else None
        self.sml_buf = [np.zeros(c.words, np.uint32) for c in chunks] if compressing else None
        self.wire = [np.zeros(c.words, np.float32) for c in chunks] if compressing else None
        self.in_flight = None                        # the round whose pull brings W(t)
        self.loc_buf = None                          # the parameter's data (set by broadcast)


def _flat(arr):
    return arr.reshape((-1,))


@KVStoreBase.register
class CDSGD(KVStoreBase):
    """KVStore running S-SGD, BIT-SGD, OD-SGD or CD-SGD on MXNet's parameter server.

    algorithm: 'ssgd' | 'bitsgd' | 'odsgd' | 'cdsgd' (default 'cdsgd')
    k: k-step correction period of cdsgd: every k-th step after warm-up pushes fp32 (default 5)
    warmup_steps: steps of plain S-SGD first (default 0 here; the Trainer documents its own)
    threshold: 2-bit quantization threshold (default 0.5, MXNet's default)
    kvstore: 'dist_sync' (the parameter server; default) or 'local' / None (one process)
    local_optimizer, local_optimizer_params: the optimizer of the local update (default plain
        'sgd' with the global learning rate; eq. 11 of the paper)
    trace: path of a chrome-trace JSON file written by save_trace() (None: no tracing)
    nonfinite: what a NaN/Inf gradient does (checked by check_gradients, which the Trainer
        calls every step, before anything is pushed): 'error' (default) stops with an error
        naming the parameter and the step; 'skip' drops that step on every worker (the
        workers vote each step, one small push and pull), as if its batch never came
    """

    def __init__(self, algorithm="cdsgd", k=5, warmup_steps=0, threshold=0.5, kvstore="dist_sync",
                 local_optimizer="sgd", local_optimizer_params=None, trace=None, nonfinite="error"):
        check_config(algorithm, k, warmup_steps, threshold, kvstore, nonfinite)
        self.nonfinite = nonfinite
        self.skipped_steps = []  # nonfinite='skip': the Trainer steps dropped on every worker
        self._vote_open = False
        self.algorithm = algorithm
        self.k = int(k)
        self.warmup_steps = int(warmup_steps)
        self.threshold = float(threshold)
        self.schedule = Schedule(algorithm, self.warmup_steps, self.k)
        self._backend = DistBackend(kvstore) if kvstore == "dist_sync" else LocalBackend()
        self._type = "cdsgd_" + (kvstore or "local")
        self._local_name = local_optimizer
        self._local_params = dict(local_optimizer_params or {})
        self._optimizer = None
        self._local_optimizer = None
        self._local_updater = None
        self._params = {}
        self._planner_sizes = []
        self._registered = set()     # weight keys whose payload key the servers know
        self._agreed = False         # the start-up configuration check ran
        self.param_names = None      # set by the Trainer, for the start-up check
        self._comm = Communicator()
        atexit.register(self.close)  # stop the communication thread before MXNet shuts down
        self.tracer = Tracer(trace, pid=self._backend.rank)
        self.bytes_pushed = 0        # all pushes of this worker since creation
        self.bytes_by_step = {}      # step -> bytes pushed by this worker at that step
        self.driven_by_trainer = False
        self._sync_copies = []       # synchronous rounds of this step: loc_buf = comm_buf after the pull

    # ---- KVStoreBase API -------------------------------------------------------------------
    @property
    def type(self):
        return self._type

    @property
    def rank(self):
        return self._backend.rank

    @property
    def num_workers(self):
        return self._backend.num_workers

    @staticmethod
    def is_capable(capability):
        return capability.lower() == KVStoreBase.OPTIMIZER

    def set_optimizer(self, optimizer):
        """The global optimizer (runs on the servers); also builds the local optimizer with
        the same rescale_grad (gluon sets it to 1/batch_size before calling this)."""
        self._optimizer = optimizer
        self._backend.set_optimizer(optimizer)
        params = {"learning_rate": optimizer.learning_rate}
        params.update(self._local_params)
        params["rescale_grad"] = optimizer.rescale_grad
        self._local_optimizer = mx.optimizer.create(self._local_name, **params)
        self._local_updater = mx.optimizer.get_updater(self._local_optimizer)

    def broadcast(self, key, value, out, priority=0):
        """Initializes the parameter on the servers from rank 0's value and pulls it to out."""
        value, out = _single(value, "value"), _single(out, "out")
        if value.dtype != np.float32:
            raise TypeError("parameter %s: only float32 parameters are supported, got %s" % (key, np.dtype(value.dtype).name))
        if value.stype != "default":
            raise TypeError("parameter %s: only dense (default stype) parameters are supported, got %s" % (key, value.stype))
        if key in self._params:
            raise ValueError("parameter %s was already initialized" % key)
        self._planner_sizes.append(int(np.prod(value.shape)))
        layout = protocol.plan(self._planner_sizes, self.num_workers, self._backend.num_servers)
        chunks = layout.of_param(len(self._planner_sizes) - 1)
        state = ParamState(key, value.shape, chunks, self.algorithm in COMPRESSING)
        self._params[key] = state
        # MKL-DNN may keep a parameter in a blocked layout that cannot be sliced: go through
        # plain arrays (comm_buf, a numpy copy) and let copyto convert
        flat = mx.nd.array(value.asnumpy().reshape(-1))
        for c in chunks:
            self._backend.init(c.weight_key, flat[c.begin:c.end])
            if self.algorithm in COMPRESSING:
                self._backend.init_payload(c.payload_key, c.words)
        comm_flat = _flat(state.comm_buf)
        for c in chunks:
            self._backend.pull(c.weight_key, comm_flat[c.begin:c.end])
        state.comm_buf.copyto(out)
        out.wait_to_read()
        state.loc_buf = out  # the parameter's data: saved and restored by checkpoints

    def pushpull(self, key, value, out=None, priority=0):
        grad = _single(value, "value")
        if out is None:
            raise ValueError("pushpull needs out= (the parameter's weights): the optimizer runs on the servers")
        loc_buf = _single(out, "out")
        state = self._params.get(key)
        if state is None:
            raise KeyError("parameter %s was not initialized with broadcast()" % key)
        if self._optimizer is None:
            raise RuntimeError("set_optimizer() must be called before pushpull()")
        self._ensure_registered()
        t = state.t
        state.t += 1
        if self.schedule.delayed(t):
            self._delayed_step(state, t, grad, loc_buf)
        else:
            self._sync_step(state, t, grad, loc_buf)

    # ---- checkpoints ---------------------------------------------------------------------------
    def save_optimizer_states(self, fname, dump_optimizer=False):
        """Everything the algorithm depends on, at a step boundary: on each server its global
        optimizer and states (FNAME.server<rank>), on each worker the global weights, step
        counters, residuals, comm_buf and the local optimizer (FNAME.worker<rank>), and the
        configuration (FNAME, written by rank 0)."""
        import pickle
        self.wait_all()
        self._ensure_registered()
        params = {}
        for key, st in self._params.items():
            params[key] = {"t": st.t, "shape": st.shape, "comm_buf": st.comm_buf.asnumpy(),
                           "loc_buf": st.loc_buf.asnumpy(),
                           "in_flight": st.in_flight is not None,
                           "residual": None if st.residual is None else st.residual.asnumpy(),
                           "global": self.global_weights(key).asnumpy()}
        self._backend.command({"op": "save", "path": os.path.abspath(fname)})
        worker = {"config": self._config(), "params": params,
                  "local": self._local_updater.get_states(dump_optimizer=True) if self._local_updater else None}
        _write_atomic("%s.worker%d" % (fname, self.rank), pickle.dumps(worker))
        if self.rank == 0:
            _write_atomic(fname, json.dumps(self._config(), indent=1).encode())

    def load_optimizer_states(self, fname):
        """Restores what save_optimizer_states wrote; the job must have the same algorithm,
        k, warm-up, threshold, numbers of workers and servers, and parameters."""
        import pickle
        path = "%s.worker%d" % (fname, self.rank)
        try:
            with open(fname) as f:
                config = json.load(f)
            with open(path, "rb") as f:
                worker = pickle.load(f)
            params = worker["params"]
        except (OSError, EOFError, ValueError, KeyError, pickle.UnpicklingError) as e:
            raise ValueError("checkpoint %s (or %s) is missing, corrupted or truncated: %s" % (fname, path, e)) from e
        mismatch = {k: (v, config.get(k)) for k, v in self._config().items() if config.get(k) != v}
        if mismatch:
            raise ValueError("checkpoint %s was written by another configuration: %s" % (
                fname, ", ".join("%s=%r here, %r there" % (k, a, b) for k, (a, b) in sorted(mismatch.items()))))
        if sorted(params) != sorted(self._params) or any(
                tuple(params[k]["shape"]) != tuple(self._params[k].shape) for k in params):
            raise ValueError("checkpoint %s holds other parameters (names or shapes differ)" % fname)
        self.wait_all()
        self._ensure_registered()
        self._backend.command({"op": "load", "path": os.path.abspath(fname)})
        weights = {}
        for key, saved in params.items():
            flat = saved["global"].reshape(-1)
            for c in self._params[key].chunks:
                weights[c.weight_key] = mx.nd.array(flat[c.begin:c.end])
        self._backend.assign(weights)
        for key, saved in params.items():
            st = self._params[key]
            st.t = saved["t"]
            st.comm_buf[:] = saved["comm_buf"]
            mx.nd.array(saved["loc_buf"]).copyto(st.loc_buf)  # this worker's x(t), may differ from W
            if saved["residual"] is not None:
                st.residual[:] = saved["residual"]
            st.in_flight = self._comm.flush() if saved["in_flight"] else None  # W(t) sits in comm_buf
        if worker["local"] is not None and self._local_updater is not None:
            self._local_updater.set_states(worker["local"])
            self._local_optimizer = self._local_updater.optimizer
        if self._optimizer is not None:
            self._optimizer = self._backend_optimizer(fname)
        mx.nd.waitall()

    def _backend_optimizer(self, fname):
        """The global optimizer as restored (gluon reads it back through _updater)."""
        import pickle
        if isinstance(self._backend, LocalBackend):
            return self._backend.server.optimizer
        try:
            with open("%s.server0" % fname, "rb") as f:
                return pickle.load(f)["optimizer"]
        except OSError:
            return self._optimizer  # servers on other machines: the same settings were sent

    @property
    def _updater(self):
        """gluon.Trainer.load_states reads the optimizer back from here."""
        class _View:
            optimizer = self._optimizer
        return _View()

    def _config(self):
        return {"algorithm": self.algorithm, "k": self.k, "warmup_steps": self.warmup_steps,
                "threshold": self.threshold, "num_workers": self.num_workers,
                "num_servers": self._backend.num_servers, "format": "cdsgd-mx checkpoint 1"}

    # ---- the algorithm ---------------------------------------------------------------------
    def _check_agreement(self):
        """Before any training: every worker must run the same algorithm, k, warm-up,
        threshold and parameters; a mismatch would silently train something else."""
        shapes = json.dumps([list(self._params[k].shape) for k in sorted(self._params)])
        names = json.dumps(list(self.param_names or []))
        fields = ["algorithm", "k", "warmup_steps", "threshold", "nonfinite", "number of parameters",
                  "parameter shapes", "parameter names"]
        mine = [ALGORITHMS.index(self.algorithm), self.k, self.warmup_steps, np.float32(self.threshold),
                NONFINITE_POLICIES.index(self.nonfinite),
                len(self._params), zlib.crc32(shapes.encode()) & 0xFFFF, zlib.crc32(names.encode()) & 0xFFFF]
        rows = self._backend.gather_rows(protocol.CONFIG_KEY, np.array(mine, np.float32))
        problems = []
        for i, field in enumerate(fields):
            values = rows[:, i]
            if np.any(values != values[0]):
                shown = [ALGORITHMS[int(v)] if i == 0 else NONFINITE_POLICIES[int(v)] if i == 4
                         else float(v) if i == 3 else int(v) for v in values]
                if i >= 6:
                    problems.append("%s differ" % field)
                else:
                    problems.append("%s is %s" % (field, ", ".join("%r on rank %d" % (v, r) for r, v in enumerate(shown))))
        if problems:
            raise ConfigError("workers disagree on the configuration: " + "; ".join(problems))

    def check_gradients(self, grads, step, names=None):
        """Apply the non-finite policy to this step's gradients ({key: grad}) before anything
        is pushed or any weight moves. Returns True when the step must be skipped (policy
        'skip': some worker's gradient is not finite; every worker gets the same answer).
        With 'skip' every worker must call it every step (the Trainer does): it is a vote."""
        bad = {k: codec.count_nonfinite(g) for k, g in grads.items()}
        bad = {k: n for k, n in bad.items() if n}
        first = None
        if bad:
            k, n = next(iter(bad.items()))
            first = "parameter %s at step %d (%d values)" % (names[k] if names else k, step, n)
        if self.nonfinite == "error":
            if first:
                raise FloatingPointError("non-finite gradient in " + first)
            return False
        # 'skip': the workers vote; a step is dropped everywhere or nowhere
        self._ensure_registered()
        if not self._vote_open:
            self._backend.open_tally(protocol.VOTE_KEY, self.num_workers)
            self._vote_open = True
        mine = np.zeros(self.num_workers, np.float32)
        mine[self.rank] = min(sum(bad.values()), 1 << 20)  # exact in float32
        votes = self._backend.tally(protocol.VOTE_KEY, mine)
        if not votes.any():
            return False
        self.skipped_steps.append(step)
        print("cdsgd_mx: step %d skipped on every worker: non-finite gradient on rank %s%s"
              % (step, ", ".join(str(r) for r in np.flatnonzero(votes)),
                 " (here: %s)" % first if first else ""), flush=True)
        return True

    def _ensure_registered(self):
        """Pair every new payload key with its weight on the servers (once per chunk)."""
        if not self._agreed:
            self._check_agreement()
            self._agreed = True
        new = [c for s in self._params.values() for c in s.chunks if c.weight_key not in self._registered]
        if new and self.algorithm in COMPRESSING:
            self._backend.register(new, self.threshold)
        self._registered.update(c.weight_key for c in new)

    def _sync_step(self, state, t, grad, loc_buf):
        """x(t+1) = W(t+1): comm_buf = g(t); push it, pull the new global weight into comm_buf;
        loc_buf = comm_buf once the pull is issued (finish_step)."""
        if state.in_flight is not None:  # cannot happen with the schedules above; kept safe
            self._comm.wait(state.in_flight)
            state.in_flight = None
        grad.copyto(state.comm_buf)
        comm_flat = _flat(state.comm_buf)
        self._comm.submit(lambda: self._round(state, t, comm_flat, comm_flat),
                          "step %d of parameter %s" % (t, state.index))
        self._sync_copies.append(state)
        if not self.driven_by_trainer:
            self.finish_step()  # the Trainer calls it once per step instead

    def _delayed_step(self, state, t, grad, loc_buf):
        """x(t+1) = W(t) - local step with g(t); round t goes on in the background."""
        with self.tracer.span("wait W(t)", param=state.index, step=t):
            if state.in_flight is not None:
                self._comm.wait(state.in_flight)   # W(t) is (being) pulled into comm_buf
                loc_buf[:] = state.comm_buf         # engine orders this after that pull
            # else: the previous step was synchronous, loc_buf already holds W(t)
        with self.tracer.span("local update", param=state.index, step=t):
            self._local_updater(state.index, grad, loc_buf)   # eq. 11
            grad.copyto(state.comm_buf)                       # comm_buf = g(t)
        comm_flat = _flat(state.comm_buf)
        state.in_flight = self._comm.submit(lambda: self._round(state, t, comm_flat, comm_flat),
                                            "step %d of parameter %s" % (t, state.index))
        if not self.driven_by_trainer:
            self._comm.flush()  # do not wait: the round finishes in the background

    def _round(self, state, t, grad_flat, pull_flat):
        """Communication thread, push phase: push g(t) (codes or fp32) chunk by chunk. Returns
        the finish phase (pull W(t+1)) for codes; an fp32 push is followed by its pull at once,
        since MXNet orders a pull after a push of the same key."""
        compressed = self.schedule.compressed(t)
        pushed = 0
        for i, c in enumerate(state.chunks):
            if compressed:
                with self.tracer.span("quantize", param=state.index, step=t):
                    bad = codec.quantize(grad_flat[c.begin:c.end], state.residual[c.begin:c.end],
                                         state.sml_buf[i], self.threshold)
                    if bad:
                        raise FloatingPointError("non-finite gradient in parameter %s at step %d (%d values)"
                                                 % (state.index, t, bad))
                    codec.wire_encode(state.sml_buf[i], state.wire[i])
                with self.tracer.span("push codes", param=state.index, step=t):
                    self._backend.push_payload(c.payload_key, state.wire[i])
                pushed += state.wire[i].nbytes + 8  # + the row index
            else:
                with self.tracer.span("push fp32", param=state.index, step=t):
                    self._backend.push(c.weight_key, grad_flat[c.begin:c.end])
                pushed += 4 * c.size
        self.bytes_pushed += pushed
        self.bytes_by_step[t] = self.bytes_by_step.get(t, 0) + pushed
        if not compressed:
            self._pull(state, t, pull_flat)
            return None
        # a pull of the weight key is not ordered after a push to the payload key: request the
        # acknowledgements now, wait for them and pull at the flush
        payload_keys = [c.payload_key for c in state.chunks]
        self._backend.request_acks(payload_keys)

        def finish():
            with self.tracer.span("wait push", param=state.index, step=t):
                self._backend.wait_acks(payload_keys)
            self._pull(state, t, pull_flat)
        return finish

    def _pull(self, state, t, pull_flat):
        start = self.tracer.now_us()
        for c in state.chunks:
            self._backend.pull(c.weight_key, pull_flat[c.begin:c.end])
        # the span ends when the transfer does; recorded without holding up this thread
        self.tracer.watch("pull", pull_flat, start, param=state.index, step=t)

    # ---- helpers for the Trainer -------------------------------------------------------------
    def finish_step(self):
        """End of a Trainer step: let the communication thread finish this step's rounds; wait
        only if some were synchronous (their pull must be issued before the next forward)."""
        flush = self._comm.flush()
        if self._sync_copies:
            self._comm.wait(flush)
            for state in self._sync_copies:  # the engine orders each copy after its pull
                state.comm_buf.copyto(state.loc_buf)
        self._sync_copies = []

    def push_bytes_of_step(self, t):
        """Bytes this worker pushes at step t by the schedule and the layout (what _round
        counts into bytes_by_step once the step's rounds have run)."""
        compressed = self.schedule.compressed(t)
        return sum((4 * c.words + 8) if compressed else 4 * c.size
                   for st in self._params.values() for c in st.chunks)

    def wait_all(self):
        """Wait for every round in flight (e.g. before reading global weights or saving)."""
        self._comm.drain()
        for s in self._params.values():
            s.comm_buf.wait_to_read()
        mx.nd.waitall()

    def set_learning_rate(self, lr, local_lr=None):
        """Global learning rate on the servers (after rounds in flight finish) and the local
        one: local_lr, or scaled by the same factor as the global one."""
        self.wait_all()
        old = self._optimizer.learning_rate
        self._optimizer.set_learning_rate(lr)
        self._backend.set_learning_rate(lr)
        if self._local_optimizer is not None:
            if local_lr is None:
                local_lr = self._local_optimizer.learning_rate * (lr / old if old else 1.0)
            self._local_optimizer.set_learning_rate(local_lr)

    @property
    def local_learning_rate(self):
        return self._local_optimizer.learning_rate if self._local_optimizer else None

    def global_weights(self, key):
        """W: the current global weight of parameter `key`, pulled from the servers."""
        self.wait_all()
        state = self._params[key]
        out = mx.nd.zeros(state.shape)
        for c in state.chunks:
            self._backend.pull(c.weight_key, _flat(out)[c.begin:c.end])
        out.wait_to_read()
        return out

    def save_trace(self):
        return self.tracer.save()

    def close(self):
        """Finish rounds in flight and stop the communication thread (also run at exit)."""
        if self._comm is not None:
            try:
                self._comm.drain()
            except CommError:
                pass  # already raised to the caller of the failed step
            finally:
                self._comm.close()
                self._comm = None
                mx.nd.waitall()


def _write_atomic(path, data):
    tmp = "%s.part%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _single(arrays, name):
    if isinstance(arrays, (list, tuple)):
        if len(arrays) != 1:
            raise ValueError("%s: cdsgd supports one device per worker, got %d arrays" % (name, len(arrays)))
        return arrays[0]
    return arrays

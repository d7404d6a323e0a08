"""Fused buckets: the unit every per-step operation runs on (docs/design.md, "Buckets").

Parameters are laid out back to back in flat float32 buffers, in the order their gradients
become ready in backward (reverse of registration), and the buffers are cut into buckets of at
most `bucket_size` values: a bucket holds whole small parameters, or one piece of a parameter
larger than a bucket. Each bucket is one weight key and one payload key on one server
(protocol.py), so a step costs one quantize, one push, one acknowledgement and one pull per
bucket, whatever the number of parameters.

A BucketSet owns the flat buffers of the buckets planned together (normally all parameters of a
Trainer; a parameter initialized later gets a set of its own):
- grad_buf: the gradients. The Trainer binds each parameter's gradient to its slice (autograd
  writes there directly, so fusion adds no copy); an array that is not bound is copied in. A
  worker with several devices: the first device's gradients are bound, the other devices'
  are added in (a worker pushes the sum of its devices' gradients, as MXNet's kvstore does);
- comm_buf: g(t) handed to the communication thread, then W(t+1) pulled over it (the paper's
  comm_buf: one buffer serves both), one array per bucket (`comm_wires`: MXNet's engine orders
  all operations on one array, so the buckets' rounds can be in flight together only on arrays
  of their own). On the parameter server each bucket's array ends with its proof region
  (`region` values, auth.py): this worker's MAC tag on the way out, the server's count of the
  bucket's rounds on the way back; the other buffers are flat, with no gaps;
- loc_buf:  x(t+1) = W(t) - local step with g(t) for the delayed algorithms, then copied into
  the parameters' own data arrays (the weights forward reads), on every device;
- the residual (the quantizer's error-feedback memory) and, per bucket, sml_buf (the 2-bit
  codes in MXNet's packed layout) belong to the set's compressor (compression.py);
- with 2-bit pulls (pull_compression.py), down_buf: each bucket's down payload as pulled
  (codes of W - V, scale, norms, proof region), and the set's `copy` (V, a WorkerCopy).
The NDArray buffers live on one host context (`ctx`): the first device's when it is a CPU.
The step a set is at belongs to the step engine (step.py), a round's proof to proofs.py.

Device-resident buckets (`device`, a GPU's context: issue 12; docs/design.md, "Devices"): what
the step computes with stays on the gradients' device and only what the parameter server
carries crosses to the host, once per bucket:
- grad_buf and loc_buf live on the device, the residual and sml_buf too (compression.py, with a
  device.DeviceBucket per bucket), with
  dev_comm, the device's copy of g(t) that the round compresses (and sends again if a server
  drops the round);
- comm_buf stays on the host: the codes arrive there (0.25 B/value), an fp32 round copies g(t)
  there, and W is pulled there; dev_weights, on the device, gets W once per bucket, and the
  parameters get it from there.

Parts (partition): a bucket's fp32 rounds may go in parts, each a Bucket of its own (weight key,
comm_wire) over a stretch of the bucket's buffers, while its 2-bit rounds go whole.

API: plan(sizes, bucket_size, workers, servers, keys, part_size=None) -> [Bucket]; Bucket, Slot;
BucketSet(buckets, shapes, outs, delayed).gather / scatter / grad_to_comm / comm_to_loc /
fp32_to_comm / gradient / zero_grad / hold_loc / keep_residual / set_multipliers / layout.
"""
import math
from dataclasses import dataclass, field
from typing import Any, List, Optional

import mxnet as mx
import numpy as np

from cdsgd_mx import codec
from cdsgd_mx.wire import proofs, protocol
from cdsgd_mx.worker.engine_copies import EngineCopies

# Values per bucket: its codes are one payload (a compressed round pays CPU per bucket:
# quantize, encode, proof, decode; BIT-SGD both ways on Inception-BN at 1 Gbit/s: 19 ms a
# round at 2^20, 24 at 2^18), 4 MiB of fp32. Capped by the big-array bound, see plan().
DEFAULT_BUCKET_SIZE = 1 << 20
# Values per part: a bucket's fp32 rounds (every step of S-SGD and OD-SGD; the warm-up and the
# corrections of BIT-SGD and CD-SGD) go part by part, each part its own weight key on its
# bucket's server, so that one part's W comes back while the next part's push goes out and both
# directions of a NIC are busy; the last part's pull is the round's tail, so small parts win
# where the wire sets the round (docs/performance-history.md, "Bucket size by algorithm":
# Inception-BN's S-SGD round at 2 workers + 1 server on 1 Gbit/s NICs 123 ms at 2^16, 140 at
# 2^18, 192 at 2^20; docs/performance.md, "Parts": CD-SGD's correction at 8 workers + 2
# servers 298-324 ms in parts of 2^16, 328-335 at 2^17, 332-340 at 2^15, 447-456 whole). Where
# the CPU sets it (fast links), whole buckets win (16x fewer messages: S-SGD's round on
# Inception-BN at 10 Gbit/s took 0.56 of its time in 2^16 pieces on 2 AVX2 cores): each job's
# first fp32 steps try both ways and it keeps the faster (part_choice.py; CDSGD_PART_SIZE=0:
# no parts at all).
PART_SIZE = 1 << 16
# With fp32_sum='rank' a part is as large as its rows key may be (plan() cuts at the rows'
# bound): a rank-order part costs a round trip more (its acknowledgement, then W's pull), so
# fewer, larger parts win (docs/performance.md, "Parts").
RANK_PART_SIZE = DEFAULT_BUCKET_SIZE


def default_bucket_size(algorithm):
    """bucket_size when none is given: the same for every algorithm (an fp32 round goes in parts
    or whole buckets, as the job measures faster)."""
    return DEFAULT_BUCKET_SIZE


@dataclass
class Slot:
    key: int       # the parameter's key (gluon's index)
    begin: int     # the parameter's flat element range [begin, end) held here
    end: int
    offset: int    # where that range starts in the set's flat buffers
    state_id: int  # the global optimizer's index for this piece, unique in the job
    lr_mult: float = 1.0  # the parameter's own multipliers (gluon's Parameter.lr_mult, wd_mult)
    wd_mult: float = 1.0

    @property
    def size(self):
        return self.end - self.begin


@dataclass
class Bucket:
    offset: int    # [offset, offset + size) of the set's flat buffers
    size: int
    server: int
    weight_key: int
    payload_key: int
    slots: List[Slot] = field(default_factory=list)
    # views into its set's buffers, made by BucketSet (None where the set has no such buffer)
    grad: Any = field(default=None, repr=False)         # its part of grad_buf
    comm: Any = field(default=None, repr=False)         # its part of comm_buf: g(t), then W(t+1)
    comm_wire: Any = field(default=None, repr=False)    # comm plus the proof region: what is pushed and pulled
    comm_region: Any = field(default=None, repr=False)  # this worker's proof, then the server's count
    comm_status: Any = field(default=None, repr=False)  # the server's count of the bucket's rounds
    sealed_for: Optional[tuple] = None                  # (the round, tracked) whose proof the regions hold (proofs.py)
    loc: Any = field(default=None, repr=False)          # its part of loc_buf (delayed algorithms)
    dev_comm: Any = field(default=None, repr=False)     # device-resident buckets: g(t) on the device
    dev_weights: Any = field(default=None, repr=False)  # ... and W there
    down_key: Optional[int] = None                      # 2-bit pulls: the key of the codes of W - V
    down_wire: Any = field(default=None, repr=False)    # ... where they are pulled (codes, scale, norms, count)
    down_status: Any = field(default=None, repr=False)  # ... the server's count of the bucket's rounds
    rows_key: Optional[int] = None                      # fp32_sum='rank': its fp32 rounds' rows, one per worker
    parts: List["Bucket"] = field(default_factory=list, repr=False)  # its fp32 rounds' units (none: itself; see partition)
    whole: Any = field(default=None, repr=False)        # a part: its stretch of its bucket's comm_buf

    @property
    def words(self):
        return codec.packed_size(self.size)


def plan(params, bucket_size, num_workers, num_servers, keys, first_state=0, bound=None, fp32_rows=False,
         part_size=None):
    """Buckets for params = [(key, size)] in registration order (every worker plans the same).

    A bucket holds at most min(bucket_size, the big-array bound's limit, total / num_servers)
    values, so that each key fits one server and every server gets a share; a parameter above
    that is cut into pieces (at least num_servers when it reaches the bound, as MXNet would).
    fp32_rows: the buckets get fp32 rows keys (fp32_sum='rank'), whose bound is lower.
    part_size: the buckets' fp32 rounds go in parts of at most this many values (partition).
    With both, only the parts (and buckets too small to have parts) have rows keys: they keep
    to the rows' bound, and the buckets, whose codes are one payload, to the others'."""
    bound = protocol.bigarray_bound() if bound is None else bound
    total = sum(size for _, size in params)
    chunk = protocol.max_chunk(bound, num_workers, fp32_rows)
    if fp32_rows and part_size is not None:
        # (cut at the rows' bound, 8 workers' 2-bit rounds of Inception-BN went in 21 buckets
        # instead of 3: 15 ms more of a worker's CPU and 10% more time per 2-bit round)
        part_size, chunk = min(part_size, chunk), protocol.max_chunk(bound, num_workers)
    limit = max(1, min(bucket_size, chunk, math.ceil(total / num_servers)))
    load = [0] * num_servers
    buckets, state_id, offset = [], first_state, 0
    current = None

    def new_bucket():
        server = min(range(num_servers), key=lambda s: (load[s], s))
        b = Bucket(offset, 0, server, keys.on(server), keys.on(server))
        buckets.append(b)
        return b

    for key, size in reversed(params):  # backward produces the last layer's gradient first
        if size > limit or (size >= bound and num_servers > 1):
            pieces = max(math.ceil(size / limit), num_servers if size >= bound else 1)
            step = math.ceil(size / pieces)
            for begin in range(0, size, step):
                end = min(size, begin + step)
                b = new_bucket()
                b.slots.append(Slot(key, begin, end, offset, state_id))
                b.size = end - begin
                load[b.server] += b.size
                state_id += 1
                offset += end - begin
            current = None
            continue
        if current is None or current.size + size > limit:
            current = new_bucket()
        current.slots.append(Slot(key, 0, size, offset, state_id))
        current.size += size
        load[current.server] += max(size, 1)
        state_id += 1
        offset += size
    if part_size is not None:
        partition(buckets, part_size, keys, first_state)
    return buckets


def partition(buckets, part_size, keys, first_state):
    """Cut each bucket into parts of at most part_size values for its fp32 rounds: a bucket's
    codes stay one payload, but its weights are pushed and pulled part by part, one part's W
    coming back while the next one's push goes out. Each part is a Bucket of its own (weight
    key on the bucket's server, whole slots of the bucket), whose stored weights the server
    keeps as a stretch of the bucket's. A slot longer than a part is cut first, each piece with
    its own optimizer state (state ids numbered again in order), so that every parameter piece
    is stepped once per round whichever way the round goes."""
    state_id = first_state
    for b in buckets:
        slots = []
        for s in b.slots:
            pieces = max(1, math.ceil(s.size / part_size))
            step = math.ceil(s.size / pieces) if s.size else 0
            for begin in range(s.begin, s.end, step) if s.size else [s.begin]:
                end = min(s.end, begin + step) if s.size else s.end
                slots.append(Slot(s.key, begin, end, s.offset + begin - s.begin, state_id, s.lr_mult, s.wd_mult))
                state_id += 1
        b.slots = slots
        if b.size <= part_size:
            continue
        groups, size = [[]], 0
        for s in slots:
            if groups[-1] and size + s.size > part_size:
                groups.append([])
                size = 0
            groups[-1].append(s)
            size += s.size
        b.parts = [Bucket(g[0].offset, sum(x.size for x in g), b.server, keys.on(b.server), None, g) for g in groups]


class BucketSet:
    """Flat buffers of buckets planned together and their views (the step they are at is the
    StepEngine's: step.py)."""

    def __init__(self, buckets, shapes, outs, delayed, region=0, ctx=None, device=None, pull=False):
        self.buckets = buckets
        self.region = region              # proof values after each bucket in comm_buf (0: none)
        self.shapes = shapes              # key -> the parameter's shape
        self.outs = outs                  # key -> the parameter's data arrays, one per device (what forward reads)
        self.ctx = ctx or mx.current_context()  # where the buffers live (kvstore.CDSGD.broadcast)
        self.keys = list(shapes)
        self.size = sum(b.size for b in buckets)
        self.slots = [s for b in buckets for s in b.slots]
        self.device = device              # where the gradients live, for device-resident buckets
        on = device or self.ctx           # where the step's own buffers live
        self.grad_buf = mx.nd.zeros((self.size,), ctx=on)
        # comm_buf, one array per bucket: MXNet's engine orders every operation on one array
        # (its views included) after the writes issued before it, so with one flat buffer a
        # bucket's pull (a write) waited for every earlier bucket's round and the NIC carried one
        # direction at a time; with an array each, the buckets' rounds are in flight together
        self.comm_wires = [mx.nd.zeros((b.size + region,), ctx=self.ctx) for b in buckets]
        self.loc_buf = mx.nd.zeros((self.size,), ctx=on) if delayed else None
        self.dev_comm = mx.nd.zeros((self.size,), ctx=on) if device else None
        self.dev_weights = mx.nd.zeros((self.size,), ctx=on) if device else None
        self.compressor = None            # compression.Compressor, when the algorithm compresses (kvstore sets it)
        self.copy = None                  # pull_compression.WorkerCopy: V, with 2-bit pulls
        self.down_buf = None
        if pull:
            from cdsgd_mx.wire.pull_compression import down_size_of
            from cdsgd_mx.worker.pull_decode import WorkerCopy
            self.copy = WorkerCopy(buckets, self.size)
            for b in buckets:  # (an array per bucket, as comm_buf's)
                width = down_size_of(b) + region
                b.down_wire = mx.nd.zeros((width,), ctx=self.ctx)
                b.down_status = b.down_wire[width - region:width - region + 1] if region else None
            self.down_buf = [b.down_wire for b in buckets]
        self.runs = []                    # the local optimizer's runs (set_multipliers)
        self._stages = {}                 # extra device -> its staging views (gather)
        self._scatters = {}               # 'comm' / 'parts' / 'loc' -> (the parameters' arrays, their EngineCopies)
        for b, wire in zip(buckets, self.comm_wires):
            b.grad = self.grad_buf[b.offset:b.offset + b.size]
            b.comm_wire = wire  # what is pushed and pulled
            b.comm = wire[0:b.size]
            b.comm_region = wire[b.size:b.size + region] if region else None  # this worker's proof, then
            b.comm_status = wire[b.size:b.size + 1] if region else None       # the server's count
            proofs.unseal(b)  # no proof in the new regions yet (proofs.WorkerProofs.seal)
            b.loc = None if self.loc_buf is None else self.loc_buf[b.offset:b.offset + b.size]
            b.dev_comm = b.dev_weights = None
            if device:
                b.dev_comm = self.dev_comm[b.offset:b.offset + b.size]
                b.dev_weights = self.dev_weights[b.offset:b.offset + b.size]
        for b in buckets:  # a part's fp32 round goes through an array of its own (data, proof region)
            for p in b.parts:
                p.comm_wire = mx.nd.zeros((p.size + region,), ctx=self.ctx)
                p.comm = p.comm_wire[0:p.size]
                p.comm_region = p.comm_wire[p.size:p.size + region] if region else None
                p.comm_status = p.comm_wire[p.size:p.size + 1] if region else None
                proofs.unseal(p)
                start = p.offset - b.offset
                p.whole = b.comm[start:start + p.size]
                p.grad = self.grad_buf[p.offset:p.offset + p.size]
                p.loc = None if self.loc_buf is None else self.loc_buf[p.offset:p.offset + p.size]
                p.dev_comm = b.dev_comm[start:start + p.size] if device else None
        if self.copy is not None:  # each bucket's decode of its 2-bit pulls (an engine operation)
            self.copy.bind(buckets, region)
        # a whole parameter's slices, shaped like it: what its gradient is bound to, and where
        # its weights are copied from (a parameter cut into pieces is contiguous in grad_buf
        # and loc_buf, not in comm_buf, an array per bucket)
        self.grad_views, self._comm_views, self._loc_views = {}, {}, {}
        self._part_views = {}             # ... W as an fp32 round in parts pulled it: from the parts' own arrays
        self._whole = {}                  # key -> a whole array for a parameter cut across buckets (or parts)
        self._spans = {}                  # key -> [begin, end) of the parameter in grad_buf's layout
        for key, shape in shapes.items():
            begin = min(s.offset for s in self.slots if s.key == key)
            end = begin + int(np.prod(shape))
            self._spans[key] = (begin, end)
            self.grad_views[key] = self.grad_buf[begin:end].reshape(shape)
            if device:  # the parameters get W from dev_weights, laid out like grad_buf
                self._comm_views[key] = self.dev_weights[begin:end].reshape(shape)
            else:
                self._comm_views[key] = self._views_of(key, buckets)
                if any(b.parts for b in buckets):
                    self._part_views[key] = self._views_of(key, [u for b in buckets for u in b.parts or [b]])
            if self.loc_buf is not None:
                self._loc_views[key] = self.loc_buf[begin:end].reshape(shape)

    def _views_of(self, key, units):
        """Where parameter `key`'s W is in the comm_wires of `units` (buckets, or their parts):
        one view shaped like it, or [(each piece's stretch, begin, end)] for a parameter cut
        across units (the pieces meet in a whole array of its shape, then one copy of all of it:
        MKL-DNN may keep the parameter's own array in a blocked layout, after a forward pass
        outside autograd, whose views it refuses to write)."""
        pieces = [(u, s) for u in units for s in u.slots if s.key == key]
        if len(pieces) == 1:
            u, s = pieces[0]
            start = s.offset - u.offset
            return u.comm_wire[start:start + s.size].reshape(self.shapes[key])
        if key not in self._whole:
            self._whole[key] = mx.nd.zeros(self.shapes[key], ctx=self.ctx)
        return [(u.comm_wire[s.offset - u.offset:s.offset - u.offset + s.size], s.begin, s.end) for u, s in pieces]

    def set_multipliers(self, multipliers):
        """multipliers(key) -> (lr_mult, wd_mult). Consecutive parameters with the same ones form
        a run: the local optimizer steps each run at once (one run when none are set)."""
        for s in self.slots:
            s.lr_mult, s.wd_mult = (float(m) for m in multipliers(s.key))
        self.runs = []  # (index of the local optimizer = first slot's state id, grad view, loc view)
        if self.loc_buf is None:
            return
        start = 0
        for i, s in enumerate(self.slots):
            last = i + 1 == len(self.slots)
            if last or (self.slots[i + 1].lr_mult, self.slots[i + 1].wd_mult) != (s.lr_mult, s.wd_mult):
                first, end = self.slots[start], s.offset + s.size
                self.runs.append((first.state_id, self.grad_buf[first.offset:end], self.loc_buf[first.offset:end]))
                start = i + 1

    def gather(self, grads):
        """grad_buf = the gradients {key: [array per device]}, summed over the devices: nothing
        to do for a bound gradient of one device. Engine ops, ordered after backward and before
        anything that reads grad_buf (the non-finite check waits for them)."""
        for key, devices in grads.items():
            view = self.grad_views[key]
            if devices[0] is not view:
                devices[0].copyto(view)
            if len(devices) > 1:  # (one device: nothing more, not even a loop)
                for d, g in enumerate(devices[1:]):  # MXNet refuses arithmetic across contexts (cpu(0), cpu(1) too)
                    if g.context != view.context:  # through a buffer made once per extra device
                        stage = self._staging(d)[key]
                        g.copyto(stage)
                        g = stage
                    view += g

    def _staging(self, d):
        """Views like grad_views, in a buffer on grad_buf's context where the (d+1)-th extra
        device's gradients are copied before they are added: made at the first step, reused."""
        if d not in self._stages:
            buf = mx.nd.zeros((self.size,), ctx=self.grad_buf.context)
            self._stages[d] = {key: buf[begin:end].reshape(self.shapes[key])
                               for key, (begin, end) in self._spans.items()}
        return self._stages[d]

    def scatter(self, source):
        """The parameters' data on every device = comm_buf ('comm', W), the parts' arrays after a
        round in parts ('parts', W as each part's pull brought it) or loc_buf ('loc', x):
        engine copies, ordered after whatever writes the source (a pull, the local update),
        issued through MXNet's C API (engine_copies.py: a fifth of copyto's cost), and made
        again when the parameters' arrays are other objects than at the last step."""
        outs = [out for devices in self.outs.values() for out in devices]
        made = self._scatters.get(source)
        if made is None or len(made[0]) != len(outs) or any(a is not b for a, b in zip(made[0], outs)):
            made = (outs, EngineCopies(self._scatter_pairs(source)))
            self._scatters[source] = made
        made[1].run()

    def _scatter_pairs(self, source):
        views = {"comm": self._comm_views, "parts": self._part_views, "loc": self._loc_views}[source]
        pairs = []
        if source == "comm" and self.device:  # W crosses to the device once per bucket
            pairs += [(b.comm, b.dev_weights) for b in self.buckets]
        for key, devices in self.outs.items():
            view = views[key]
            if isinstance(view, list):  # a parameter cut by a proof region: its pieces, then whole
                staging = self._whole[key]
                flat = staging.reshape((-1,))
                pairs += [(piece, flat[begin:end]) for piece, begin, end in view]
                pairs += [(staging, out) for out in devices]
            else:
                pairs += [(view, out) for out in devices]
        return pairs

    def grad_to_comm(self, but_parted=False):
        """comm_buf = g(t), bucket by bucket (the proof regions are written per round); with
        device-resident buckets dev_comm = g(t), on the device (the round takes it from there).
        but_parted: not the buckets with parts (their parts take g(t) from grad_buf)."""
        if self.device:
            self.grad_buf.copyto(self.dev_comm)
            return
        for b in self.buckets:
            if not (but_parted and b.parts):
                b.grad.copyto(b.comm)

    # ---- gluon's stale gradients (ignore_stale_grad=True) --------------------------------------
    def zero_grad(self, keys):
        """This worker's gradient of `keys` is stale (backward did not write it since the last
        step): it contributes nothing to the step."""
        for key in keys:
            self.grad_views[key][:] = 0

    def hold_loc(self, keys):
        """Copies of loc_buf's `keys` (W(t) after comm_to_loc), and a function that puts them
        back: the parameters no worker had a fresh gradient for take no local step."""
        kept = {key: self._loc_views[key].copy() for key in keys}

        def restore():
            for key, x in kept.items():
                x.copyto(self._loc_views[key])
        return restore

    def keep_residual(self, keys):
        """A function that puts back the residual of `keys` after this step's compression (a
        parameter skipped everywhere is not in the step; compression.Compressor.keep)."""
        if self.compressor is None:
            return lambda: None
        return self.compressor.keep([self._spans[key] for key in keys])

    def comm_to_loc(self):
        """loc_buf = W(t), the weights pulled into comm_buf."""
        for b in self.buckets:
            b.comm.copyto(b.loc)

    # ---- a bucket's round (communication thread), wherever its gradients live ----------------
    def gradient(self, b, from_grad=False):
        """Where bucket b's g(t) is for its compression: comm_buf, or grad_buf itself with
        from_grad (a synchronous step: nothing writes grad_buf before its round is ready);
        dev_comm with device-resident buckets."""
        if self.device:
            return b.dev_comm
        return b.grad if from_grad else b.comm

    def comm_values(self):
        """comm_buf as one numpy array, bucket after bucket, each with its proof region
        (checkpoints: the layout a flat comm_buf had)."""
        return np.concatenate([wire.asnumpy() for wire in self.comm_wires])

    def set_comm(self, values):
        at = 0
        for wire in self.comm_wires:
            wire[:] = values[at:at + wire.size]
            at += wire.size

    def wait_comm(self):
        """Until every bucket's comm_buf is written (its round's W, or a decode's V)."""
        for wire in self.comm_wires:
            wire.wait_to_read()

    def fp32_to_comm(self, b, from_grad=False):
        """An fp32 round pushes comm_buf: with device-resident buckets g(t) comes from the
        device; a part's from its stretch of its bucket's comm_buf (partition), or with
        from_grad (a synchronous step) of grad_buf."""
        if self.device:
            b.dev_comm.copyto(b.comm)
        elif b.whole is not None:
            (b.grad if from_grad else b.whole).copyto(b.comm)

    @staticmethod
    def part_to_comm(p):
        """A part's W, as pulled, into its stretch of its bucket's comm_buf (an engine copy,
        ordered after the pull), where the parameters and loc_buf take W from."""
        p.comm.copyto(p.whole)

    def copy_values(self):
        """V (numpy copy), or None without 2-bit pulls: checkpoints."""
        return self.copy.values() if self.copy else None

    def residual_values(self):
        """The residual (numpy copy), or None when not compressing: checkpoints."""
        return self.compressor.residual_values() if self.compressor else None

    def set_residual(self, values):
        self.compressor.set_residual(values)

    def count_nonfinite(self):
        return codec.count_nonfinite(self.grad_buf)

    def first_nonfinite(self):
        """(key, count) of the first parameter whose gradient holds NaN/Inf (slow; on error)."""
        for key in self.keys:
            n = codec.count_nonfinite(self.grad_views[key])
            if n:
                return key, n
        return None, 0

    def layout(self):
        """What every worker must agree on: (key, begin, end, offset, weight key) per slot."""
        return [(s.key, s.begin, s.end, s.offset, b.weight_key) for b in self.buckets for s in b.slots]

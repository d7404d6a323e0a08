"""The worker's side of MXNet's parameter server (dist_sync): pushes and pulls through ps-lite,
proven by proofs.py, commands with one MAC per server, the start-up handshake. API:
DistBackend(store), the Backend interface (base.py) plus round_trip / handshake."""
import ctypes
import itertools
import json
import os
import sys

import mxnet as mx
import numpy as np
from mxnet.base import _LIB, check_call

from cdsgd_mx.wire import auth, optimizer_spec, proofs, protocol
from cdsgd_mx.worker import engine_ops
from cdsgd_mx.cluster import heartbeat
from cdsgd_mx.wire.pull_compression import down_size_of
from cdsgd_mx.server.node import COMMAND_PREFIX, START_MESSAGE
from cdsgd_mx.worker.backends.base import MAX_RESENDS, Backend, dropped, registered, registration, rows_units

command_numbers = itertools.count(1)  # per process, as the servers' count of the job's commands


def exit_on_uncaught_exception():
    """An uncaught exception in a worker would leave it hanging in the kvstore's destructor (a
    barrier the others never reach): print it and end the process, so the launcher sees the
    failure and stops the job."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        heartbeat.set_phase("failed")  # sent at once: the scheduler's hub then stops the job (hub.py)
        sys.stderr.write("cdsgd_mx: worker %s failed; exiting without the kvstore barrier\n"
                         % os.environ.get("CDSGD_LAUNCH_INDEX", "?"))
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)

    sys.excepthook = hook


class DistBackend(Backend):
    def __init__(self, store):
        """store: 'dist_sync', or a dist_sync KVStore the script already made (one per process)."""
        exit_on_uncaught_exception()
        self.secret = auth.job_secret()  # before MXNet's start-up barrier: a missing one fails alone
        heartbeat.start()
        with heartbeat.waiting("start-up: every node of the job to register with the scheduler"):
            self.kv = mx.kv.create(store) if isinstance(store, str) else store
        self.kv.wrapped_by_cdsgd = True  # MXNet's own store is ours to use here (doors.py guards it elsewhere)
        self.rank = self.kv.rank
        self.num_workers = self.kv.num_workers
        self.num_servers = int(os.environ.get("DMLC_NUM_SERVER", "1"))
        self.acks = {}      # payload or rows key -> row_sparse array an empty pull writes (see request_acks)
        self.staging = {}   # payload key -> dense [N, words]: this worker's codes in its own row
        self.rows = {}      # payload key -> this worker's row of its staging array
        self.wires = {}     # weight key -> its bucket's comm_wire (what every push and pull of the key uses)
        self.codes = {}     # payload key -> the codes' part of that row (then the proof)
        self.payloads = {}  # payload key -> the row_sparse array pushed (made once, refilled)
        self.flags = {}     # payload key -> [its pull flag's place in that row, the flag last written]
        self.fp32_rows = {}  # rows key -> the row_sparse array pushed: this worker's row (made once, refilled)
        self.row_sources = {}  # rows key -> its bucket's comm_wire as one row: what the row is filled from
        self.no_rows = mx.nd.array([], dtype="int64")
        self.reports_open = False  # the checkpoint report keys exist (exchange)
        # before any command (CDSGD checks the answers): every server's nonce, and from it the
        # key of everything sent to that server from now on (auth.session_key)
        with heartbeat.waiting("start-up: the handshake with every server"):
            self.answers = self.handshake()
        self.session_keys = [auth.session_key(self.secret, self.answers[s][self.rank, 2:])
                             for s in range(self.num_servers)]
        self.proofs = proofs.WorkerProofs(self.session_keys, self.rank, self.num_workers)  # proofs.py
        self.region = self.proofs.region  # the proof after each pushed array

    @property
    def rounds(self):
        """Weight key (or a lone key) -> its rounds the servers applied, as this worker saw."""
        return self.proofs.rounds

    def set_optimizer(self, optimizer):
        """As plain data in an authenticated command (never MXNet's pickle: servers run no code
        from the network)."""
        from cdsgd_mx import numerics  # the servers check that they run the same mode (numerics.py)
        self.command({"op": "optimizer", "spec": optimizer_spec.describe(optimizer), "numerics": numerics.active()})

    def init(self, keys, values):
        """values: the data; each key stores it followed by a zero proof region."""
        with heartbeat.waiting("the barrier after initializing keys %s" % list(keys)[:4]):
            self.kv.init(keys, [self._padded(v) for v in values])  # one barrier for all

    def _padded(self, value):
        return mx.nd.concat(value.reshape((-1,)), mx.nd.zeros((self.region,)), dim=0)

    # -- proof of every push: the worker side of proofs.py --------------------------------
    def seal(self, bucket, tracked=False):
        self.proofs.seal(bucket, tracked)

    def bucket_applied(self, bucket, down=False):
        return self.proofs.bucket_applied(bucket, down)

    def seal_next(self, bucket, tracked=False):
        self.proofs.seal_next(bucket, tracked)

    def resend(self, bucket, compressed, gradient, pull_down=False, tracked=False, rows=False):
        """Push the bucket's dropped round again and pull: the codes still in this worker's
        payload row, or the fp32 gradient from `gradient` (where g(t) still is: the pull wrote
        W over comm_buf), each with the same proof (the round count did not move). pull_down:
        the round pulls the codes of W - V (pull_compression.py), not W. rows: the fp32 round
        goes to the bucket's rows key (fp32_sum='rank')."""
        if not compressed:
            gradient.copyto(bucket.comm)
            self.proofs.seal_next(bucket, tracked)  # the pull overwrote the region too
        if compressed:
            self.push_payload(bucket.payload_key)
        elif rows:
            self.push_row(bucket.rows_key)
        else:
            self.pushpull(bucket.weight_key, bucket.comm_wire)  # W comes back as the answer
            return
        acked = [bucket.payload_key if compressed else bucket.rows_key]  # the pull of W is ordered
        self.request_acks(acked)                                         # only after a push of W itself
        self.wait_acks(acked)
        if pull_down:
            self.pull(bucket.down_key, bucket.down_wire)
        else:
            self.pull(bucket.weight_key, bucket.comm_wire)

    def round_trip(self, key, data):
        """One proven round of a dense key outside the training steps (start-up, votes,
        checkpoint restore): push data and proof, pull, check (again while a server drops it);
        returns the stored data."""
        data = np.asarray(data, np.float32).reshape(-1)
        via = self.wires.get(key)
        for attempt in range(MAX_RESENDS + 1):
            wire = np.concatenate([data, self.proofs.region_for(key, data.size)])
            if via is not None:
                # a bucket's weight key goes through its own comm_wire: MXNet pulls a key into the
                # array last pushed to it, so every later pull of W lands there with no copy
                # (a compressed round never pushes the weight key)
                via._sync_copyfrom(wire)
                send = back = via
            else:
                send, back = mx.nd.array(wire), mx.nd.zeros(wire.shape)
            self.kv.push(key, send)
            self.kv.pull(key, out=back)  # ordered after this worker's push of the same key
            with heartbeat.waiting("a round of key %d (start-up, vote or restore)" % key):
                values = back.asnumpy()
            if self.proofs.applied(key, float(values[data.size])):
                return values[:data.size]
            dropped(self.rank, "round %d of key %d" % (self.rounds.get(key, 0), key), attempt)

    def init_payloads(self, buckets, pull=False):
        """Payload keys and the arrays every compressed push reuses (nothing is allocated on
        the hot path): the server takes a row_sparse key's shape from its init value, so the
        init stores every row. With pull, the codes are followed by the round's pull flag."""
        n, keys, values = self.num_workers, [], []
        extra = 1 if pull else 0
        for b in buckets:
            width = b.words + extra + auth.TAG_FLOATS  # the codes, (the pull flag,) then this worker's proof
            keys.append(b.payload_key)
            values.append(mx.nd.sparse.row_sparse_array(
                (mx.nd.ones((n, width)), mx.nd.arange(n, dtype="int64")), shape=(n, width)))
            self.staging[b.payload_key] = mx.nd.zeros((n, width))
            self.rows[b.payload_key] = self.staging[b.payload_key][self.rank]
            self.codes[b.payload_key] = self.rows[b.payload_key][:b.words]
            if pull:
                self.flags[b.payload_key] = [self.rows[b.payload_key][b.words:b.words + 1], None]
            self.proofs.payload_regions[b.payload_key] = self.rows[b.payload_key][b.words + extra:]
            self.payloads[b.payload_key] = mx.nd.sparse.row_sparse_array(
                (mx.nd.ones((1, width)), mx.nd.array([self.rank], dtype="int64")), shape=(n, width))
            self.acks[b.payload_key] = mx.nd.sparse.zeros("row_sparse", (n, width))
        self.kv.init(keys, values)

    def init_rows(self, buckets):
        """The fp32 rows keys (fp32_sum='rank') of buckets (or their parts) and the arrays every
        fp32 round reuses: as init_payloads, a row of comm_wire (data, then the proof region) per worker."""
        n, keys, values = self.num_workers, [], []
        for b in buckets:
            width = b.size + self.region
            keys.append(b.rows_key)
            values.append(mx.nd.sparse.row_sparse_array(
                (mx.nd.ones((n, width)), mx.nd.arange(n, dtype="int64")), shape=(n, width)))
            self.fp32_rows[b.rows_key] = mx.nd.sparse.row_sparse_array(
                (mx.nd.ones((1, width)), mx.nd.array([self.rank], dtype="int64")), shape=(n, width))
            self.row_sources[b.rows_key] = b.comm_wire.reshape((1, width))
            self.acks[b.rows_key] = mx.nd.sparse.zeros("row_sparse", (n, width))
        with heartbeat.waiting("the barrier after initializing rows keys %s" % keys[:4]):
            self.kv.init(keys, values)

    def command(self, msg):
        """Rank 0 sends msg to every server, with a sequence number and one MAC per server (each
        with that server's session key; server s checks the s-th); every worker waits for it at
        a barrier."""
        if self.rank == 0:
            body = json.dumps(dict(msg, seq=next(command_numbers)))
            macs = ",".join(auth.mac(key, "command", body) for key in self.session_keys)
            self.kv._send_command_to_servers(0, COMMAND_PREFIX + macs + ":" + body)
        with heartbeat.waiting("the barrier after command %r" % msg.get("op")):
            self.kv._barrier()

    def register(self, buckets, threshold, compressing, aggregate=False):
        """Tell the servers which parameters each bucket holds and, when compressing, which
        payload key decodes into which weight (with fp32_sum='rank', which rows key sums into
        which weight), then run the registration round: a zero push to each weight key the
        server records (base.registered: a payload, rows or part update needs it)."""
        rows = rows_units(buckets)
        if rows:
            self.init_rows(rows)
        self.command(registration(buckets, threshold, compressing, aggregate))
        for b in buckets:
            for u in [b] + b.parts:
                self.wires[u.weight_key] = u.comm_wire
            if b.down_key is not None:  # every pull of it lands in down_wire (see round_trip)
                self.wires[b.down_key] = b.down_wire
        recorded = registered(buckets, compressing, rows)
        if not recorded:  # (no payloads, rows or parts: nor down keys, which come with payloads)
            return
        for b in recorded:
            self.round_trip(b.weight_key, np.zeros(b.size, np.float32))
        for p in [p for b in buckets for p in b.parts if p.rows_key is not None]:  # (apply_rows steps its stretch)
            self.round_trip(p.weight_key, np.zeros(p.size, np.float32))
        for b in buckets:
            if b.down_key is not None:
                self.round_trip(b.down_key, np.zeros(down_size_of(b), np.float32))
        self.kv._barrier()

    def barrier(self):
        with heartbeat.waiting("a barrier (every worker reaches the same point)"):
            self.kv._barrier()

    def assign(self, values):
        """Set global weights: {weight key: array (rank 0's values)} (checkpoint restore)."""
        self.command({"op": "assign", "keys": list(values)})
        for k, v in values.items():
            self.round_trip(k, v.asnumpy() if self.rank == 0 else np.zeros(v.size, np.float32))
        self.kv._barrier()

    def gather_rows(self, key, row):
        """Every worker's `row` (small float32 values, exact), as an [N, len(row)] array: each
        worker pushes its row into a zero matrix and the server keeps the sum (assign)."""
        n = self.num_workers
        self.init([key], [mx.nd.zeros((n * len(row),))])
        self.command({"op": "assign", "keys": [key]})
        mine = np.zeros((n, len(row)), np.float32)
        mine[self.rank] = row
        return self.round_trip(key, mine).reshape(n, len(row))

    def handshake(self):
        """Each server's answer to the start-up handshake: every worker pushes its MAC tag
        (auth.tag) in its own row of a key on that server; ours answers per row whether the
        tag checks with its secret, beside a mark (protocol.HANDSHAKE_MARK) that MXNet's own
        server, which stores the sum or runs the optimizer, never writes, and its nonce.
        Returns {server index: [num_workers, TAG_FLOATS] answer}."""
        n, width = self.num_workers, auth.TAG_FLOATS
        keys = protocol.handshake_keys(self.num_servers)
        if self.rank == 0:  # our server installs the updater that answers at its first message
            self.kv._send_command_to_servers(0, START_MESSAGE)  # returns once every server ran it
        self.kv.init(keys, [mx.nd.zeros((n * width,)) for _ in keys])
        rows = []
        for k in keys:
            mine = np.zeros((n, width), np.float32)
            mine[self.rank] = auth.tag(self.secret, "handshake", self.rank, k)
            rows.append(mx.nd.array(mine.reshape(-1)))
        for k, v in zip(keys, rows):
            self.kv.push(k, v)
        outs = [mx.nd.zeros((n * width,)) for _ in keys]
        for k, o in zip(keys, outs):
            self.kv.pull(k, out=o)  # ordered after this worker's push of the same key
        return {s: o.asnumpy().reshape(n, width) for s, o in enumerate(outs)}

    def exchange(self, row):
        """Checkpoint reports: every worker's `row` (protocol.REPORT_WIDTH small floats) and
        every server's (code, errno) of its last save or load. Returns ([N, W] rows, [S, 2]).
        One proven round per server (its report key): dist_sync answers a pull only once every
        worker has pushed, and a server runs commands and updates in order, so the answers come
        after every worker's push and every server's part of the command before it."""
        keys = protocol.report_keys(self.num_servers)
        n, width = self.num_workers, protocol.REPORT_WIDTH
        if not self.reports_open:
            self.init(keys, [mx.nd.zeros(((n + 1) * width,)) for _ in keys])
            self.command({"op": "report", "keys": keys})
            self.reports_open = True
        mine = np.zeros((n + 1, width), np.float32)  # the last row is the server's
        mine[self.rank] = row
        answers = [self.round_trip(k, mine).reshape(n + 1, width) for k in keys]
        return answers[0][:n], np.array([a[n, :2] for a in answers])

    def server_message(self, s):
        return None  # on its machine: its output says why (the job's output, with our launcher)

    def open_tally(self, key, width):
        """A key whose every update stores the sum of the workers' pushes (see tally)."""
        self.init([key], [mx.nd.zeros((width,))])
        self.command({"op": "tally", "keys": [key]})

    def tally(self, key, value):
        """Sum of every worker's `value` (float32 [width]) for this round, on every worker.

        One push and one pull, no barrier: in dist_sync the server answers a push only after
        all workers' pushes of that round are summed and stored, and MXNet orders this
        worker's pull of the key after its push; a worker's next push cannot reach the server
        before its pull of this round (one connection, in order)."""
        return self.round_trip(key, value)

    def pushpull(self, key, wire):
        """MXNet's own pushpull (one ps-lite request: the server answers the push with the
        updated value), into the array pushed, where every pull of the key lands (round_trip)."""
        self.kv.pushpull(key, wire, out=wire)

    def push_after(self, earlier, wire):
        """An engine operation that does nothing (native), reading `earlier` and writing
        `wire`: MXNet starts the push that reads `wire` after it, so after the pulls into
        `earlier`."""
        engine_ops.order(reads=earlier, writes=[wire])

    def wire_row(self, key):
        """Where this worker's wire floats for payload key `key` go before push_payload."""
        return self.codes[key]

    def set_pull(self, key, flag):
        """The pull flag of this worker's next push of payload key `key` (written where it
        changes: a synchronous copy, as the proof's)."""
        place = self.flags[key]
        if place[1] != flag:
            place[0]._sync_copyfrom(np.array([flag], np.float32))
            place[1] = flag

    def push_row(self, key):
        """Push this worker's row of fp32 rows key `key`: its bucket's comm_wire as it is now
        (data and proof), copied into the reused row_sparse array (a synchronous copy, after the
        engine's writes of comm_wire: MXNet copies a sparse push into a buffer of its own, so
        the row is free again once pushed), then out."""
        check_call(_LIB.MXNDArraySyncCopyFromNDArray(self.fp32_rows[key].handle, self.row_sources[key].handle,
                                                     ctypes.c_int(-1)))
        self.kv.push(key, self.fp32_rows[key])

    def push_payload(self, key):
        """Push this worker's row: the staging row goes into the reused row_sparse array (an
        engine op that keeps the one non-zero row: wire floats are >= 1.0), then out."""
        mx.nd.sparse.cast_storage(self.staging[key], "row_sparse", out=self.payloads[key])
        self.kv.push(key, self.payloads[key])

    def request_acks(self, payload_keys):
        """Ask for the acknowledgement of this worker's latest push to each payload key (or
        fp32 rows key: the same holds for it).

        MXNet copies a sparse push into a private buffer, so waiting on the pushed array does
        not wait for the push itself. A pull of the same key is ordered after the push on the
        worker (it writes that private buffer), and the push completes only when the server
        acknowledges it, after the update: so a row_sparse_pull of no rows, once complete, is
        the acknowledgement, at the cost of one empty message."""
        for k in payload_keys:
            self.kv.row_sparse_pull(k, out=self.acks[k], row_ids=self.no_rows)

    def wait_acks(self, payload_keys):
        for k in payload_keys:
            self.acks[k].wait_to_read()

    def trace_ack(self, tracer, key, start_us, **args):
        tracer.watch("wait push", self.acks[key], start_us, **args)

    def pull_after_acks(self, pulls):
        """pulls: [(payload key, weight key, out)]. Pull each W into out once this worker's
        latest push to the payload key is acknowledged (request_acks first), without waiting
        here: an engine op that does nothing (native, no Python on the engine's thread) reads
        the acknowledgement array and writes out, and MXNet orders the pull of the weight key
        after it, since it pulls into out itself (the array every push of the key comes from,
        see round_trip)."""
        for pk, wk, out in pulls:
            if self.wires.get(wk) is out:
                engine_ops.order(reads=[self.acks[pk]], writes=[out])
            else:  # out is not where MXNet pulls the key into: wait here
                self.wait_acks([pk])
            self.kv.pull(wk, out=out)

    def pull(self, key, out):
        self.kv.pull(key, out=out)

    def set_learning_rate(self, lr):
        self.command({"op": "set_lr", "lr": lr})

    def follow_rescale(self, rescale_grad):
        pass  # gluon refuses a new batch size on a distributed kvstore: the servers keep theirs

"""A server node: commands, each key's round routed to its job, never a silent failure. The
global update (decoding, the optimizer) is server_update.py's, the proofs' server side
proofs.py's; the whole path is drawn in docs/design.md.

API: run_node(), run_scheduler(), serve_if_not_worker(); ServerState(rank, secret), MXNet's
updater signature (key, grad, weight) plus receive(cmd_id, body) for the controller.

Run as `python -m cdsgd_mx.server` with DMLC_ROLE=server (or scheduler): the launcher does this.
The entry imports MXNet as a worker would (so MXNet's own server loop does not start on import),
then runs the server loop itself with two changes to stock behaviour:

- The updater is a ServerState: every weight key is updated by the global optimizer the workers
  sent (an "optimizer" command: plain data, optimizer_spec.py), with one optimizer state per
  weight key whichever path the gradient took. A payload key carries 2-bit codes (ternary16
  rows, one per worker); its update decodes each row, sums them and applies the global
  optimizer to the paired weight. An fp32 rows key (fp32_sum='rank') carries each worker's
  fp32 push as its own row; its update adds the rows in rank order (MXNet adds a dense key's
  pushes in arrival order, which float addition does not forgive) and runs the paired weight
  key's fp32 round on the sum, as if it had been pushed there.
- Any exception in an update or an authenticated command is printed with its traceback and ends
  the server process (exit code 70), so the launcher sees it and brings the job down, instead
  of MXNet's silent swallow and a hung job.
- Nothing that arrives from the network is unpickled, and a command acts only if it carries
  the job's MAC (auth.py) and a sequence number above the last one seen: anything else is
  dropped, counted and logged ("dropped message N"), and the server goes on.
- Each server draws a nonce at its start and hands it out in its handshake answer; its commands
  and push proofs are keyed by the session key auth.session_key(secret, nonce), so what was
  recorded in another job with the same secret does not check here.

Worker rank 0 first sends START_MESSAGE (no action: MXNet creates its server object only when
its loop runs, so the controller installs the updater, which answers the handshake, at the
first message). Commands (sent by worker rank 0 as MXNet controller commands, id 0):
  "cdsgd:" + MAC_0 + "," + ... + MAC_{S-1} + ":" + JSON, JSON = {"seq": n, "op": ...},
  MAC_s = auth.mac(server s's session key, "command", JSON): server s checks the one at its rank
  {"op": "optimizer", "spec": {...}}  the global optimizer (optimizer_spec.describe)
  {"op": "register", "weights": [wk...], "slots": {wk: [[state id, begin, end], ...]},
   "payloads": {pk: [wk, n, threshold]}, "rows": {rk: wk}, "parts": {part: [wk, begin, end, n]}}
      a bucket's parameters (slots) inside its weight key, each with its own optimizer state
      and index (a part's too: its round steps [begin, end) of its bucket's weights); the next
      update of each listed weight key only records the weight (registration round)
  {"op": "set_lr", "lr": float}   the global optimizer's learning rate from now on
  {"op": "assign", "keys": [k...]} the next update of each key stores the workers' sum
  {"op": "tally", "keys": [k...]}  every update of each key stores the workers' sum (votes)
  {"op": "save" | "load", "path": p, "id": i}  the optimizer and its states, to/from the
      checkpoint file p.<i>.server<rank> (checkpoint.py); the result (never an exit: the workers
      stop the job) goes into this server's row of the report keys
  {"op": "prune", "path": p, "keep": i | "only": i}  delete this server's files of checkpoint p
      of every other save (keep) or of that save (only: a failed one)
  {"op": "report", "keys": [k...]}  tally keys whose every update also carries, after the
      workers' rows, this server's result of the last save or load
Handshake keys (protocol.handshake_keys, no command needed): each worker pushes its MAC tag in
its own row (keyed by the secret itself); the update answers, per row, whether the tag checks,
a mark only this server writes and this server's nonce (handshake_answer).
Every other push ends with a proof region (protocol.py, docs/design.md "Authenticated pushes"):
a round acts only when every worker's tag checks for the bucket's round count, and the new
count is written after the data for the workers to check (proofs.ServerProofs).
"""
import json
import os
import sys
import traceback

import numpy as np

from cdsgd_mx.wire import auth, proofs, protocol
from cdsgd_mx import codec
from cdsgd_mx.cluster import address, heartbeat, hub
from cdsgd_mx.mxnet_import import import_mxnet
from cdsgd_mx.wire.proofs import FP32, FP32_TRACKED
from cdsgd_mx.wire.pull_compression import PULL_2BIT, ServerCopies
from cdsgd_mx.server.global_update import GlobalUpdate
from cdsgd_mx.wire.stages import Stages

COMMAND_PREFIX = "cdsgd:"
START_MESSAGE = "cdsgd-start"  # rank 0's first message: it only makes MXNet call the controller
CONTROLLER_COMMAND_ID = 0  # the only command id MXNet's C++ server hands to Python (kController)
EXIT_SERVER_ERROR = 70
EXIT_STOCK_WORKER = 78  # EX_CONFIG: a worker runs MXNet's own kvstore against our servers
SERVER_THREADS = "CDSGD_SERVER_THREADS"


def server_threads(environ=os.environ):
    """Threads of the server's codec passes (decode and update, the pull's aim and encode):
    CDSGD_SERVER_THREADS, default 1. On a server host with cores to spare, more cut those
    passes (a 2^20-value bucket's both-ways passes 1.4x faster on 2 idle cores); where the
    server shares its cores with workers (the emulated cluster on 2 cores) they gained nothing
    (docs/usage.md, "Servers with cores to spare"). The results do not depend on the count: the codec splits work on
    chunk boundaries and sums in a fixed order."""
    value = environ.get(SERVER_THREADS, "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError("%s must be an integer >= 1, got %r" % (SERVER_THREADS, value))
    return int(value)


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_FREED = 256 << 20   # bytes of freed heap a server keeps (trim threshold)
MMAP_ABOVE = 32 << 20    # allocations from mmap only above this (glibc's largest allowed)


def keep_freed_memory():
    """A server receives every push into fresh buffers (ps-lite's receive thread) and frees
    them once the update ran. glibc handed that memory back to the kernel at each free (its
    trim and mmap thresholds follow the sizes freed), so every message page-faulted anew:
    ~1200 faults a round on Inception-BN's fp32 round in 2^16-value buckets, all on the
    server. With the thresholds fixed high, the freed buffers are reused (docs/performance.md,
    "What keeps our rounds above 1.2x the bound"). Returns whether glibc took both settings
    (False elsewhere: nothing changes)."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    trimmed = mallopt(M_TRIM_THRESHOLD, KEEP_FREED)  # (each tried, whatever the other gives: 1 = taken)
    mapped = mallopt(M_MMAP_THRESHOLD, MMAP_ABOVE)
    return trimmed == 1 and mapped == 1


def die(context):
    """Print the current exception and end this process at once (no Python cleanup that could
    block in ps-lite)."""
    sys.stderr.write("cdsgd_mx server error in %s:\n%s" % (context, traceback.format_exc()))
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(EXIT_SERVER_ERROR)


class ServerState:
    """One server's side of the job (or in process for kvstore='local'): commands, the routing
    of each key's round, its proofs (proofs.py), the global update (server_update.py) and the
    server's checkpoint file."""

    def __init__(self, rank=0, secret=None):
        self.rank = rank
        self.secret = secret      # the job's secret (bytes): handshake tags are checked with it
        # a new nonce per server start: its session key checks everything after the handshake,
        # so messages recorded in another job with the same secret are refused here
        self.nonce = auth.new_nonce()
        self.session = auth.session_key(secret, self.nonce) if secret is not None else None
        self.num_servers = int(os.environ.get("DMLC_NUM_SERVER", "1"))  # MACs a command carries
        self.last_seq = -1        # the highest command sequence number acted on (replays are dropped)
        self.started = False      # rank 0's START_MESSAGE came: before it, only a stock MXNet worker sends
        self.dropped = 0          # messages dropped: not from the job (no or a wrong MAC, a replay)
        self.num_workers = int(os.environ.get("DMLC_NUM_WORKER", "1"))
        # the proof after every pushed array, and the round counts (proofs.py); none in process
        self.proofs = proofs.ServerProofs(self.session, self.num_workers, self.drop)
        self.region = self.proofs.region
        self.update = GlobalUpdate()  # the global optimizer and its states (server_update.py)
        self.copies = ServerCopies()  # 2-bit pulls: V per bucket and its down payload (pull_compression.py)
        self.stages = Stages.from_env()  # where compressed rounds go (CDSGD_SERVER_STATS: bench.comm)
        self.copies.stages = self.stages
        self.downs = {}           # down key -> (weight key, n, its pieces): registered with 2-bit pulls
        self.parts_in = {}        # 2-bit pulls: weight key -> its parts applied in this fp32 round (_part_done)
        self.parts_of = {}        # weight key -> its parts' keys (buckets.partition)
        self.tracked_next = set()  # in process (no proofs): weight keys whose next fp32 round is tracked
        self.to_assign = set()    # weight keys whose next update sets the weight to the sum
        self.tallies = set()      # keys whose every update stores the sum (per-step votes)
        self.weights = {}         # weight key -> the server's stored weight (shared memory)
        self.payloads = {}        # payload key -> (weight key, n, threshold)
        self.rows = {}            # fp32 rows key -> its weight key (fp32_sum='rank')
        self._sums = {}           # fp32 rows key -> the buffer its rows are summed into
        self.to_register = set()  # weight keys whose next update only records the weight
        self.reports = set()      # tally keys that carry checkpoint_result after the workers' rows
        self.checkpoint_result = (0, 0)  # (checkpoint code, errno) of the last save or load
        self.checkpoint_error = None     # its one-line message (the workers of kvstore='local' show it)
        # tests: each round's V (2-bit pulls) as "weight key, round, crc32" lines in this file
        self.copy_log = os.environ.get("CDSGD_COPY_LOG")

    # -- the global update (server_update.py) ----------------------------------------------
    @property
    def optimizer(self):
        return self.update.optimizer

    @property
    def updater(self):
        return self.update.updater

    def set_optimizer(self, optimizer):
        self.update.set_optimizer(optimizer)
        self._aim_with(optimizer)

    def _aim_with(self, optimizer):
        """2-bit pulls aim with the global optimizer's momentum (pull_compression.py)."""
        self.copies.lookahead = float(getattr(optimizer, "momentum", 0.0) or 0.0)

    def command(self, msg):
        """An authenticated command (a dict, or its JSON text)."""
        if isinstance(msg, str):
            msg = json.loads(msg)
        if msg["op"] == "optimizer":
            from cdsgd_mx.wire import optimizer_spec
            self.same_numerics(msg.get("numerics"))
            self.set_optimizer(optimizer_spec.build(msg["spec"]))
        elif msg["op"] == "register":
            for pk, (wk, n, threshold) in msg["payloads"].items():
                self.payloads[int(pk)] = (int(wk), int(n), float(threshold))
            for dk, (wk, n, pieces) in msg.get("downs", {}).items():
                self.downs[int(dk)] = (int(wk), int(n), [(int(b), int(e)) for b, e in pieces])
            for rk, wk in msg.get("rows", {}).items():
                self.rows[int(rk)] = int(wk)
            for part, place in msg.get("parts", {}).items():  # (buckets.partition)
                self.update.parts[int(part)] = tuple(int(v) for v in place)
                self.parts_of.setdefault(int(place[0]), set()).add(int(part))
            for wk, slots in msg.get("slots", {}).items():
                self.update.register(int(wk), slots)
            self.to_register.update(int(k) for k in msg["weights"])
            self.update.summing.update(int(k) for k in msg.get("sum", []))
        elif msg["op"] == "multipliers":  # changed during training: from the next update on
            self.update.set_multipliers(msg["slots"])
        elif msg["op"] == "skip":  # the next update of these parameters is skipped (gluon's stale rule)
            self.update.skip_next(msg["ids"])
        elif msg["op"] == "set_lr":
            self.update.optimizer.set_learning_rate(float(msg["lr"]))
        elif msg["op"] in ("save", "load"):
            self.checkpoint(msg["op"], msg["path"], msg["id"])
        elif msg["op"] == "prune":
            from cdsgd_mx.wire import checkpoint
            checkpoint.remove_stale(msg["path"], "server%d" % self.rank, keep=msg.get("keep"), only=msg.get("only"))
        elif msg["op"] == "tally":
            self.tallies.update(int(k) for k in msg["keys"])
        elif msg["op"] == "report":
            self.tallies.update(int(k) for k in msg["keys"])
            self.reports.update(int(k) for k in msg["keys"])
        elif msg["op"] == "assign":
            self.to_assign.update(int(k) for k in msg["keys"])
        else:
            raise ValueError("unknown cdsgd command %r" % (msg["op"],))

    # -- updates --------------------------------------------------------------------------
    def __call__(self, key, grad, weight):
        """MXNet's updater signature: (key, merged gradient, stored value)."""
        key = int(key)
        # MXNet merges the workers' pushes into `grad` asynchronously, reading buffers it frees
        # once this handler returns; an update that never reads `grad` (a registration round)
        # would otherwise let that merge run on freed memory (seen: a server segfault in Plus).
        grad.wait_to_read()
        if key >= protocol.HANDSHAKE_BASE:  # proof that this server is ours and holds the job's secret
            rows = grad.asnumpy().reshape(-1, auth.TAG_FLOATS)  # the server's arrays are flat
            weight[:] = self.handshake_answer(key, rows).reshape(weight.shape)
            weight.wait_to_read()
            return
        if key in self.payloads:
            self.apply_payload(key, rows_numpy(grad), grad.indices)  # waits on the paired weight
            return
        if key in self.rows:
            self.apply_rows(key, rows_view(grad), grad.indices)
            return
        self.apply_fp32(key, grad, weight)

    def apply_fp32(self, key, grad, weight):
        """An fp32 round of weight key `key`: grad holds the workers' sum (the data, then the
        proof region), weight the key's stored array. The pushes came to the key itself (summed
        by MXNet in arrival order) or as rows of its rows key (summed in rank order: apply_rows)."""
        n = weight.size - self.region
        tracked = key in self.tracked_next  # (in process; over the network the proof's kind says it)
        self.tracked_next.discard(key)
        if self.region:
            announced = key in self.update.slots or key in self.tallies or key in self.to_assign or \
                key in self.to_register
            kinds = (FP32, FP32_TRACKED) if self.copies_of(key) in self.copies else (FP32,)
            kind = self.proofs.proven(key, grad, n, announced, kinds)
            if not kind:
                return  # dropped: weights and counts unchanged, so the workers send it again (backends.applied)
            tracked = kind == FP32_TRACKED
            grad, whole, weight = grad[0:n], weight, weight[0:n]
        if key in self.to_assign or key in self.tallies:  # W = what the workers pushed
            self.to_assign.discard(key)
            weight[:] = grad
            if key in self.copies:
                self.copies.set_weights(key, weight)
            if key in self.reports:  # the last row is this server's
                code, errno = self.checkpoint_result
                from mxnet import ndarray as nd
                weight[n - protocol.REPORT_WIDTH:n] = nd.array([code, errno, 0, 0])  # an engine op, after the sum
        elif key in self.to_register:
            self.to_register.discard(key)
            self.weights[key] = whole if self.region else weight  # registration round: record only
            if key in self.downs:  # a down key: V starts as its bucket's weights
                wk, size, pieces = self.downs[key]
                self.copies.register(key, wk, size, pieces, self.weights[key], self.weights[wk])
        elif key in self.update.parts:  # a part: its round steps its stretch of the bucket's weights, then answers with it
            wk, begin, end, _ = self.update.parts[key]
            if wk not in self.weights:
                raise RuntimeError("part %d of weight key %d arrived before the bucket was registered" % (key, wk))
            stretch = self.weights[wk][begin:end]
            self.update.apply_sum(key, stretch, grad)
            weight[:] = stretch
            if wk in self.copies:
                self._part_done(key, wk, tracked)
        else:
            self.update.apply_sum(key, weight, grad)
            if key in self.copies and tracked:  # V += the codes of W - V, which every worker encodes from W
                self.copies.after_update(key, weight, PULL_2BIT, tracked=True)
            elif key in self.copies:  # an fp32 round pulls W: V := W (an exact re-sync)
                self.copies.resync(key, weight)
        (whole if self.region else weight).wait_to_read()  # pulls read the store without waiting for the engine
        if self.region:
            self.proofs.count_round(key, whole, n, self.copies.count_place(key))
            self._log_copy(key)

    def copies_of(self, key):
        """The weight key whose V (2-bit pulls) an fp32 round of `key` moves: its bucket's for a part."""
        return self.update.parts[key][0] if key in self.update.parts else key

    def _part_done(self, key, wk, tracked):
        """With 2-bit pulls, V follows W once the round's last part of bucket wk is in, as after a
        whole bucket's fp32 round: V += the codes of W - V (tracked: the workers encode them from
        the W they pulled, part by part), or V := W. A worker pushes the bucket's next codes only
        after every part's W is back, so no 2-bit round can come in between."""
        done = self.parts_in.setdefault(wk, set())
        done.add(key)
        if len(done) < len(self.parts_of[wk]):
            return
        del self.parts_in[wk]
        if tracked:
            self.copies.after_update(wk, self.weights[wk], PULL_2BIT, tracked=True)
        else:
            self.copies.resync(wk, self.weights[wk])
        if self.region:
            self._log_copy(wk)

    def handshake_answer(self, key, rows):
        """rows: [N, TAG_FLOATS], worker r's tag in row r (the others pushed zeros there).
        Row r of the answer: [1 if r's tag checks with this server's secret else -1, MARK, nonce]."""
        answer = np.zeros(rows.shape, np.float32)
        for r in range(rows.shape[0]):
            ok = self.secret is not None and auth.tag_matches(self.secret, rows[r], "handshake", r, key)
            answer[r, 0] = 1.0 if ok else -1.0
            answer[r, 1] = protocol.HANDSHAKE_MARK
            answer[r, 2:] = self.nonce
        return answer

    def receive(self, cmd_id, body):
        """A controller message from the network: act on it only if it is the job's."""
        try:  # nothing before the MAC check may end the server: anyone can send this
            text = message_text(body)
            if cmd_id == CONTROLLER_COMMAND_ID and text == START_MESSAGE:
                self.started = True  # a cdsgd_mx worker of the job has begun
                return  # nothing to do: the controller has installed the updater (_controller)
            if cmd_id != CONTROLLER_COMMAND_ID or not text.startswith(COMMAND_PREFIX):
                return self.drop("not a cdsgd_mx command (id %s, %d bytes)" % (cmd_id, len(text)))
            given, sep, payload = text[len(COMMAND_PREFIX):].partition(":")
            macs = given.split(",")  # one per server; this server's is at its rank (set by _controller)
            proven = sep and len(macs) == self.num_servers and \
                auth.verify(self.session, macs[self.rank], "command", payload)
        except Exception as e:
            return self.drop("a message that is not a command (%s)" % type(e).__name__)
        if not proven:
            return self.drop("a command without the job's MAC")
        msg = json.loads(payload)
        if not isinstance(msg.get("seq"), int) or msg["seq"] <= self.last_seq:
            return self.drop("a replayed command (sequence %r, last %d)" % (msg.get("seq"), self.last_seq))
        self.last_seq = msg["seq"]
        self.command(msg)

    def same_numerics(self, theirs):
        """The workers' numerics mode must be this server's: a launcher that did not pass
        CDSGD_NUMERICS to every node ends the job here, in one line, not in a mixed run."""
        from cdsgd_mx import numerics
        if theirs is None or theirs == numerics.active():
            return
        sys.stderr.write("cdsgd_mx server %d: the workers run %s numerics and this server %s: every node of a job "
                         "must run the same mode; pass %s=%s to every node (tools/launch.py over ssh: inside the command)\n"
                         % (self.rank, theirs, numerics.active(), numerics.ENV, theirs))
        sys.stderr.flush()
        os._exit(EXIT_SERVER_ERROR)

    def drop(self, why):
        """Count a message that is not the job's; log the first 100, then every 1000th (a flood
        from outside must not flood the job's output)."""
        self.dropped += 1
        if self.dropped <= 100 or self.dropped % 1000 == 0:
            sys.stderr.write("cdsgd_mx server %d: dropped message %d: %s\n" % (self.rank, self.dropped, why))
            sys.stderr.flush()
        return False

    # -- checkpoints: the global optimizer and its state per slot ---------------------------
    def checkpoint(self, op, fname, sid):
        """Save or load this server's file of checkpoint set `sid`. A failure is recorded for
        the workers (checkpoint_result) and logged in one line; the server goes on, so that the
        workers can remove the failed set's files and stop the job with the error."""
        from cdsgd_mx.wire import checkpoint
        path = checkpoint.file_path(fname, sid, "server%d" % self.rank)
        try:
            if op == "save":
                self.save(path, sid)
            else:
                self.load(path, sid)
            self.checkpoint_result, self.checkpoint_error = (checkpoint.OK, 0), None
        except Exception as e:
            self.checkpoint_result = checkpoint.result_of(e)
            self.checkpoint_error = str(e) if isinstance(e, checkpoint.Damaged) else \
                "could not %s %s: %s" % ("write" if op == "save" else "load", path, checkpoint.oneline(e))
            sys.stderr.write("cdsgd_mx server %d: checkpoint %s failed: %s\n" % (self.rank, op, self.checkpoint_error))
            sys.stderr.flush()

    def save(self, path, sid):
        import pickle
        from cdsgd_mx.wire import checkpoint
        checkpoint.write_file(path, sid, pickle.dumps({"optimizer": self.update.optimizer, "states": self.update.states(),
                                                       "copies": self.copies.values()}))

    def load(self, path, sid):
        """Everything is read and checked before anything changes: a damaged file leaves the
        server as it was."""
        import pickle
        from cdsgd_mx.wire import checkpoint
        body = checkpoint.read_file(path, sid)
        try:
            saved = pickle.loads(body)
            optimizer, states = saved["optimizer"], GlobalUpdate.read_states(saved["states"])
            copies = {int(wk): np.asarray(v, np.float32) for wk, v in saved.get("copies", {}).items()}
        except Exception as e:
            raise checkpoint.Damaged("checkpoint file %s is missing, corrupted or truncated: %s"
                                     % (path, checkpoint.oneline(e))) from None
        self.update.restore(optimizer, states)
        self._aim_with(self.update.optimizer)  # (the checkpoint's optimizer, where it differs)
        self.copies.restore(copies)

    def apply_rows(self, rk, rows, row_ids):
        """rows: [r, m] fp32 rows of rows key rk, one per worker that pushed (row_ids: their
        ranks), each what that worker would have pushed to the paired weight key. Their sum in
        rank order is that key's round (apply_fp32), the same bits in whatever order they came."""
        wk = self.rows[rk]
        if wk not in self.weights:
            raise RuntimeError("rows key %d arrived before weight key %d was registered" % (rk, wk))
        weight = self.weights[wk]
        ranks = [int(r) for r in row_ids.asnumpy()]
        if self.region and not self.proofs.one_row_each("rows key %d" % rk, ranks, rows.shape[1], weight.size):
            return  # first: anyone can push (the proofs are checked on the sum, by apply_fp32)
        self.apply_fp32(wk, self._rank_sum(rk, rows, ranks), weight)

    def _rank_sum(self, rk, rows, ranks):
        """The rows' float32 sum in rank order (rank 0's row, + rank 1's, ...), into the buffer
        kept for rows key rk; waited for, since the rows may be a view of MXNet's merge buffer
        (rows_view), which the engine does not order against these reads."""
        out = self._sums.get(rk)
        if out is None:
            from mxnet import ndarray as nd
            out = self._sums[rk] = nd.zeros((rows.shape[1],), ctx=rows.context)
        order = sorted(range(len(ranks)), key=ranks.__getitem__)
        rows[order[0]].copyto(out)
        for i in order[1:]:
            out += rows[i]
        out.wait_to_read()
        return out

    def apply_payload(self, pk, rows, row_ids):
        """rows: [r, m] wire floats, one row per worker that pushed (row_ids: their ranks)."""
        wk, n, threshold = self.payloads[pk]
        t = self.stages.start()
        wire = rows if isinstance(rows, np.ndarray) else rows.asnumpy()
        pull = wk in self.copies  # (2-bit pulls: the rows carry a pull flag after the codes)
        t = self.stages.lap("rows", t)
        if self.region and not self.proofs.proven_rows(pk, wk, n, wire, row_ids, int(pull)):  # first: anyone can push
            return
        t = self.stages.lap("proof", t)
        if wk not in self.weights:
            raise RuntimeError("payload key %d arrived before weight key %d was registered" % (pk, wk))
        weight = self.weights[wk]
        words = codec.packed_size(n)
        width = words + pull + (auth.TAG_FLOATS if self.region else 0)  # the codes, (the pull flag,) then the tag
        if wire.shape[1] != width:
            raise ValueError("payload key %d: rows of %d words, expected %d" % (pk, wire.shape[1], width))
        if pull:
            flags = set(wire[:, words].tolist())
            if len(flags) != 1:
                raise ValueError("payload key %d: the workers ask for different pulls in one round (flags %s)"
                                 % (pk, sorted(flags)))
        self.update.apply_codes(pk, wk, weight, wire, n, threshold)
        t = self.stages.lap("decode + update", t)
        if pull:  # the codes of W(t+1) - V for the workers' pull, or V := W (its stages: pull_compression.py)
            self.copies.after_update(wk, weight, flags.pop())
            t = self.stages.start()
        if self.region:
            self.proofs.count_round(wk, weight, n, self.copies.count_place(wk))
            self._log_copy(wk)
        self.stages.lap("count", t)

    def _log_copy(self, wk):
        if self.copy_log and wk in self.copies:
            import zlib
            with open("%s.server%d" % (self.copy_log, self.rank), "a") as f:
                f.write("%d %d %d\n" % (wk, self.proofs.rounds[wk], zlib.crc32(self.copies.v[wk].tobytes())))


STOCK_WORKER = ("cdsgd_mx server %s: %s came before any cdsgd_mx worker started: a worker of this job runs MXNet's "
                "own kvstore (MXNet's names, --kv-store dist_sync, dist, dist_sync_device, ..., give MXNet's own "
                "store, with or without `import cdsgd_mx`), which cdsgd_mx's servers do not serve, so it would train "
                "nothing. Fix: `import cdsgd_mx` first and mx.kv.create('dist_sync_ssgd') (or dist_sync_cdsgd, ...) "
                "for our S-SGD (the same weights as MXNet's), or give the job MXNet's own servers "
                "(python -m cdsgd_mx.launch --stock-server)")


def stock_worker(state, what):
    """A stock MXNet worker in a job with our servers would have every push dropped and exit 0
    with an untrained model: stop the server at its first message, in one line. Only before the
    job's own rank 0 has started (the same message later is a stranger's: dropped, as always)."""
    sys.stderr.write(STOCK_WORKER % (state.rank, what) + "\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(EXIT_STOCK_WORKER)


def _controller(state, kv):
    installed = []

    def controller(cmd_id, cmd_body, _):
        try:
            if not installed:  # MXNet's server object exists only once its loop runs
                kv._set_updater(_updater(state))
                state.rank = kv.rank  # before receive: it picks this server's MAC of a command by it
                installed.append(True)
            if not state.started and not _ours(cmd_id, cmd_body):
                stock_worker(state, "a command that is not cdsgd_mx's (MXNet's set_optimizer?)")
            state.receive(cmd_id, cmd_body)
        except BaseException:
            die("command %d" % cmd_id)
    return controller


def rows_view(grad):
    """A row_sparse array's stored rows as a dense [r, m] NDArray on the same memory (grad.data
    copies them: 3 ms of a 4-worker round of 825k values): valid while the handler runs, since
    MXNet writes its merge buffer again only for the key's next round."""
    from mxnet import ndarray as nd
    return nd.from_dlpack(grad.to_dlpack_for_read())


class _Capsule:
    """A DLPack capsule of host memory as numpy.from_dlpack takes it."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def rows_numpy(grad):
    """rows_view's rows as a numpy array on the same memory (grad.data and asnumpy made two
    copies: about 0.1 ms a bucket of Inception-BN's 2-bit round); valid while the handler runs."""
    return np.from_dlpack(_Capsule(grad.to_dlpack_for_read()))


def message_text(body):
    """A controller message's body as text (bytes read as latin1: every byte maps to a character)."""
    return body.decode("latin1") if isinstance(body, bytes) else str(body)


def _ours(cmd_id, body):
    """A controller message our workers send (their start or a command), MAC not yet checked."""
    text = message_text(body)
    return cmd_id == CONTROLLER_COMMAND_ID and (text == START_MESSAGE or text.startswith(COMMAND_PREFIX))


def _updater(state):
    def updater(key, grad, weight):
        if not state.started and int(key) < protocol.HANDSHAKE_BASE:  # (a handshake may come before the start)
            stock_worker(state, "a push to key %s" % key)
        try:
            state(key, grad, weight)
        except BaseException:
            die("update of key %s" % key)
    return updater


def run_node():
    """Scheduler or server: run MXNet's node loop with our updater and controller."""
    import ctypes
    role = os.environ.get("DMLC_ROLE", "")
    if role not in ("server", "scheduler"):
        sys.exit("python -m cdsgd_mx.server runs a scheduler or server: set DMLC_ROLE=server|scheduler (got %r)" % role)
    if role == "scheduler":
        return run_scheduler()
    os.environ["DMLC_ROLE"] = "worker"  # importing mxnet as a server would start the stock loop
    mx = import_mxnet(server=True)  # without scikit-learn and what else a server never uses (mxnet_import.py)
    from mxnet.base import _LIB, check_call
    os.environ["DMLC_ROLE"] = role
    secret = None
    if role == "server":
        try:
            secret = auth.job_secret()
            codec.set_num_threads(server_threads())
        except (auth.SecretError, ValueError) as e:
            sys.exit("cdsgd_mx server: %s" % e)
        keep_freed_memory()
    heartbeat.start()  # to the launcher's watchdog, when it runs one: a stopped node falls silent
    kv = mx.kv.create("dist")
    heartbeat.set_phase("train")
    state = ServerState(secret=secret)
    proto = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    ctrl = proto(_controller(state, kv))
    state.stages.serving()
    check_call(_LIB.MXKVStoreRunServer(kv.handle, ctrl, None))
    stages_line = state.stages.report()
    if stages_line:  # python -m cdsgd_mx.bench.comm asks
        print(stages_line, flush=True)
    if os.environ.get("CDSGD_PROOF_STATS") and state.proofs.counted:  # python -m cdsgd_mx.bench.comm asks
        p = state.proofs
        print("PROOF_STATS %s" % json.dumps({"rounds": p.counted, "seconds": p.seconds, "cpu_seconds": p.cpu_seconds}),
              flush=True)


def run_scheduler():
    """The scheduler only runs ps-lite's node loop: it loads MXNet's library without importing
    the mxnet package (whose import costs about 2 s of CPU at every job's start)."""
    import ctypes
    import importlib.util
    path = os.path.join(os.path.dirname(importlib.util.find_spec("mxnet").origin), "libmxnet.so")
    if os.path.exists(path):
        lib = ctypes.CDLL(path, ctypes.RTLD_LOCAL)
    else:  # a build that keeps its library elsewhere: let the package find it
        os.environ["DMLC_ROLE"] = "worker"  # importing mxnet as a scheduler would start the stock loop
        from mxnet.base import _LIB as lib
        os.environ["DMLC_ROLE"] = "scheduler"
    lib.MXGetLastError.restype = ctypes.c_char_p

    def check(rc):
        if rc != 0:
            error = lib.MXGetLastError().decode("utf-8", "replace")
            sys.stderr.write("cdsgd_mx scheduler: %s\n" % error)
            sys.exit(address.EXIT_PORT_TAKEN if "bind failed" in error else 1)
    heartbeat.start()
    if not os.environ.get(heartbeat.MONITOR):  # no launcher of ours watches the job: the hub here does
        try:
            hub.serve(auth.job_secret(), os.environ["DMLC_PS_ROOT_PORT"], int(os.environ["DMLC_NUM_WORKER"]))
        except (auth.SecretError, KeyError, ValueError, OSError) as e:
            sys.stderr.write("cdsgd_mx scheduler: no hub (%s): a failed worker will not end this job's servers\n"
                             % (e.strerror if isinstance(e, OSError) else e))
    handle = ctypes.c_void_p()
    check(lib.MXKVStoreCreate(b"dist", ctypes.byref(handle)))
    heartbeat.set_phase("train")
    ctrl = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda head, body, _: None)
    check(lib.MXKVStoreRunServer(handle, ctrl, None))  # a scheduler never calls the controller


def serve_if_not_worker():
    """For clusters started with MXNet's tools/launch.py, which runs the same command for every
    role: call this at the top of a training script, before importing mxnet. On a server or the
    scheduler it runs the node and exits; on a worker it returns at once."""
    if os.environ.get("DMLC_ROLE") in ("server", "scheduler"):
        run_node()
        sys.exit(0)


USAGE = """usage: python -m cdsgd_mx.server [--stock]

A scheduler or server of a cdsgd_mx job, by DMLC_ROLE=scheduler|server and MXNet's other DMLC_*
variables (a launcher sets them: python -m cdsgd_mx.launch, cdsgd_mx.slurm, cdsgd_mx.mxnet_launch).

options:
  --stock     run MXNet's own node loop instead of ours (stock baselines: launch --stock-server)
  -h, --help  show this message and exit"""


def main():
    """python -m cdsgd_mx.server [--stock]: ours, or MXNet's own node loop (for baselines)."""
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(USAGE)
        return
    if "--stock" in sys.argv[1:] and os.environ.get("DMLC_ROLE") != "scheduler":
        import_mxnet()  # MXNet's own server loop runs on import (a scheduler's loop is ps-lite's either way)
    else:
        run_node()


if __name__ == "__main__":
    main()

"""Where a worker's pushes and pulls go: MXNet's parameter server (dist_sync), or an in-process
server for kvstore='local' / None (the same semantics with one worker)."""
import json
import os
import sys

import mxnet as mx
import numpy as np

from .server import COMMAND_PREFIX, ServerState


def _wait_to_write(arr):
    """Block until every engine op on arr is done; for a pushed array: until the server
    acknowledged the push, which it does only after the update ran."""
    mx.base.check_call(mx.base._LIB.MXNDArrayWaitToWrite(arr.handle))


def _exit_on_uncaught_exception():
    """An uncaught exception in a worker would leave it hanging in the kvstore's destructor (a
    barrier the others never reach): print it and end the process, so the launcher sees the
    failure and stops the job."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.write("cdsgd_mx: worker %s failed; exiting without the kvstore barrier\n"
                         % os.environ.get("CDSGD_LAUNCH_INDEX", "?"))
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)

    sys.excepthook = hook


class DistBackend:
    def __init__(self, name):
        _exit_on_uncaught_exception()
        self.kv = mx.kv.create(name)
        self.rank = self.kv.rank
        self.num_workers = self.kv.num_workers
        self.num_servers = int(os.environ.get("DMLC_NUM_SERVER", "1"))
        self.acks = {}  # payload key -> row_sparse array an empty pull writes (see request_acks)
        self.no_rows = mx.nd.array([], dtype="int64")

    def set_optimizer(self, optimizer):
        self.kv.set_optimizer(optimizer)

    def init(self, key, value):
        self.kv.init(key, value)

    def init_payload(self, key, words):
        # the server takes a row_sparse key's shape from its init value: store every row
        n = self.num_workers
        self.kv.init(key, mx.nd.sparse.row_sparse_array(
            (mx.nd.ones((n, words)), mx.nd.arange(n, dtype="int64")), shape=(n, words)))

    def command(self, msg):
        if self.rank == 0:
            self.kv._send_command_to_servers(0, COMMAND_PREFIX + json.dumps(msg))
        self.kv._barrier()

    def register(self, chunks, threshold):
        """Tell the servers which payload key decodes into which weight, then run the
        registration round: a zero push to every weight key, which the server only records."""
        for c in chunks:
            self.acks[c.payload_key] = mx.nd.sparse.zeros("row_sparse", (self.num_workers, c.words))
        self.command({"op": "register", "weights": [c.weight_key for c in chunks],
                      "payloads": {str(c.payload_key): [c.weight_key, c.size, threshold] for c in chunks}})
        zeros = [mx.nd.zeros((c.size,)) for c in chunks]
        for c, z in zip(chunks, zeros):
            self.kv.push(c.weight_key, z)
        for z in zeros:
            _wait_to_write(z)
        self.kv._barrier()

    def assign(self, values):
        """Set global weights: {weight key: array (rank 0's values)} (checkpoint restore)."""
        self.command({"op": "assign", "keys": list(values)})
        pushed = []
        for k, v in values.items():
            arr = v if self.rank == 0 else mx.nd.zeros(v.shape)
            self.kv.push(k, arr)
            pushed.append(arr)
        for arr in pushed:
            _wait_to_write(arr)
        self.kv._barrier()

    def gather_rows(self, key, row):
        """Every worker's `row` (small float32 values, exact), as an [N, len(row)] array: each
        worker pushes its row into a zero matrix and the server keeps the sum (assign)."""
        n = self.num_workers
        self.kv.init(key, mx.nd.zeros((n, len(row))))
        self.command({"op": "assign", "keys": [key]})
        mine = np.zeros((n, len(row)), np.float32)
        mine[self.rank] = row
        arr = mx.nd.array(mine)
        self.kv.push(key, arr)
        _wait_to_write(arr)
        self.kv._barrier()
        out = mx.nd.zeros((n, len(row)))
        self.kv.pull(key, out=out)
        return out.asnumpy()

    def open_tally(self, key, width):
        """A key whose every update stores the sum of the workers' pushes (see tally)."""
        self.kv.init(key, mx.nd.zeros((width,)))
        self.command({"op": "tally", "keys": [key]})

    def tally(self, key, value):
        """Sum of every worker's `value` (float32 [width]) for this round, on every worker.

        One push and one pull, no barrier: in dist_sync the server answers a push only after
        all workers' pushes of that round are summed and stored, and MXNet orders this
        worker's pull of the key after its push; a worker's next push cannot reach the server
        before its pull of this round (one connection, in order)."""
        arr = mx.nd.array(value)
        self.kv.push(key, arr)
        out = mx.nd.zeros(arr.shape)
        self.kv.pull(key, out=out)
        return out.asnumpy()

    def push(self, key, value):
        self.kv.push(key, value)

    def push_payload(self, key, wire_row):
        """wire_row: numpy float32 [words]: this worker's row of the payload key."""
        rsp = mx.nd.sparse.row_sparse_array(
            (wire_row.reshape(1, -1), np.array([self.rank], np.int64)), shape=(self.num_workers, wire_row.size))
        self.kv.push(key, rsp)
        return rsp

    def request_acks(self, payload_keys):
        """Ask for the acknowledgement of this worker's latest push to each payload key.

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

    def pull(self, key, out):
        self.kv.pull(key, out=out)

    def set_learning_rate(self, lr):
        self.command({"op": "set_lr", "lr": lr})


class LocalBackend:
    """kvstore='local' or None: the same semantics with one worker and the server in process."""

    rank = 0
    num_workers = 1
    num_servers = 1

    def __init__(self):
        self.server = ServerState()
        self.store = {}

    def set_optimizer(self, optimizer):
        self.server.set_optimizer(optimizer)

    def init(self, key, value):
        self.store[key] = value.copy()

    def init_payload(self, key, words):
        pass

    def command(self, msg):
        self.server.command(json.dumps(msg))

    def assign(self, values):
        for k, v in values.items():
            self.store[k][:] = v

    def gather_rows(self, key, row):
        return np.asarray(row, np.float32).reshape(1, -1)

    def open_tally(self, key, width):
        pass

    def tally(self, key, value):
        return np.asarray(value, np.float32)

    def register(self, chunks, threshold):
        self.server.command(json.dumps({"op": "register", "weights": [], "payloads": {
            str(c.payload_key): [c.weight_key, c.size, threshold] for c in chunks}}))
        for c in chunks:
            self.server.weights[c.weight_key] = self.store[c.weight_key]

    def push(self, key, value):
        self.server(key, value.copy(), self.store[key])

    def push_payload(self, key, wire_row):
        rsp = mx.nd.sparse.row_sparse_array((wire_row.reshape(1, -1), np.array([0], np.int64)),
                                            shape=(1, wire_row.size))
        self.server(key, rsp, None)
        return rsp

    def request_acks(self, payload_keys):
        pass  # pushes are applied synchronously in process

    def wait_acks(self, payload_keys):
        pass

    def pull(self, key, out):
        self.store[key].copyto(out)

    def set_learning_rate(self, lr):
        self.server.optimizer.set_learning_rate(lr)

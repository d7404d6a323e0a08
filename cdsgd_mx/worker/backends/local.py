"""An in-process server for kvstore='local' / None: the same semantics with one worker, no
network, no proofs. API: LocalBackend(), the Backend interface (base.py)."""
import json
import pickle

import numpy as np

from cdsgd_mx.wire.pull_compression import pieces_of
from cdsgd_mx.server.node import ServerState
from cdsgd_mx.worker.backends.base import Backend, registration


class LocalBackend(Backend):
    """kvstore='local' or None: the same semantics with one worker and the server in process
    (no network: no proof regions, nothing to check)."""

    rank = 0
    num_workers = 1
    num_servers = 1
    region = 0

    def __init__(self):
        self.server = ServerState()
        self.rounds = {}   # nothing is dropped in one process: no rounds to count
        self.store = {}
        self.staging = {}  # payload key -> numpy [1, words (+ the pull flag)]: the codes the next push carries
        self.words = {}    # payload key -> its code words

    def set_optimizer(self, optimizer):
        # a copy, as the servers get one: pickling drops gluon's param_dict, whose indices are
        # not the server's state ids (sharing it applied one parameter's lr_mult to another);
        # in process, so any optimizer works, also one defined in the script
        self.server.set_optimizer(pickle.loads(pickle.dumps(optimizer)))

    def init(self, keys, values):
        for k, v in zip(keys, values):
            self.store[k] = v.copy()

    def init_payloads(self, buckets, pull=False):
        for b in buckets:
            self.staging[b.payload_key] = np.zeros((1, b.words + (1 if pull else 0)), np.float32)
            self.words[b.payload_key] = b.words

    def command(self, msg):
        self.server.command(json.dumps(msg))

    def assign(self, values):
        for k, v in values.items():
            self.store[k][:] = v
            if k in self.server.copies:  # the next aim's last update starts at the assigned W
                self.server.copies.set_weights(k, self.store[k])

    def barrier(self):  # one worker: nobody to wait for
        pass

    def gather_rows(self, key, row):
        return np.asarray(row, np.float32).reshape(1, -1)

    def exchange(self, row):
        return np.asarray(row, np.float32).reshape(1, -1), np.array([self.server.checkpoint_result], np.float32)

    def server_message(self, s):
        return self.server.checkpoint_error

    def open_tally(self, key, width):
        pass

    def tally(self, key, value):
        return np.asarray(value, np.float32)

    def register(self, buckets, threshold, compressing, aggregate=False):
        msg = registration(buckets, threshold, compressing, aggregate)
        msg["weights"] = []  # no registration round: the weights are at hand
        self.server.command(msg)
        for b in buckets:
            self.server.weights[b.weight_key] = self.store[b.weight_key]
            if b.down_key is not None:
                self.server.copies.register(b.down_key, b.weight_key, b.size, pieces_of(b), self.store[b.down_key],
                                            self.store[b.weight_key])

    def pushpull(self, key, wire):
        self.server(key, wire.copy(), self.store[key])
        self.store[key].copyto(wire)

    def push_after(self, earlier, wire):
        pass  # pulls land before pushpull returns, in process

    def wire_row(self, key):
        return self.staging[key][0, :self.words[key]]

    def seal(self, bucket, tracked=False):
        if tracked:  # no proof to carry the kind in process: tell the server directly
            self.server.tracked_next.add(bucket.weight_key)

    def bucket_applied(self, bucket, down=False):
        return True  # in process: every push is applied at once

    def resend(self, bucket, compressed, gradient, pull_down=False, tracked=False, rows=False):
        raise RuntimeError("kvstore='local' never drops a round: nothing to send again")

    def seal_next(self, bucket, tracked=False):
        pass

    def set_pull(self, key, flag):
        self.staging[key][0, -1] = flag

    def push_payload(self, key):
        self.server.apply_payload(key, self.staging[key], None)

    def push_row(self, key):
        raise RuntimeError("kvstore='local' has no fp32 rows keys: one worker's sum has one order")

    def request_acks(self, payload_keys):
        pass  # pushes are applied synchronously in process

    def wait_acks(self, payload_keys):
        pass

    def pull_after_acks(self, pulls):
        for _, wk, out in pulls:
            self.pull(wk, out)

    def trace_ack(self, tracer, key, start_us, **args):
        pass  # applied at once, in process

    def pull(self, key, out):
        self.store[key].copyto(out)

    def set_learning_rate(self, lr):
        self.server.optimizer.set_learning_rate(lr)

    def follow_rescale(self, rescale_grad):
        self.server.optimizer.rescale_grad = rescale_grad  # gluon sets it from each step's batch size

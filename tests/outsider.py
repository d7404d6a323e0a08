"""A process outside the job, for the security tests: it speaks ps-lite's wire to a node's port.

ps-lite (MXNet 1.9.1's 3rdparty/ps-lite, zmq_van.h) reads a message as ZeroMQ frames: the
sender's identity ("ps<node id>", added by the receiving ROUTER socket), a protobuf PBMeta
(meta.proto), then the data frames. The identity is the message's sender, and the server sends
its answer to that node id over its own connection: "ps09" reads as node 9, the first worker, so
the answer lands there with timestamp 0, a request that worker finished long ago (ps-lite then
counts one answer too many for it and does nothing else). An identity no node has would make
ps-lite abort the server when it answers (docs/failures.md).
"""
import os
import socket

import zmq

CONTROLLER = 0   # MXNet's command ids (kvstore_dist_server.h CommandType)
STOP_SERVER = 2
FIRST_WORKER_ID = 9  # ps-lite: scheduler 1, servers 8, 10, ..., workers 9, 11, ...


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, value):
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    return _varint(number << 3) + _varint(int(value))


def meta(head=0, body=b"", request=True, push=False, pull=False, simple_app=False, app_id=0, customer_id=0,
         timestamp=0, data_type=(), data_size=0):
    """PBMeta: head 1, body 2, request 4, push 5, simple_app 6, app_id 7, timestamp 8,
    data_type 9 (packed), customer_id 10, data_size 11, pull 12."""
    out = _field(1, head)
    if body:
        out += _field(2, body)
    out += _field(4, request) + _field(5, push) + _field(6, simple_app) + _field(7, app_id) + _field(8, timestamp)
    if data_type:
        out += _field(9, b"".join(_varint(d) for d in data_type))
    out += _field(10, customer_id) + _field(11, data_size) + _field(12, pull)
    return out


def send(port, *messages, identity=b"ps%02d" % FIRST_WORKER_ID, host="127.0.0.1"):
    """Send messages (each a list of frames: meta, then data) to host:port over one connection,
    in order, and hang up. One connection, because a ROUTER socket turns away a connection whose
    identity is still held by one it has not yet seen close (ZMQ_ROUTER_HANDOVER is off), so a
    second quick connection as "ps09" could lose its message."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect("tcp://%s:%d" % (host, port))
    for frames in messages:
        sock.send_multipart(frames)
    sock.close()
    ctx.term()


def command_frames(head, body):
    """A SimpleApp request, as MXNet's kv._send_command_to_servers sends one."""
    return [meta(head=head, body=body, simple_app=True)]


def command(port, head, body):
    send(port, command_frames(head, body))


def commands(port, heads_bodies):
    """Several SimpleApp requests, sent in this order over one connection (MXNet's server may
    still handle them in another order)."""
    send(port, *[command_frames(h, b) for h, b in heads_bodies])


def push(port, key, values):
    """A dense float32 push of `values` to `key` (one server: the key is the ps-lite key), as
    KVWorker sends one: head = MXNet's request type for a default push of float32 (0), data
    frames keys (uint64), values (bytes), lengths (int32)."""
    import numpy as np
    frames = [np.array([key], np.uint64).tobytes(), np.asarray(values, np.float32).tobytes(),
              np.array([4 * len(values)], np.int32).tobytes()]
    send(port, [meta(head=0, push=True, data_type=(8, 0, 3), data_size=sum(map(len, frames)))] + frames)


def push_rows(port, key, rows, values):
    """A row_sparse float32 push of values ([len(rows), width]) to rows of `key` (one server),
    as KVStoreDist's PushRowSparse sends one: head = MXNet's request type for a row_sparse
    push of float32 (1: Cantor pairing of kRowSparsePushPull and kFloat32), keys = the key then
    key + row for each row, lengths 0 then each row's bytes."""
    import numpy as np
    values = np.asarray(values, np.float32).reshape(len(rows), -1)
    frames = [np.array([key] + [key + r for r in rows], np.uint64).tobytes(), values.tobytes(),
              np.array([0] + [4 * values.shape[1]] * len(rows), np.int32).tobytes()]
    send(port, [meta(head=1, push=True, data_type=(8, 0, 3), data_size=sum(map(len, frames)))] + frames)


def raw_bytes(port, data, host="127.0.0.1"):
    """Bytes that are not a ZeroMQ message at all."""
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(data)


def listening_ports(pid):
    """TCP ports process pid listens on (its socket inodes, looked up in /proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    with open("/proc/%d/net/tcp" % pid) as f:
        for line in list(f)[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                ports.append(int(cols[1].split(":")[1], 16))
    return ports

"""Proof that a message comes from the job: a per-job secret and MACs made with it.

The launcher makes one secret per job (`new_secret`) and hands it to each node without a
command line or a file others can read: locally through a pipe the node inherits
(CDSGD_SECRET_FD names its descriptor), over ssh on the node's standard input (cdsgd_mx.cluster.node
turns it into such a pipe). A job started another way (MXNet's tools/launch.py) names a file
only its owner can read in CDSGD_SECRET_FILE.

A MAC is HMAC-SHA256 over the message's header fields, cut to 128 bits. The start-up handshake,
keyed by the secret itself, proves that every node holds the same secret
(backends.dist.DistBackend.handshake) and hands each worker the nonce every server drew at its start.
Everything after it (commands, push proofs) is keyed by that server's session key, the secret
bound to its nonce (`session_key`): jobs that share a secret file do not accept each other's
messages. Servers act only on commands whose MAC checks (server/node.py).
"""
import hashlib
import hmac
import os
import secrets
import stat

import numpy as np

SECRET_FD = "CDSGD_SECRET_FD"
SECRET_FILE = "CDSGD_SECRET_FILE"
MAC_BYTES = 16
TAG_FLOATS = MAC_BYTES // 2  # a MAC as 16-bit integers in float32: exact through the server's sums
NONCE_WORDS = TAG_FLOATS - 2  # a server's nonce: the spare values of a handshake answer row

_secret = None


class SecretError(ValueError):
    """No usable job secret: the message says where one comes from."""


def new_secret():
    return secrets.token_hex(32)


def new_nonce():
    """A server's nonce, drawn at its start: NONCE_WORDS 16-bit integers (96 bits), exact as
    float32 values in its handshake answer."""
    return [secrets.randbits(16) for _ in range(NONCE_WORDS)]


def session_key(secret, nonce):
    """The key of one server's MACs after the handshake: the secret bound to that server's nonce
    (integers, or the floats a worker pulled), so a message made for one job's server does not
    check on another job's, even with the same secret."""
    text = "session|" + ",".join(str(int(v)) for v in nonce)
    return hmac.new(secret, text.encode(), hashlib.sha256).digest()


def handed_over(secret, env):
    """A pipe holding the secret for a process about to start: (its environment, naming the
    descriptor in SECRET_FD; the read end to pass to it and then close here)."""
    r, w = os.pipe()
    os.write(w, secret)
    os.close(w)
    return dict(env, **{SECRET_FD: str(r)}), r


def job_secret():
    """This process's job secret (bytes), read once: the pipe is consumed by reading it."""
    global _secret
    if _secret is None:
        _secret = _read_secret()
    return _secret


def _read_secret():
    fd = os.environ.pop(SECRET_FD, None)  # children of this process cannot read it again
    if fd is not None:
        try:
            fd = int(fd)
            chunks = []
            while True:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                chunks.append(chunk)
            os.close(fd)
        except (ValueError, OSError) as e:
            raise SecretError("%s=%s: cannot read the job secret from it (%s)" % (SECRET_FD, fd, e)) from None
        secret = b"".join(chunks).strip()
        if not secret:
            raise SecretError("%s=%s: the launcher handed over an empty job secret" % (SECRET_FD, fd))
        return secret
    path = os.environ.get(SECRET_FILE)
    if path:
        try:
            st = os.stat(path)
            if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise SecretError("%s=%s: the file can be read by other users (mode %o): chmod 600 it"
                                  % (SECRET_FILE, path, stat.S_IMODE(st.st_mode)))
            with open(path, "rb") as f:
                secret = f.read().strip()
        except OSError as e:
            raise SecretError("%s=%s: cannot read it: %s" % (SECRET_FILE, path, e.strerror)) from None
        if not secret:
            raise SecretError("%s=%s: the file is empty" % (SECRET_FILE, path))
        return secret
    raise SecretError("this node has no job secret: start the job with `python -m cdsgd_mx.launch`, or (MXNet's "
                      "tools/launch.py) give every node %s, a file of random text only its owner can read, e.g. "
                      "`umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > ~/.cdsgd-secret`"
                      % SECRET_FILE)


def mac(secret, *fields):
    """128-bit MAC (hex) over the fields, each written as text and joined by '|'."""
    return _raw(secret, *fields).hex()


def verify(secret, given, *fields):
    """Whether `given` (text from the network: any characters) is the MAC of the fields."""
    return isinstance(given, str) and hmac.compare_digest(given.encode("utf-8", "replace"), mac(secret, *fields).encode())


def mac_bytes(secret, *fields):
    """The MAC as its 16 bytes (what codec.tags_match compares a tag with)."""
    return _raw(secret, *fields)


_keyed = {}  # secret -> an HMAC holding it: copying one skips hashing the key's pads every time


def _raw(secret, *fields):
    base = _keyed.get(secret)
    if base is None:
        base = _keyed[secret] = hmac.new(secret, digestmod=hashlib.sha256)
    h = base.copy()
    h.update("|".join(str(f) for f in fields).encode())
    return h.digest()[:MAC_BYTES]


def tag(secret, *fields):
    """The MAC as TAG_FLOATS float32 values, each a 16-bit integer: a float sum with zeros
    (what the server does with the other workers' rows) leaves them exact."""
    return np.frombuffer(_raw(secret, *fields), dtype=">u2").astype(np.float32)


def tag_matches(secret, values, *fields):
    """Whether values (floats from the network) are exactly the tag of the fields."""
    return bool(np.array_equal(np.asarray(values, np.float32), tag(secret, *fields)))

"""All-or-nothing checkpoint sets: file names, headers, checksums and the manifest.

A checkpoint FNAME is a set of files that share one save id ("<step>-<12 hex digits>": the
data step and a random token that rank 0 draws and every node learns):
    FNAME                   the manifest (rank 0): the save id, the configuration, the
                            parameter names, the optimizer's name and hyper-parameters, `extra`
    FNAME.<id>.worker<r>    worker r's state (written by that worker)
    FNAME.<id>.server<s>    server s's optimizer and states (written by that server)
Every file starts with a one-line JSON header {"format", "id", "sha256", "bytes"} followed by
its body; the checksum covers the body, so any truncation or changed byte is found on load.

A save writes the new set under new names, each file to a temp file that is fsynced and then
renamed; only when every node has written its files does rank 0 switch the manifest (temp
file, fsync, rename, fsync of the directory). Each node then deletes its own files of older
sets. Whatever stops a save, the manifest names the last complete set. Nothing here talks to
other nodes: cdsgd_mx.worker.kvstore runs the sequence.
"""
import errno as errnos
import hashlib
import json
import os
import re
import secrets

FORMAT = "cdsgd-mx checkpoint 3"  # 3: all-or-nothing sets (ids, headers, checksums, manifest)
OLD_FORMATS = {"cdsgd-mx checkpoint 1": "fused buckets",
               "cdsgd-mx checkpoint 2": "all-or-nothing checkpoint sets"}

# what a node reports of its part of a save or load (kvstore exchanges them as floats)
OK, OS_ERROR, DAMAGED, OTHER_SAVE, FAILED = 0, 1, 2, 3, 4

_ID = r"\d+-[0-9a-f]{12}"


class Damaged(ValueError):
    """A checkpoint file that cannot be used; code says how (DAMAGED, OTHER_SAVE, OS_ERROR)."""

    def __init__(self, message, code=DAMAGED, errno=0):
        super().__init__(message)
        self.code, self.errno = code, errno


class SaveError(OSError):
    """A save that failed; the last complete checkpoint stays. One line naming the path(s)
    and the errno."""

    def __init__(self, message, errno=0):
        super().__init__(errno, message)
        self.message = message

    def __str__(self):
        return self.message


def new_token():
    """Two random 24-bit integers: exact as float32, so they travel through the servers' sums."""
    return secrets.randbits(24), secrets.randbits(24)


def save_id(step, token):
    return "%d-%06x%06x" % (step, int(token[0]), int(token[1]))


def file_path(fname, sid, node):
    """node: 'worker<r>' or 'server<s>'."""
    return "%s.%s.%s" % (fname, sid, node)


# -- one file: header, checksum, atomic write --------------------------------------------------
def write_file(path, sid, body):
    """Write header + body to a temp file, fsync it, rename it to path, fsync the directory.
    On failure the temp file is removed and the OSError raised."""
    header = json.dumps({"format": FORMAT, "id": sid, "sha256": hashlib.sha256(body).hexdigest(),
                         "bytes": len(body)}, separators=(",", ":"))  # no optional spaces: any changed byte shows
    tmp = "%s.part%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(header.encode() + b"\n")
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    _fsync_dir(os.path.dirname(path))


def read_file(path, sid=None):
    """The body of a checkpoint file whose header and checksum check, and whose save id is sid
    (None: any). Raises Damaged (a ValueError) with a one-line message, never anything else."""
    header, body = _read(path)
    if sid is not None and header["id"] != sid:
        raise Damaged("checkpoint file %s holds save %s, the manifest names save %s: a mixed set, not loaded"
                      % (path, header["id"], sid), OTHER_SAVE)
    return body


def _read(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Damaged("checkpoint file %s is missing, corrupted or truncated: %s" % (path, oneline(e)), OS_ERROR,
                      e.errno or 0) from None
    return _split(path, data)


def _split(path, data):
    """(header, body) of a file's bytes, after every check of the header and the checksum."""
    line, sep, body = data.partition(b"\n")
    try:
        header = json.loads(line.decode("ascii"))
        fields = (header["format"], header["id"], header["sha256"], header["bytes"])
    except Exception:
        old = _old_format(data)
        if old:
            raise Damaged(_old_format_message(path, old)) from None
        raise Damaged("checkpoint file %s is missing, corrupted or truncated: no valid header" % path) from None
    if fields[0] != FORMAT:
        message = _old_format_message(path, fields[0]) if fields[0] in OLD_FORMATS else \
            "checkpoint file %s is missing, corrupted or truncated: format %r, this cdsgd-mx reads %r" \
            % (path, fields[0], FORMAT)
        raise Damaged(message)
    if not sep or len(body) != fields[3]:
        raise Damaged("checkpoint file %s is missing, corrupted or truncated: %d bytes after the header, %r expected"
                      % (path, len(body), fields[3]))
    if hashlib.sha256(body).hexdigest() != fields[2]:
        raise Damaged("checkpoint file %s is missing, corrupted or truncated: its checksum (sha256) differs" % path)
    if not (isinstance(fields[1], str) and re.fullmatch(_ID, fields[1])):
        raise Damaged("checkpoint file %s is missing, corrupted or truncated: save id %r" % (path, fields[1]))
    return header, body


def _old_format(data):
    """The format field of a manifest written before format 3 (one JSON object), else None."""
    try:
        fmt = json.loads(data.decode("utf-8")).get("format")
        return fmt if fmt in OLD_FORMATS else None
    except Exception:
        return None


def _old_format_message(path, fmt):
    return ("checkpoint %s has format %r, this cdsgd-mx reads %r: checkpoints written before %s cannot be resumed "
            "(start from the saved parameters instead)" % (path, fmt, FORMAT, OLD_FORMATS[fmt]))


# -- the manifest ----------------------------------------------------------------------------
def write_manifest(fname, sid, content):
    """Switch FNAME to the set `sid` (content: a JSON-able dict): one atomic rename."""
    write_file(fname, sid, json.dumps(dict(content, id=sid), sort_keys=True).encode())


def read_manifest(fname):
    """The manifest's content (with "id"); one-line ValueError for anything else."""
    header, body = _read(fname)
    try:
        content = json.loads(body.decode("utf-8"))
        if not isinstance(content, dict) or content["id"] != header["id"]:
            raise ValueError("not a manifest")
    except Exception:
        raise Damaged("checkpoint %s is missing, corrupted or truncated: not a manifest" % fname) from None
    return content


def files_of(fname):
    """The paths of the last complete set of checkpoint fname, the manifest first (e.g. to
    copy a checkpoint elsewhere: copy them all, the manifest last)."""
    manifest = read_manifest(fname)
    try:
        return [fname] + [os.path.join(os.path.dirname(fname), name) for name in manifest["files"]]
    except Exception:
        raise Damaged("checkpoint %s is missing, corrupted or truncated: not a manifest" % fname) from None


# -- files of older or failed sets -------------------------------------------------------------
def remove_stale(fname, node, keep=None, only=None):
    """Delete this node's files of checkpoint fname (node: 'worker<r>', 'server<s>', or
    'manifest' for FNAME's temp files) whose save id is not `keep`, or is `only`; temp files
    of any id go too. Each node removes only its own: nodes need not share a file system."""
    folder, base = os.path.split(fname)
    if node == "manifest":
        pattern = re.compile(r"%s\.part\d+" % re.escape(base))
    else:
        pattern = re.compile(r"%s\.(%s)\.%s(\.part\d+)?" % (re.escape(base), _ID, re.escape(node)))
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return
    for name in names:
        m = pattern.fullmatch(name)
        if not m:
            continue
        sid = m.group(1) if node != "manifest" else None
        temp = node == "manifest" or m.group(2) is not None
        if (only is not None and sid == only) or (only is None and (temp or sid != keep)):
            _remove(os.path.join(folder, name))


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass  # gone already, or a read-only directory: nothing was written there either


def _fsync_dir(folder):
    """Make the renames durable. Best effort: some file systems refuse fsync on a directory."""
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- results of the nodes, as one-line messages ------------------------------------------------
def result_of(exc):
    """(code, errno) of an exception raised while writing or reading a node's file."""
    if isinstance(exc, Damaged):
        return exc.code, exc.errno
    if isinstance(exc, OSError):
        return OS_ERROR, exc.errno or 0
    return FAILED, 0


def remote_failure(verb, path, code, errno, sid):
    """One line for another node's failed part (its code and errno came over the network)."""
    if code == OS_ERROR:
        return "could not %s %s: [Errno %d] %s" % (verb, path, errno, os.strerror(errno) if errno else "error")
    if code == DAMAGED:
        return "checkpoint file %s is missing, corrupted or truncated (its header or checksum)" % path
    if code == OTHER_SAVE:
        return "checkpoint file %s holds another save than the manifest's %s: a mixed set, not loaded" % (path, sid)
    return "could not %s %s (that node's output says why)" % (verb, path)


def oneline(exc):
    """An exception as one line (an OSError with its errno)."""
    if isinstance(exc, OSError) and exc.errno:
        return "[Errno %d] %s" % (exc.errno, exc.strerror or errnos.errorcode.get(exc.errno, ""))
    return " ".join(str(exc).split()) or type(exc).__name__


# -- what a resuming script may want from a set ----------------------------------------------
def load_parameters(fname, rank=0):
    """{parameter name: NDArray} of worker `rank`'s weights in the last complete set of
    checkpoint fname (the weights that worker trained with; what net.save_parameters would
    have written, by the Trainer's parameter names)."""
    import pickle

    import mxnet as mx
    manifest = read_manifest(fname)
    body = read_file(file_path(fname, manifest["id"], "worker%d" % rank), manifest["id"])
    try:
        params = pickle.loads(body)["params"]
        names = manifest["param_names"]
        return {names[k] if names else str(k): mx.nd.array(p["x"]) for k, p in params.items()}
    except Exception as e:
        raise Damaged("checkpoint %s: worker %d's file does not hold parameters (%s)" % (fname, rank, oneline(e))) \
            from None

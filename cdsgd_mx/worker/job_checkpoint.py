"""Checkpoints across the job's nodes: one all-or-nothing set per save (the file format is
checkpoint.py's). Every worker calls save or load at the same step; the servers write or read
their part on command, and one exchange through them decides for everyone.

API: save(kv, fname, extra=None); load(kv, fname) -> extra; job_config(kv).
"""
import os

import mxnet as mx
import numpy as np

from cdsgd_mx.wire import checkpoint, optimizer_spec, proofs
from cdsgd_mx.cluster import heartbeat
from cdsgd_mx.worker.backends import LocalBackend
from cdsgd_mx.worker.config import AGGREGATE_CHECKPOINT, ConfigError


def save(kv, fname, extra=None):
    """Everything the algorithm depends on, at a step boundary, as one checkpoint set: on
    each server its global optimizer and states, on each worker the global weights, its own
    weights, step counters, residuals, comm_buf and local optimizer, and rank 0's manifest
    (configuration, parameter names, the optimizer, `extra`: a small JSON-able dict such as
    {"epoch": 3}). Every worker calls it at the same step. If any node cannot write its
    file, every worker raises checkpoint.SaveError naming the paths and errnos, the new
    set's files are removed, and the last complete set stays what FNAME names."""
    if kv.aggregate:
        raise ConfigError(AGGREGATE_CHECKPOINT)
    kv._fuse_fresh()  # (parameters that came one per call and have not stepped: saved as they will train)
    kv.wait_all()
    kv._ensure_registered()
    fname = os.path.abspath(fname)
    token = checkpoint.new_token() if kv.rank == 0 else (0, 0)
    rows, _ = kv._backend.exchange([0, 0, token[0], token[1]])  # rank 0's token for everyone
    sid = checkpoint.save_id(kv.steps_done, rows[0, 2:4])
    kv._backend.command({"op": "save", "path": fname, "id": sid})  # returns once every server wrote
    path = checkpoint.file_path(fname, sid, "worker%d" % kv.rank)
    own = _attempt("write", path, lambda: checkpoint.write_file(path, sid, _worker_state(kv)))
    failures = _report(kv, fname, sid, own, "write")  # also the barrier: every file is written
    if not failures:
        manifest = _manifest(kv, fname, sid, extra)
        own = _attempt("write", fname, lambda: checkpoint.write_manifest(fname, sid, manifest)) \
            if kv.rank == 0 else (checkpoint.OK, 0, None)
        failures = _report(kv, fname, sid, own, "write", manifest=True)
    if failures:
        checkpoint.remove_stale(fname, "worker%d" % kv.rank, only=sid)
        if kv.rank == 0:
            checkpoint.remove_stale(fname, "manifest")
        kv._backend.command({"op": "prune", "path": fname, "only": sid})
        raise checkpoint.SaveError("checkpoint save failed: %s; the last complete checkpoint (what %s names) "
                                   "stays" % ("; ".join(m for m, _ in failures), fname), failures[0][1])
    _prune(kv, fname, sid)


def load(kv, fname):
    """Restores the last complete set of checkpoint fname (what save
    wrote) and returns its `extra`. The job must have the same algorithm, k, warm-up,
    threshold, bucket size, numbers of workers and servers, and parameters (names and
    shapes); a missing, damaged or mixed file gives a one-line ValueError on every worker."""
    if kv.aggregate:
        raise ConfigError(AGGREGATE_CHECKPOINT)
    fname = os.path.abspath(fname)
    kv._fuse_fresh()  # the layout the checkpoint was saved in, when the parameters came one per call
    manifest = checkpoint.read_manifest(fname)
    sid = manifest["id"]
    _check_manifest(kv, fname, manifest)
    kv.wait_all()
    kv._ensure_registered()
    path = checkpoint.file_path(fname, sid, "worker%d" % kv.rank)
    worker = {}
    own = _attempt("read", path, lambda: worker.update(_read_worker_file(kv, path, sid)))
    kv._backend.command({"op": "load", "path": fname, "id": sid})
    failures = _report(kv, fname, sid, own, "read")
    if failures:
        raise ValueError("; ".join(m for m, _ in failures))
    _restore(kv, worker)
    if kv._optimizer is not None:
        kv._optimizer = _backend_optimizer(kv, fname, sid)
        kv.rules.bind(kv._optimizer)  # the settings the servers now have
    mx.nd.waitall()
    _prune(kv, fname, sid)
    return manifest["extra"]


def _worker_state(kv):
    """This worker's file of a checkpoint set (pickle)."""
    import pickle
    params = {}
    for k, bset in kv._set_of.items():
        # x of the first device: every device of this worker holds the same weights
        params[k] = {"shape": bset.shapes[k], "x": bset.outs[k][0].asnumpy(), "global": kv.global_weights(k).asnumpy()}
    sets = []
    for bset in kv._sets:
        t, in_flight = kv.engine.position(bset)
        sets.append({"layout": bset.layout(), "t": t, "in_flight": in_flight, "comm_buf": bset.comm_values(),
                     "residual": bset.residual_values(), "copy": bset.copy_values()})
    return pickle.dumps({"config": job_config(kv), "params": params, "sets": sets, "steps": (kv.steps_done, kv._updates),
                         "local": kv.local.get_states()})


def _manifest(kv, fname, sid, extra):
    nodes = ["worker%d" % r for r in range(kv.num_workers)] + \
            ["server%d" % s for s in range(kv._backend.num_servers)]
    return {"step": kv.steps_done, "config": job_config(kv), "extra": extra or {},
            "param_names": list(kv.param_names) if kv.param_names else None,
            "optimizer": optimizer_spec.summary(kv._optimizer) if kv._optimizer else None,
            "files": [os.path.basename(checkpoint.file_path(fname, sid, n)) for n in nodes]}


def _attempt(verb, path, action):
    """This node's part of a save or load: (code, errno, one-line message or None). Nothing
    may escape before the report: the other nodes wait for this one's."""
    try:
        action()
        return checkpoint.OK, 0, None
    except Exception as e:
        code, errno = checkpoint.result_of(e)
        message = str(e) if isinstance(e, (checkpoint.Damaged, ValueError)) else \
            "could not %s %s: %s" % (verb, path, checkpoint.oneline(e))
        return code, errno, message


def _report(kv, fname, sid, own, verb, manifest=False):
    """Every node's result (one exchange through the servers): [(message, errno)] of the
    failures, this worker's first (it knows the details). manifest: rank 0's row is about
    the manifest, and the servers' part was reported before."""
    rows, servers = kv._backend.exchange([own[0], own[1], 0, 0])
    failures = [("worker %d: %s" % (kv.rank, own[2]), own[1])] if own[0] else []
    for r, (code, errno) in enumerate(rows[:, :2].astype(int)):
        if code and r != kv.rank:
            path = fname if manifest else checkpoint.file_path(fname, sid, "worker%d" % r)
            failures.append(("worker %d: %s" % (r, checkpoint.remote_failure(verb, path, code, errno, sid)), errno))
    for s, (code, errno) in enumerate(servers.astype(int)):
        if code and not manifest:
            path = checkpoint.file_path(fname, sid, "server%d" % s)
            message = kv._backend.server_message(s) or checkpoint.remote_failure(verb, path, code, errno, sid)
            failures.append(("server %d: %s" % (s, message), errno))
    return failures


def _prune(kv, fname, sid):
    """Once every node has its part of set sid: each deletes its own files of other sets
    (older ones, those of interrupted saves, temp files)."""
    checkpoint.remove_stale(fname, "worker%d" % kv.rank, keep=sid)
    if kv.rank == 0:
        checkpoint.remove_stale(fname, "manifest")
    kv._backend.command({"op": "prune", "path": fname, "keep": sid})


def _check_manifest(kv, fname, manifest):
    """What every worker can check from the manifest alone, before any node changes:
    format and configuration, parameter names; says when the optimizer differs."""
    try:
        config, names, saved_opt = dict(manifest["config"]), manifest["param_names"], manifest["optimizer"]
        manifest["extra"] = dict(manifest["extra"])
    except Exception:
        raise checkpoint.Damaged("checkpoint %s is missing, corrupted or truncated: not a manifest" % fname) from None
    config.setdefault("pull_compression", "none")  # (written before 2-bit pulls existed)
    config.setdefault("fp32_sum", "arrival")  # (written before rank-order sums existed)
    mismatch = {k: (v, config.get(k)) for k, v in job_config(kv).items() if config.get(k) != v}
    if mismatch:
        raise ValueError("checkpoint %s was written by another configuration: %s" % (
            fname, ", ".join("%s=%r here, %r there" % (k, a, b) for k, (a, b) in sorted(mismatch.items()))))
    if names is not None and kv.param_names is not None and list(names) != list(kv.param_names):
        raise ValueError("checkpoint %s holds other parameters: %s; load it into a network whose parameters have "
                         "the same names" % (fname, _name_difference(list(names), list(kv.param_names))))
    here = optimizer_spec.summary(kv._optimizer) if kv._optimizer else None
    if kv.rank == 0 and here and isinstance(saved_opt, dict) and here != saved_opt:
        differ = ["%s %r there, %r here" % (k, saved_opt.get(k), here.get(k))
                  for k in sorted(set(here) | set(saved_opt)) if here.get(k) != saved_opt.get(k)]
        print("cdsgd_mx: the checkpoint's optimizer differs from this script's (%s); restoring the checkpoint's, "
              "as gluon's load_states does" % ", ".join(differ), flush=True)


def _read_worker_file(kv, path, sid):
    """This worker's file of set sid, checked to fit this job (nothing changes yet)."""
    import pickle
    body = checkpoint.read_file(path, sid)
    try:
        worker = pickle.loads(body)
        params, sets = worker["params"], worker["sets"]
        fits = sorted(params) == sorted(kv._set_of) and all(
            tuple(params[k]["shape"]) == tuple(kv._set_of[k].shapes[k]) for k in params) \
            and [s["layout"] for s in sets] == [bset.layout() for bset in kv._sets]
        if not {"steps", "local"} <= set(worker):
            raise KeyError("steps or local")
    except Exception as e:
        raise checkpoint.Damaged("checkpoint file %s is missing, corrupted or truncated: %s"
                                 % (path, checkpoint.oneline(e))) from None
    if not fits:
        raise ValueError("checkpoint file %s holds other parameters (shapes or their buckets differ)" % path)
    return worker


def _restore(kv, worker):
    params, sets = worker["params"], worker["sets"]
    weights = {}
    for bset in kv._sets:
        flat = np.empty(bset.size, np.float32)
        for slot in bset.slots:
            flat[slot.offset:slot.offset + slot.size] = params[slot.key]["global"].reshape(-1)[slot.begin:slot.end]
        for b in bset.buckets:
            weights[b.weight_key] = mx.nd.array(flat[b.offset:b.offset + b.size])
    kv._backend.assign(weights)
    steps, kv._updates = worker["steps"]  # the local rate's schedule goes on where it was
    kv.engine.restart_steps(steps)
    if kv._beats:
        heartbeat.set_resumed(kv.steps_done)  # a restarted job tells the launcher where it resumed
    for bset, saved in zip(kv._sets, sets):
        bset.set_comm(saved["comm_buf"])
        for b in bset.buckets:
            proofs.unseal(b)  # the saved proof regions are another job's
        if saved["residual"] is not None:
            bset.set_residual(saved["residual"])
        if saved.get("copy") is not None:  # 2-bit pulls: V (the servers restore theirs)
            bset.copy.set_values(saved["copy"])
        kv.engine.resume(bset, saved["t"], saved["in_flight"])  # in flight: W(t) sits in comm_buf
        for k, devices in bset.outs.items():
            x = mx.nd.array(params[k]["x"])  # this worker's x(t), may differ from W
            for out in devices:
                x.copyto(out)
    if worker["local"] is not None and kv.local.bound:
        kv.local.set_states(worker["local"])


def _backend_optimizer(kv, fname, sid):
    """The global optimizer as restored (gluon reads it back through _updater)."""
    import pickle
    if isinstance(kv._backend, LocalBackend):
        # a copy, as a distributed job's workers get: gluon then sets param_dict on it (by
        # parameter index), which on the server's own object would shadow the multipliers
        # it keeps by state id
        return pickle.loads(pickle.dumps(kv._backend.server.optimizer))
    try:
        return pickle.loads(checkpoint.read_file(checkpoint.file_path(fname, sid, "server0"), sid))["optimizer"]
    except Exception:
        return kv._optimizer  # servers on other machines: the same settings were sent


def job_config(kv):
    config = {"algorithm": kv.algorithm, "k": kv.k, "warmup_steps": kv.warmup_steps,
              "threshold": kv.threshold, "bucket_size": kv.bucket_size, "num_workers": kv.num_workers,
              "num_servers": kv._backend.num_servers, "pull_compression": kv.pull_compression,
              "fp32_sum": kv.fp32_sum}  # (with 'rank' the buckets may be cut elsewhere: protocol.max_chunk)
    if kv.pull_compression != "none" and kv.algorithm == "bitsgd":
        config["resync_every"] = kv.resync_every
    return config


def _name_difference(there, here):
    if len(there) != len(here):
        return "%d parameters there, %d here" % (len(there), len(here))
    differ = [i for i, (a, b) in enumerate(zip(there, here)) if a != b]
    i = differ[0]
    return "parameter %d is %r there, %r here%s" % (
        i, there[i], here[i], " (and %d more differ)" % (len(differ) - 1) if len(differ) > 1 else "")

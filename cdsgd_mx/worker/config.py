"""Checked settings of a CD-SGD kvstore: what may be asked for, and the one-line errors.

API: ConfigError; check_config(algorithm, k, warmup_steps, threshold, kvstore, nonfinite,
bucket_size, aggregate, pull_compression, resync_every, fp32_sum); check_learning_rate(name, lr);
existing_dist_sync(kvstore); push_window(environ); part_size(fp32_sum, environ);
parts_choice(environ).
"""
import os

import numpy as np

from cdsgd_mx.worker.buckets import DEFAULT_BUCKET_SIZE
from cdsgd_mx.worker.rounds import PUSH_WINDOW
from cdsgd_mx.worker.schedule import ALGORITHMS, COMPRESSING, DELAYED



class ConfigError(ValueError):
    """A bad argument: the message names it and the allowed values."""


KVSTORE_TYPES = ("dist_sync", "local")
# MXNet's names for its synchronous parameter-server store (kvstore.cc: any 'dist' name without
# '_async' is synchronous; '_device' makes MXNet sum a worker's GPUs on a GPU). Ours run as
# dist_sync: a worker's devices are summed into its buckets on the first device's context.
DIST_SYNC_NAMES = ("dist", "dist_sync", "dist_sync_device", "dist_device_sync")
LAUNCH_VARIABLES = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER")
NONFINITE_POLICIES = ("error", "skip")
PULL_COMPRESSIONS = ("none", "2bit")
# how the servers sum the workers' fp32 pushes: in the order they arrive (MXNet's own), or in rank
# order (fp32 rows keys: the same seed gives the same weights with any number of workers)
FP32_SUMS = ("arrival", "rank")
DEFAULT_RESYNC_EVERY = 0  # BIT-SGD with 2-bit pulls: 0, never an exact fp32 pull (a re-sync kicks V; docs/performance-history.md)
AGGREGATE_CHECKPOINT = ("save_states/load_states with update_on_kvstore=False (the workers update) are not supported "
                        "yet: checkpoint a job whose servers update (update_on_kvstore=None)")
AGGREGATE_DELAYED = ("the workers cannot update (update_on_kvstore=False, allreduce_grads()/update()) with "
                     "algorithm=%r: its local update of step t runs before step t's summed gradient exists (the "
                     "overlap it is made for), so there is no sum to hand back; use algorithm 'ssgd' or 'bitsgd', "
                     "or clip on the servers with optimizer_params={'clip_gradient': C}")


PUSH_WINDOW_ENV = "CDSGD_PUSH_WINDOW"  # bytes of fp32 pushes a worker keeps in flight (rounds.PushWindow)


def push_window(environ=os.environ):
    """CDSGD_PUSH_WINDOW: bytes of fp32 pushes a worker keeps in flight (0: no limit), default
    rounds.PUSH_WINDOW."""
    return _whole_number(environ, PUSH_WINDOW_ENV, PUSH_WINDOW, "bytes of fp32 pushes in flight; 0: no limit")


PART_SIZE_ENV = "CDSGD_PART_SIZE"  # values per part of a compressing algorithm's fp32 rounds (buckets.partition)


def part_size(fp32_sum="arrival", environ=os.environ):
    """CDSGD_PART_SIZE: values per part (0: none, fp32 rounds of whole buckets), default
    buckets.PART_SIZE (with fp32_sum='rank' buckets.RANK_PART_SIZE); None for 0."""
    from cdsgd_mx.worker.buckets import PART_SIZE, RANK_PART_SIZE
    default = RANK_PART_SIZE if fp32_sum == "rank" else PART_SIZE
    return _whole_number(environ, PART_SIZE_ENV, default, "values per part of an fp32 round; 0: no parts") or None


PARTS_ENV = "CDSGD_PARTS"  # how the fp32 rounds of buckets with parts go (part_choice.py)


def parts_choice(environ=os.environ):
    """CDSGD_PARTS: 'auto' (the default: the first fp32 steps try parts and whole buckets, the
    job keeps the faster), 'parts' or 'whole'."""
    from cdsgd_mx.worker.part_choice import MODES
    value = environ.get(PARTS_ENV, "auto")
    if value not in MODES:
        raise ConfigError("%s must be one of %s (how fp32 rounds of buckets with parts go), got %r"
                          % (PARTS_ENV, ", ".join(MODES), value))
    return value


def _whole_number(environ, name, default, what):
    """The integer >= 0 in environment variable `name`, else default; one line if it is not one."""
    value = environ.get(name)
    if value is None:
        return default
    if not value.strip().isdigit():
        raise ConfigError("%s must be an integer >= 0 (%s), got %r" % (name, what, value))
    return int(value)


def existing_dist_sync(kvstore):
    """An MXNet dist_sync store the script made itself (e.g. for its rank before building its
    data loaders), under any of MXNet's names for it: cdsgd wraps it, since a second dist
    kvstore in one process would hang."""
    import mxnet as mx
    return isinstance(kvstore, mx.kvstore.KVStore) and kvstore.type in DIST_SYNC_NAMES


def store_name(kvstore):
    """kvstore as the backends take it: 'dist_sync' for every MXNet name of a synchronous
    distributed store, 'local' / None, or the existing store itself."""
    return "dist_sync" if isinstance(kvstore, str) and kvstore in DIST_SYNC_NAMES else kvstore


def describe_store(kvstore):
    """A refused kvstore argument, named by what it is (a store's repr says nothing)."""
    if isinstance(kvstore, (str, type(None))):
        return repr(kvstore)
    kind = getattr(kvstore, "type", None)
    return "a %s store of type %r" % (type(kvstore).__name__, kind) if kind else "a %s" % type(kvstore).__name__


def check_config(algorithm, k, warmup_steps, threshold, kvstore, nonfinite="error",
                 bucket_size=DEFAULT_BUCKET_SIZE, aggregate=False, pull_compression="none",
                 resync_every=DEFAULT_RESYNC_EVERY, fp32_sum="arrival"):
    if algorithm not in ALGORITHMS:
        raise ConfigError("algorithm must be one of %s, got %r" % (", ".join(ALGORITHMS), algorithm))
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError("k must be an integer >= 1, got %r" % (k,))
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
        raise ConfigError("warmup_steps must be an integer >= 0, got %r" % (warmup_steps,))
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) \
            or not np.isfinite(threshold) or threshold <= 0 or not np.isfinite(np.float32(threshold)):
        raise ConfigError("threshold must be a finite number > 0 (as float32), got %r" % (threshold,))
    if kvstore is not None and not existing_dist_sync(kvstore) and not (
            isinstance(kvstore, str) and kvstore in DIST_SYNC_NAMES + KVSTORE_TYPES):
        raise ConfigError("kvstore must be one of %s, local, None or an existing mx.kv.create('dist') store of one of "
                          "those types, got %s" % (", ".join(DIST_SYNC_NAMES), describe_store(kvstore)))
    if nonfinite not in NONFINITE_POLICIES:
        raise ConfigError("nonfinite must be one of %s, got %r" % (", ".join(NONFINITE_POLICIES), nonfinite))
    if isinstance(bucket_size, bool) or not isinstance(bucket_size, (int, np.integer)) or bucket_size < 1:
        raise ConfigError("bucket_size must be an integer >= 1 (values per bucket), got %r" % (bucket_size,))
    bound = os.environ.get("MXNET_KVSTORE_BIGARRAY_BOUND")
    if bound is not None and not (bound.strip().isdigit() and int(bound) > 0):
        # MXNet would take 0 or less as 1-element chunks: a distributed job 100x slower
        raise ConfigError("MXNET_KVSTORE_BIGARRAY_BOUND must be an integer > 0 (elements), got %r" % (bound,))
    if aggregate and algorithm in DELAYED:
        raise ConfigError(AGGREGATE_DELAYED % algorithm)
    check_pull(algorithm, pull_compression, resync_every, aggregate)
    if fp32_sum not in FP32_SUMS:
        raise ConfigError("fp32_sum must be one of %s, got %r" % (", ".join(FP32_SUMS), fp32_sum))


def check_pull(algorithm, pull_compression, resync_every=DEFAULT_RESYNC_EVERY, aggregate=False):
    """2-bit both ways (pull_compression.py): only where the pushes are compressed too."""
    if pull_compression not in PULL_COMPRESSIONS:
        raise ConfigError("pull_compression must be one of %s, got %r" % (", ".join(PULL_COMPRESSIONS),
                                                                          pull_compression))
    if isinstance(resync_every, bool) or not isinstance(resync_every, (int, np.integer)) or resync_every < 0:
        raise ConfigError("resync_every must be an integer >= 0 (steps; 0: never), got %r" % (resync_every,))
    if pull_compression == "none":
        return
    if algorithm not in COMPRESSING:
        raise ConfigError("pull_compression=%r needs a compressing algorithm: algorithm must be one of %s, got %r"
                          % (pull_compression, ", ".join(COMPRESSING), algorithm))
    if aggregate:
        raise ConfigError("pull_compression=%r needs the servers to update (update_on_kvstore=None): with "
                          "update_on_kvstore=False the workers pull the summed gradient" % pull_compression)


def check_learning_rate(name, lr):
    """A learning rate must be a finite number >= 0 (NaN would fail inside MXNet at step 0)."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float, np.integer, np.floating)) \
            or not np.isfinite(lr) or lr < 0:
        raise ConfigError("%s must be a finite number >= 0, got %r" % (name, lr))

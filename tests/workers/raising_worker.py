"""A script for a launcher that runs one command for every role: `import cdsgd_mx` first, then
a worker that raises once its store exists (as cifar10_dist.py did with gluon's batch-size error)."""
import cdsgd_mx  # noqa: F401  (on a server or the scheduler: runs ours and exits)
import mxnet as mx

kv = mx.kv.create("dist_sync_cdsgd")
raise RuntimeError("worker %d fails on purpose" % kv.rank)

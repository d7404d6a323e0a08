"""cdsgd-mx: CD-SGD for Apache MXNet 1.9.1's parameter server.

- cdsgd_mx.codec: threshold 2-bit quantization with error feedback, and its wire format
- cdsgd_mx.CDSGD: the KVStore plugin (mx.kv.create('cdsgd'))
- cdsgd_mx.Trainer: a gluon.Trainer drop-in running ssgd / bitsgd / odsgd / cdsgd
"""
import importlib.util as _importlib_util
import os as _os
import sys as _sys

from cdsgd_mx import numerics as _numerics
from cdsgd_mx.cluster import address as _address

__version__ = "0.1.0"


_WITHOUT_MXNET = ("cdsgd_mx.launch", "cdsgd_mx.mxnet_launch", "cdsgd_mx.slurm",  # entry points that only start processes
                  "cdsgd_mx.cluster.launch", "cdsgd_mx.cluster.node", "cdsgd_mx.cluster.mxnet_launch",
                  "cdsgd_mx.cluster.slurm", "cdsgd_mx.cluster.emulate")


def _register_kvstore():
    """`import cdsgd_mx; mx.kv.create('cdsgd')` must give the plugin, not MXNet's plain store
    of that name (which trains every worker alone and exits 0). Not on a server or scheduler
    (importing MXNet there starts MXNet's own server loop; cdsgd_mx.server.node runs ours), not
    without MXNet (the codec works alone), and not in the launcher, which never trains
    (importing MXNet costs it 2 s of CPU at every start)."""
    if _os.environ.get("DMLC_ROLE") in ("server", "scheduler") or _entry_point() in _WITHOUT_MXNET \
            or _importlib_util.find_spec("mxnet") is None:
        return
    from cdsgd_mx.mxnet_import import import_mxnet
    import_mxnet()  # without scikit-learn: 0.85 s less CPU at every start (mxnet_import.py)
    from cdsgd_mx.worker import kvstore  # noqa: F401  (KVStoreBase.register runs on import)
    from cdsgd_mx.worker import doors
    doors.register()  # 'dist_sync_cdsgd', ... and 'cdsgd' with the options from the environment


def _entry_point():
    """The module this process was started with (`python -m NAME`), else None."""
    argv = getattr(_sys, "orig_argv", None) or []
    return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None


def _serve_if_a_node():
    """`import cdsgd_mx` as a script's first import, under a launcher that runs the same
    command for every role (MXNet's tools/launch.py, srun): on a server or the scheduler it runs
    ours and exits, as `import mxnet` runs MXNet's own there. Not in our own entry points,
    which start the node themselves (cdsgd_mx.server.node, also with --stock) or never run one:
    while `python -m cdsgd_mx.X` imports this package, sys.argv[0] is still "-m"."""
    if _os.environ.get("DMLC_ROLE") in ("server", "scheduler") and _sys.argv[:1] != ["-m"]:
        from cdsgd_mx.server.node import run_node
        run_node()
        _sys.exit(0)


def _one_line_config_errors():
    """A bad store name or option from the environment (CDSGD_OPTIONS, worker/doors.py) that
    reaches the top of a script prints as the one line that names it: the script itself has
    nothing to fix, so a traceback into MXNet's factory would only hide the line. (Other
    ConfigErrors keep their traceback: they point at the script's own call.)"""
    previous = _sys.excepthook

    def hook(kind, value, tb):
        if getattr(value, "from_environment", False):
            _sys.stderr.write("cdsgd_mx: %s\n" % value)
            _sys.stderr.flush()
            return
        previous(kind, value, tb)

    _sys.excepthook = hook


_one_line_config_errors()
_numerics.from_environment()  # before anything loads MXNet: pins read at load time (numerics.py)
_address.announce_route()  # a node on a multi-host job: the address its peers can reach (cluster/address.py)
_serve_if_a_node()
_register_kvstore()


def __getattr__(name):  # MXNet loads only when the engine is used, not for the codec alone
    if name == "Trainer":
        from cdsgd_mx.trainer import Trainer
        return Trainer
    if name == "CDSGD":
        from cdsgd_mx.worker.kvstore import CDSGD
        return CDSGD
    if name == "ConfigError":
        from cdsgd_mx.worker.config import ConfigError
        return ConfigError
    raise AttributeError("module 'cdsgd_mx' has no attribute %r" % name)

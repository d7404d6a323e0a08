"""cdsgd-mx: CD-SGD for Apache MXNet 1.9.1's parameter server.

- cdsgd_mx.codec: threshold 2-bit quantization with error feedback, and its wire format
- cdsgd_mx.CDSGD: the KVStore plugin (mx.kv.create('cdsgd'))
- cdsgd_mx.Trainer: a gluon.Trainer drop-in running ssgd / bitsgd / odsgd / cdsgd
"""
import importlib.util as _importlib_util
import os as _os

__version__ = "0.1.0"


def _register_kvstore():
    """`import cdsgd_mx; mx.kv.create('cdsgd')` must give the plugin, not MXNet's plain store
    of that name (which trains every worker alone and exits 0). Not on a server or scheduler
    (importing MXNet there starts MXNet's own server loop; cdsgd_mx.server runs ours), and not
    without MXNet (the codec works alone)."""
    if _os.environ.get("DMLC_ROLE") in ("server", "scheduler") or _importlib_util.find_spec("mxnet") is None:
        return
    from . import kvstore  # noqa: F401  (KVStoreBase.register runs on import)


_register_kvstore()


def __getattr__(name):  # MXNet loads only when the engine is used, not for the codec alone
    if name == "Trainer":
        from .trainer import Trainer
        return Trainer
    if name == "CDSGD":
        from .kvstore import CDSGD
        return CDSGD
    if name == "ConfigError":
        from .kvstore import ConfigError
        return ConfigError
    raise AttributeError("module 'cdsgd_mx' has no attribute %r" % name)

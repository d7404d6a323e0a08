"""cdsgd-mx: CD-SGD for Apache MXNet 1.9.1's parameter server.

- cdsgd_mx.codec: threshold 2-bit quantization with error feedback, and its wire format
- cdsgd_mx.CDSGD: the KVStore plugin (mx.kv.create('cdsgd'))
- cdsgd_mx.Trainer: a gluon.Trainer drop-in running ssgd / bitsgd / odsgd / cdsgd
"""
__version__ = "0.1.0"


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

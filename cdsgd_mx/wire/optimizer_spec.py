"""The global optimizer as plain data, so that servers never unpickle what the network brings.

MXNet's kv.set_optimizer pickles the optimizer and its server unpickles it: any process that can
reach the server's port could run code there. Here the optimizer travels as
    {"name": registered name, "module": where its class is defined,
     "state": its attributes, "lr_scheduler": {"class", "module", "state"} or None}
where every attribute value is plain (numbers, strings, booleans, None, and lists, tuples and
dicts of them); the server rebuilds it as unpickling would (the class's __setstate__), but only
from a class registered with mx.optimizer.register, or an LRScheduler subclass. A custom
optimizer's module must be importable on the servers (installed, or on PYTHONPATH): the server
imports the module named by rank 0's authenticated command.
"""
import importlib
import json
import math

import numpy as np

_DROPPED = ("param_dict",)  # gluon's Parameters: not picklable state either (Optimizer.__getstate__)


class SpecError(ValueError):
    """An optimizer that cannot travel as plain data: the message names the attribute."""


def _plain(value, where):
    """value with tuples and non-string dict keys spelled out, so JSON keeps them."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) or type(value).__name__ in ("int32", "int64"):
        return int(value)
    if isinstance(value, float) or type(value).__name__ in ("float32", "float64"):
        f = float(value)
        return f if math.isfinite(f) else {"float": repr(f)}
    if isinstance(value, (list, tuple)):
        items = [_plain(v, "%s[%d]" % (where, i)) for i, v in enumerate(value)]
        return {"tuple": items} if isinstance(value, tuple) else {"list": items}
    if isinstance(value, dict):
        return {"dict": [[_plain(k, where), _plain(v, "%s[%r]" % (where, k))] for k, v in value.items()]}
    raise SpecError("optimizer attribute %s holds a %s: the servers receive the optimizer as plain values only "
                    "(numbers, strings, booleans, None, lists, tuples, dicts)" % (where, type(value).__name__))


def _unplain(value):
    if isinstance(value, dict):
        if "tuple" in value:
            return tuple(_unplain(v) for v in value["tuple"])
        if "list" in value:
            return [_unplain(v) for v in value["list"]]
        if "dict" in value:
            return {_unplain(k): _unplain(v) for k, v in value["dict"]}
        if "float" in value:
            return float(value["float"])
        raise SpecError("unknown plain value %r" % (value,))
    return value


def _module_of(cls, what):
    if cls.__module__ == "__main__":
        raise SpecError("%s %s is defined in the training script (__main__): the servers cannot import it; move it "
                        "to a module installed (or on PYTHONPATH) on every server" % (what, cls.__name__))
    return cls.__module__


def describe(optimizer):
    """The optimizer as a JSON-able dict (raises SpecError naming what cannot travel)."""
    import mxnet as mx
    registry = mx.optimizer.Optimizer.opt_registry
    names = [n for n, c in registry.items() if c is type(optimizer)]
    if not names:
        raise SpecError("optimizer class %s is not registered: decorate it with @mx.optimizer.register so that the "
                        "servers can find it by name" % type(optimizer).__name__)
    state = {k: v for k, v in vars(optimizer).items() if k not in _DROPPED and k != "lr_scheduler"}
    sched = optimizer.lr_scheduler
    spec = {"name": names[0], "module": _module_of(type(optimizer), "optimizer class"),
            "state": _plain(state, "optimizer"), "lr_scheduler": None}
    if sched is not None:
        spec["lr_scheduler"] = {"class": type(sched).__name__, "module": _module_of(type(sched), "lr_scheduler class"),
                                "state": _plain(vars(sched), "lr_scheduler")}
    json.dumps(spec)  # what cannot be written would fail here, not on the servers
    return spec


def build(spec):
    """The optimizer described by `spec`, rebuilt without running anything but the class's own
    __setstate__ (what unpickling would run)."""
    import mxnet as mx
    importlib.import_module(spec["module"])  # registers a custom optimizer
    cls = mx.optimizer.Optimizer.opt_registry.get(spec["name"])
    if cls is None:
        raise SpecError("optimizer %r is not registered on this server (module %s)" % (spec["name"], spec["module"]))
    if cls.__module__ != spec["module"]:  # another class took the name here: not what the workers run
        raise SpecError("optimizer %r is %s.%s on this server, %s.%s on the workers"
                        % (spec["name"], cls.__module__, cls.__name__, spec["module"], cls.__name__))
    opt = cls.__new__(cls)
    opt.__setstate__(_unplain(spec["state"]))
    # pickle kept this alias; JSON makes two dicts of it (Optimizer._set_current_context)
    if isinstance(getattr(opt, "_all_index_update_counts", None), dict) and 0 in opt._all_index_update_counts:
        opt._index_update_count = opt._all_index_update_counts[0]
    opt.lr_scheduler = None
    sched = spec.get("lr_scheduler")
    if sched is not None:
        scls = getattr(importlib.import_module(sched["module"]), sched["class"], None)
        if not (isinstance(scls, type) and issubclass(scls, mx.lr_scheduler.LRScheduler)):
            raise SpecError("lr_scheduler %s.%s is not an mx.lr_scheduler.LRScheduler" % (sched["module"], sched["class"]))
        opt.lr_scheduler = scls.__new__(scls)
        opt.lr_scheduler.__dict__.update(_unplain(sched["state"]))
    return opt


_NOT_HYPER = ("lr", "num_update", "begin_num_update", "rescale_grad", "aggregate_num")  # counters, per-step values


def summary(opt):
    """The optimizer's name and hyper-parameters (its plain public attributes; the learning
    rate as the schedule gives it), as JSON gives them back."""
    out = {"name": type(opt).__name__.lower(), "learning_rate": float(opt.learning_rate)}
    for k, v in vars(opt).items():
        if k.startswith("_") or k in _NOT_HYPER:
            continue
        if v is None or isinstance(v, (bool, str)):
            out[k] = v
        elif isinstance(v, (int, float, np.integer, np.floating)):
            out[k] = float(v)
    return json.loads(json.dumps(out))


def hyper_parameters(opt):
    """The optimizer's settings other than its learning rate (which set_learning_rate sends)."""
    return {k: v for k, v in summary(opt).items() if k != "learning_rate"}

"""The store names a script can pass to mx.kv.create, and the options they read from the
environment, for the doors MXNet users come by (fit.py's --kv-store, Module's kvstore=,
gluon.Trainer's kvstore=), where no argument of ours can be passed.

    mx.kv.create('dist_sync_cdsgd')   # also dist_sync_odsgd, dist_sync_bitsgd, dist_sync_ssgd
    mx.kv.create('cdsgd')             # the algorithm from the options (default cdsgd)

The names hold 'dist' and '_sync', so fit.py sizes each worker's epoch as for dist_sync and
Module scales the gradient by 1/(batch x workers), as for MXNet's own store. The options:
    CDSGD_OPTIONS="k=4,warmup_steps=20,local_lr=0.05"   (comma-separated key=value)
    CDSGD_OPTIONS_FILE=options.json                      (a JSON object; .yaml/.yml with PyYAML)
CDSGD_OPTIONS wins where both set a key. A bad key or value stops in one line.

MXNet's own names (dist_sync, dist, ...) keep giving MXNet's own store. In a job whose servers
are ours (our launchers say so to the workers: CDSGD_SERVERS=cdsgd) such a store's first command
(gluon's Trainer and Module send set_optimizer) would stop the servers, so it stops there, in one
line naming the name used and the one that gives ours; wrapped by CDSGD
(CDSGD(kvstore=mx.kv.create('dist_sync'))) it works as ever.

API: OPTIONS; options_from_environment(environ); create(name); register().
"""
import json
import os

from cdsgd_mx.worker.config import ConfigError
from cdsgd_mx.worker.schedule import ALGORITHMS

ENV, ENV_FILE = "CDSGD_OPTIONS", "CDSGD_OPTIONS_FILE"
# option -> how its text is read (what CDSGD's constructor takes, and local_lr for the local rate)
OPTIONS = {"algorithm": str, "k": int, "warmup_steps": int, "threshold": float, "local_optimizer": str,
           "local_lr": float, "local_momentum": float, "nonfinite": str, "bucket_size": int,
           "pull_compression": str, "resync_every": int, "trace": str, "fuse_calls": int, "fp32_sum": str}
NAMES = {"dist_sync_" + alg: alg for alg in ALGORITHMS}  # + 'cdsgd', whose algorithm comes from the options
MXNETS_NAMES = ("dist", "dist_sync", "dist_sync_device", "dist_device_sync", "dist_async", "dist_device_async")
STOCK_STORE = ("mx.kv.create(%r) gives MXNet's own store, even after `import cdsgd_mx`, and this job's servers are "
               "cdsgd_mx's, which do not serve it: name mx.kv.create('dist_sync_ssgd') for S-SGD with MXNet's "
               "weights (or dist_sync_bitsgd, dist_sync_odsgd, dist_sync_cdsgd), or launch with --stock-server to "
               "run MXNet's own store on MXNet's own servers")


def _parse(key, value, source):
    if key not in OPTIONS:
        raise ConfigError("%s: unknown option %r; the options are %s" % (source, key, ", ".join(OPTIONS)))
    kind = OPTIONS[key]
    if isinstance(value, str) and kind is not str:
        try:
            value = kind(value.strip())
        except ValueError:
            raise ConfigError("%s: %s must be %s, got %r" % (source, key, "an integer" if kind is int else "a number",
                                                             value)) from None
    elif kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if key == "fuse_calls" and value not in (0, 1):
        raise ConfigError("%s: fuse_calls must be 1 (collect one-parameter calls into buckets) or 0, got %r"
                          % (source, value))
    return value


def options_from_environment(environ=None):
    """The options CDSGD_OPTIONS_FILE and CDSGD_OPTIONS set (parsed; not yet checked)."""
    environ = os.environ if environ is None else environ
    options = {}
    path = environ.get(ENV_FILE)
    if path:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise ConfigError("%s=%s: cannot read it (%s)" % (ENV_FILE, path, e.strerror)) from None
        if path.endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError:
                raise ConfigError("%s=%s: a YAML file needs PyYAML (pip install pyyaml), or write it as JSON"
                                  % (ENV_FILE, path)) from None
            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise ConfigError("%s=%s: not valid YAML (%s)" % (ENV_FILE, path, str(e).splitlines()[0])) from None
        else:
            try:
                loaded = json.loads(text)
            except ValueError as e:
                raise ConfigError("%s=%s: not valid JSON (%s)" % (ENV_FILE, path, e)) from None
        if not isinstance(loaded, dict):
            raise ConfigError("%s=%s: must hold an object of options (%s), got %s"
                              % (ENV_FILE, path, ", ".join(OPTIONS), type(loaded).__name__))
        options.update((k, _parse(k, v, "%s=%s" % (ENV_FILE, path))) for k, v in loaded.items())
    text = environ.get(ENV, "")
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" not in item:
            raise ConfigError("%s: %r is not key=value (e.g. %s=\"k=4,warmup_steps=20\")" % (ENV, item, ENV))
        key, value = (x.strip() for x in item.split("=", 1))
        options[key] = _parse(key, value, ENV)
    return options


def store_arguments(options):
    """CDSGD's constructor arguments from the options (local_lr/local_momentum become the local
    optimizer's parameters)."""
    args = dict(options)
    local = {}
    if "local_lr" in args:
        local["learning_rate"] = args.pop("local_lr")
    if "local_momentum" in args:
        local["momentum"] = args.pop("local_momentum")
    if local:
        args["local_optimizer_params"] = local
    return args


def create(name):
    """The store mx.kv.create(name) gives for one of our names. A bad option is a ConfigError
    marked from_environment: at the top of a script it prints as one line (cdsgd_mx/__init__.py)."""
    from cdsgd_mx.worker.kvstore import CDSGD
    try:
        options = options_from_environment()
        asked = NAMES.get(name)
        if asked is not None and options.get("algorithm", asked) != asked:
            raise ConfigError("%s names algorithm %r, but %s sets algorithm=%r: drop one of them"
                              % (name, asked, ENV, options["algorithm"]))
        if asked is not None:
            options["algorithm"] = asked
        return CDSGD(**store_arguments(options))
    except ConfigError as e:
        e.from_environment = True
        raise


def register():
    """mx.kv.create(NAME) for 'cdsgd' and every dist_sync_ALGORITHM: ours, with the options from
    the environment. (MXNet's factory looks its registry up first; without `import cdsgd_mx`
    these names fall through to MXNet's own dist_sync store: the docs and our launchers say so.)"""
    from mxnet.kvstore import KVStoreBase
    for name in list(NAMES) + ["cdsgd"]:
        KVStoreBase.kv_registry[name] = (lambda n=name: create(n))
    from cdsgd_mx.cluster.launch import SERVERS_ENV
    if os.environ.get(SERVERS_ENV) == "cdsgd":
        for name in MXNETS_NAMES:
            KVStoreBase.kv_registry[name] = (lambda n=name: _mxnets_own(n))


def _mxnets_own(name):
    """MXNet's own store of that name, whose commands to the servers stop in one line unless CDSGD wraps it."""
    import mxnet as mx
    from mxnet.kvstore import KVStoreBase
    ours = KVStoreBase.kv_registry.pop(name)
    try:
        kv = mx.kv.create(name)  # MXNet's factory, past our entry
    finally:
        KVStoreBase.kv_registry[name] = ours
    kv.__class__ = _guarded(type(kv))
    kv.created_as = name
    return kv


def _guarded(kind):
    """A subclass of MXNet's store whose commands to the servers (set_optimizer, as gluon's
    Trainer and Module send it; set_gradient_compression) refuse in one line while no CDSGD
    wraps it (the backend sets `wrapped_by_cdsgd`): our servers stop a job at such a command.
    Plain init/push/pull are left alone: without a command our servers sum as MXNet's do."""
    def refuse(method):
        def call(self, *args, **kwargs):
            if not getattr(self, "wrapped_by_cdsgd", False):
                error = ConfigError(STOCK_STORE % self.created_as)
                error.from_environment = True  # at the top of a script: the one line (cdsgd_mx/__init__.py)
                raise error
            return method(self, *args, **kwargs)
        return call
    calls = ("set_optimizer", "set_gradient_compression")
    return type("MXNetsOwn" + kind.__name__, (kind,), {m: refuse(getattr(kind, m)) for m in calls})

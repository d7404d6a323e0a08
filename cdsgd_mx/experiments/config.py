"""The experiment configuration: one YAML file per run (configs/), overridable from the command
line as key=value, validated whole before anything is launched.

Every problem is reported as one line naming the field and what it allows, e.g.
    config error: k must be an integer >= 1 or 'auto', got 0
"""
import math
import re
from dataclasses import asdict, dataclass, field, fields
from typing import List, Optional, Union

from cdsgd_mx.numerics import MODES as NUMERICS
from cdsgd_mx.worker.schedule import ALGORITHMS

MODELS = ("lenet5", "resnet20", "inception_bn", "alexnet", "vgg16", "resnet50")
DATASETS = ("mnist", "fashion_mnist", "cifar10", "imagenet", "synthetic")
NONFINITE = ("error", "skip")
NETWORKS = ("shared", "hosts")
RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit)$", re.I)


class ConfigError(ValueError):
    """One line: the field and the allowed values."""


@dataclass
class Config:
    model: str = "lenet5"
    dataset: str = "mnist"
    algorithm: str = "cdsgd"
    workers: int = 2
    servers: int = 1
    batch_size: int = 32            # per worker
    lr: float = 0.1                 # global learning rate
    local_lr: Optional[float] = None  # local update's learning rate (None: the global one)
    local_clip: Optional[float] = None  # odsgd/cdsgd: each value of the local step's rescaled gradient clipped to [-c, c]
    lr_steps: List[int] = field(default_factory=list)  # epochs at which both rates are multiplied by lr_factor
    lr_factor: float = 0.1
    momentum: float = 0.0
    wd: float = 0.0
    k: Union[int, str] = 5          # or 'auto' (cdsgd_mx.experiments.timemodel.choose_k)
    warmup_steps: int = 100
    threshold: float = 0.5
    pull_compression: str = "none"  # '2bit': 2 bits both ways (bitsgd, cdsgd; cdsgd_mx.wire.pull_compression)
    resync_every: int = 0           # bitsgd with 2-bit pulls: an exact fp32 pull every this many steps (0: never)
    fp32_sum: str = "arrival"       # 'rank': the servers sum fp32 pushes in rank order (one seed, one run, any workers)
    epochs: Optional[int] = None
    iterations: Optional[int] = None
    bandwidth: Optional[str] = None  # emulated link, tc syntax (1gbit): see network
    # shared: every node behind the one loopback, shaped to bandwidth (both directions, all nodes);
    # hosts: each node on an emulated host of its own, bandwidth its NIC's rate each way (a
    # cluster's network; needs network namespaces: cdsgd_mx.cluster.emulate)
    network: str = "shared"
    latency: Optional[float] = None  # ms
    seed: int = 0                    # init, shard, data order, augmentation and dropout all follow it
    seeds: int = 1                   # scripts/reproduce.py runs seed, seed + 1, ..., seed + seeds - 1
    out: str = "results/run"
    data_dir: Optional[str] = None
    train_samples: Optional[int] = None  # use only the first N training samples (before sharding); null: all
    test_samples: Optional[int] = None   # evaluate on the first N test samples; null: all
    nonfinite: str = "error"
    costs: Optional[str] = None      # k: auto reads tau, phi, psi from this bench.overlap --json output
    checkpoint: bool = True          # save trainer states and parameters at every epoch end
    stall_timeout: float = 600       # stop the job when a node is silent or a round waits this long (s; 0: off)
    start_timeout: float = 1800      # the same while the nodes start
    max_restarts: int = 0            # restart the whole job from its last checkpoint after a failure, this often
    numerics: Optional[str] = None   # 'portable': the same weights on any x86-64 CPU with AVX2; null: as
                                     # CDSGD_NUMERICS says, else native (cdsgd_mx.numerics)


FIELDS = tuple(f.name for f in fields(Config))


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check(cfg):
    def need(ok, message):
        if not ok:
            raise ConfigError(message)

    def choice(name, allowed):
        v = getattr(cfg, name)
        need(v in allowed, "%s must be one of %s, got %r" % (name, ", ".join(allowed), v))

    def integer(name, low, allow_none=False):
        v = getattr(cfg, name)
        if allow_none and v is None:
            return
        need(_is_int(v) and v >= low, "%s must be an integer >= %d%s, got %r"
             % (name, low, " or null" if allow_none else "", v))

    def number(name, low, strict, high=None, allow_none=False):
        v = getattr(cfg, name)
        if allow_none and v is None:
            return
        ok = _is_num(v) and (v > low if strict else v >= low) and (high is None or v < high)
        bound = "%s %g" % (">" if strict else ">=", low) + ("" if high is None else " and < %g" % high)
        need(ok, "%s must be a number %s%s, got %r" % (name, bound, " or null" if allow_none else "", v))

    choice("model", MODELS)
    choice("dataset", DATASETS)
    choice("algorithm", ALGORITHMS)
    choice("nonfinite", NONFINITE)
    need(cfg.numerics is None or cfg.numerics in NUMERICS,
         "numerics must be one of %s or null, got %r" % (", ".join(NUMERICS), cfg.numerics))
    integer("workers", 1)
    integer("servers", 1)
    integer("batch_size", 1)
    number("lr", 0, strict=True)
    number("local_lr", 0, strict=True, allow_none=True)
    number("local_clip", 0, strict=True, allow_none=True)
    number("lr_factor", 0, strict=True, high=1.0000001)
    number("momentum", 0, strict=False, high=1)
    number("wd", 0, strict=False)
    need(cfg.k == "auto" or (_is_int(cfg.k) and cfg.k >= 1),
         "k must be an integer >= 1 or 'auto', got %r" % (cfg.k,))
    integer("warmup_steps", 0)
    number("threshold", 0, strict=True)
    choice("pull_compression", ("none", "2bit"))
    integer("resync_every", 0)
    choice("fp32_sum", ("arrival", "rank"))
    need(cfg.pull_compression == "none" or cfg.algorithm in ("bitsgd", "cdsgd"),
         "pull_compression: '2bit' needs algorithm bitsgd or cdsgd, got %r" % (cfg.algorithm,))
    integer("epochs", 1, allow_none=True)
    integer("train_samples", 1, allow_none=True)
    integer("test_samples", 1, allow_none=True)
    integer("iterations", 1, allow_none=True)
    need((cfg.epochs is None) != (cfg.iterations is None),
         "exactly one of epochs and iterations must be set, got epochs=%r, iterations=%r" % (cfg.epochs, cfg.iterations))
    need(isinstance(cfg.lr_steps, list) and all(_is_int(e) and e >= 0 for e in cfg.lr_steps)
         and cfg.lr_steps == sorted(set(cfg.lr_steps)),
         "lr_steps must be a list of increasing epochs (integers >= 0), got %r" % (cfg.lr_steps,))
    need(cfg.bandwidth is None or (isinstance(cfg.bandwidth, str) and bool(RATE_RE.match(cfg.bandwidth))),
         "bandwidth must be a tc rate such as 100mbit, 1gbit or 10gbit, or null, got %r" % (cfg.bandwidth,))
    number("latency", 0, strict=False, allow_none=True)
    choice("network", NETWORKS)
    need(_is_int(cfg.seed), "seed must be an integer, got %r" % (cfg.seed,))
    need(cfg.seed >= 0, "seed must be an integer >= 0 (numpy's generators take no negative seed), got %r"
         % (cfg.seed,))
    integer("seeds", 1)
    need(isinstance(cfg.out, str) and cfg.out != "", "out must be a non-empty path, got %r" % (cfg.out,))
    need(cfg.data_dir is None or isinstance(cfg.data_dir, str), "data_dir must be a path or null, got %r" % (cfg.data_dir,))
    need(cfg.costs is None or isinstance(cfg.costs, str), "costs must be a path or null, got %r" % (cfg.costs,))
    need(cfg.k != "auto" or cfg.costs is not None,
         "k: auto needs costs: the --json output of python -m cdsgd_mx.bench.overlap (tau, phi, psi)")
    need(isinstance(cfg.checkpoint, bool), "checkpoint must be true or false, got %r" % (cfg.checkpoint,))
    number("stall_timeout", 0, strict=False)
    number("start_timeout", 0, strict=False)
    integer("max_restarts", 0)
    need(not (cfg.dataset == "synthetic" and cfg.epochs is not None),
         "epochs: the synthetic dataset has no epochs, set iterations instead")


def validate(values):
    """A Config from a mapping, or ConfigError naming the first problem."""
    if not isinstance(values, dict):
        raise ConfigError("the config must be a mapping of fields to values, got %s" % type(values).__name__)
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError("unknown field%s %s (allowed: %s)" % ("s" if len(unknown) > 1 else "",
                                                              ", ".join(unknown), ", ".join(FIELDS)))
    cfg = Config(**values)
    _check(cfg)
    return cfg


def parse_overrides(pairs):
    """['k=10', 'lr_steps=[30, 60]'] -> {'k': 10, 'lr_steps': [30, 60]} (values read as YAML)."""
    import yaml
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError("override %r must look like field=value" % (pair,))
        key, raw = pair.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ConfigError("override %s: cannot read %r (%s)" % (key, raw, str(e).splitlines()[0])) from e
    return out


def load(path, overrides=()):
    """Read a YAML config, apply key=value overrides, validate."""
    import yaml
    try:
        with open(path) as f:
            values = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError("config %s cannot be read: %s" % (path, e.strerror)) from e
    except yaml.YAMLError as e:
        raise ConfigError("config %s is not valid YAML: %s" % (path, str(e).splitlines()[0])) from e
    if not isinstance(values, dict):
        raise ConfigError("config %s must be a mapping of fields to values" % path)
    values.update(parse_overrides(overrides))
    return validate(values)


def as_dict(cfg):
    return asdict(cfg)

"""The experiment config: every invalid field gives its own one-line message; valid ones load."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdsgd_mx.experiments import config as C

BASE = {"iterations": 100}


@pytest.mark.parametrize("field,value,message", [
    ("model", "resnet18", "model must be one of lenet5, resnet20, inception_bn, alexnet, vgg16, resnet50, got 'resnet18'"),
    ("dataset", "svhn", "dataset must be one of mnist, fashion_mnist, cifar10, imagenet, synthetic"),
    ("algorithm", "sgd", "algorithm must be one of ssgd, bitsgd, odsgd, cdsgd, got 'sgd'"),
    ("workers", 0, "workers must be an integer >= 1, got 0"),
    ("servers", 1.5, "servers must be an integer >= 1, got 1.5"),
    ("batch_size", -2, "batch_size must be an integer >= 1, got -2"),
    ("lr", 0, "lr must be a number > 0, got 0"),
    ("local_lr", -1, "local_lr must be a number > 0 or null, got -1"),
    ("local_clip", 0, "local_clip must be a number > 0 or null, got 0"),
    ("lr_factor", 2, "lr_factor must be a number > 0 and < 1, got 2"),
    ("momentum", 1.0, "momentum must be a number >= 0 and < 1, got 1.0"),
    ("wd", -0.1, "wd must be a number >= 0, got -0.1"),
    ("k", 0, "k must be an integer >= 1 or 'auto', got 0"),
    ("k", "fast", "k must be an integer >= 1 or 'auto', got 'fast'"),
    ("warmup_steps", -5, "warmup_steps must be an integer >= 0, got -5"),
    ("threshold", float("nan"), "threshold must be a number > 0, got nan"),
    ("lr_steps", [60, 30], "lr_steps must be a list of increasing epochs"),
    ("bandwidth", "fast", "bandwidth must be a tc rate such as 100mbit, 1gbit or 10gbit, or null"),
    ("latency", -1, "latency must be a number >= 0 or null, got -1"),
    ("seed", "x", "seed must be an integer, got 'x'"),
    ("seed", -1, "seed must be an integer >= 0 (numpy's generators take no negative seed), got -1"),
    ("seeds", 0, "seeds must be an integer >= 1, got 0"),
    ("out", "", "out must be a non-empty path"),
    ("train_samples", 0, "train_samples must be an integer >= 1 or null, got 0"),
    ("test_samples", "all", "test_samples must be an integer >= 1 or null, got 'all'"),
    ("nonfinite", "ignore", "nonfinite must be one of error, skip, got 'ignore'"),
])
def test_each_invalid_field_gives_its_message(field, value, message):
    values = dict(BASE)
    values[field] = value
    with pytest.raises(C.ConfigError) as err:
        C.validate(values)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_auto_k_needs_costs():
    with pytest.raises(C.ConfigError, match="k: auto needs costs"):
        C.validate({"iterations": 5, "k": "auto"})


def test_unknown_fields_and_epoch_iteration_rules():
    with pytest.raises(C.ConfigError, match="unknown field lrr .allowed: model, dataset"):
        C.validate({"lrr": 0.1, "iterations": 5})
    with pytest.raises(C.ConfigError, match="exactly one of epochs and iterations"):
        C.validate({})
    with pytest.raises(C.ConfigError, match="exactly one of epochs and iterations"):
        C.validate({"epochs": 3, "iterations": 5})
    with pytest.raises(C.ConfigError, match="synthetic dataset has no epochs"):
        C.validate({"dataset": "synthetic", "epochs": 3})


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: resnet50\ndataset: imagenet\nepochs: 90\nlr_steps: [30, 60, 80]\nk: 5\n")
    cfg = C.load(str(path), ["k=auto", "costs=c.json", "workers=4", "bandwidth=1gbit"])
    assert (cfg.model, cfg.epochs, cfg.lr_steps, cfg.k, cfg.workers, cfg.bandwidth) == \
        ("resnet50", 90, [30, 60, 80], "auto", 4, "1gbit")
    with pytest.raises(C.ConfigError, match="override 'k' must look like field=value"):
        C.load(str(path), ["k"])
    with pytest.raises(C.ConfigError, match="cannot be read"):
        C.load(str(tmp_path / "missing.yaml"))
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    with pytest.raises(C.ConfigError, match="not valid YAML"):
        C.load(str(tmp_path / "bad.yaml"))


valid = st.fixed_dictionaries({
    "model": st.sampled_from(C.MODELS), "dataset": st.sampled_from(("mnist", "cifar10", "imagenet")),
    "algorithm": st.sampled_from(("ssgd", "bitsgd", "odsgd", "cdsgd")), "workers": st.integers(1, 64),
    "servers": st.integers(1, 16), "batch_size": st.integers(1, 1024),
    "lr": st.floats(1e-6, 10), "momentum": st.floats(0, 0.99), "k": st.one_of(st.integers(1, 100), st.just("auto")),
    "warmup_steps": st.integers(0, 10000), "threshold": st.floats(1e-4, 10), "epochs": st.integers(1, 200),
    "costs": st.just("costs.json"),
    "lr_steps": st.lists(st.integers(0, 200), unique=True).map(sorted),
    "bandwidth": st.sampled_from([None, "100mbit", "1gbit", "10gbit"]),
})


@settings(max_examples=100, deadline=None)
@given(values=valid)
def test_every_valid_config_is_accepted(values):
    cfg = C.validate(values)
    assert cfg.model == values["model"] and cfg.k == values["k"]


@settings(max_examples=150, deadline=None)
@given(values=valid, field=st.sampled_from(["workers", "servers", "batch_size", "lr", "momentum", "k",
                                            "warmup_steps", "threshold", "epochs"]),
       bad=st.one_of(st.integers(-100, 0), st.floats(allow_nan=True, allow_infinity=True).filter(lambda v: not 0 < v < 1),
                     st.text(max_size=3), st.none(), st.booleans()))
def test_every_invalid_value_gives_a_clear_error(values, field, bad):
    values = dict(values)
    values[field] = bad
    try:
        C.validate(values)
    except C.ConfigError as e:
        assert field in str(e) and "\n" not in str(e)
        return
    # some draws are valid after all (e.g. momentum=0, k=0 never): then the value must really be valid
    assert (field == "momentum" and bad in (0, 0.0)) or (field == "warmup_steps" and bad == 0) \
        or (field == "lr" and isinstance(bad, float) and 0 < bad) or (field == "threshold" and isinstance(bad, float) and bad > 0)


def test_shipped_configs_validate():
    import glob
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = sorted(glob.glob(os.path.join(root, "configs", "*.yaml")))
    assert paths
    from cdsgd_mx.experiments.figures import EXPERIMENTS
    from cdsgd_mx.experiments.speed import load_speed_config
    sweeps = {os.path.join(root, e["config"]) for e in EXPERIMENTS.values() if e["kind"] == "speed"}
    assert sweeps and sweeps <= set(paths)
    for path in paths:
        if path in sweeps:  # fig10's sweep: models x batches x bandwidths, read by reproduce.py
            cfg = load_speed_config(path, None)
            assert cfg["models"] and cfg["batches"] and cfg["bandwidths"]
        else:
            C.load(path)

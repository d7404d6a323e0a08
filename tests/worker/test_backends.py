"""The backends' declared interface: both implement all of it, and the kvstore's parts ask a
backend for nothing it does not declare."""
import inspect
import pathlib
import re

from cdsgd_mx.worker import backends

ROOT = pathlib.Path(__file__).resolve().parents[2]
DECLARED = {name for name, _ in inspect.getmembers(backends.Backend, inspect.isfunction)} | \
    set(backends.Backend.__annotations__) | {"rounds"}
# what only one backend has, used where the kvstore knows which it holds
ONLY_ONE = {"answers": "DistBackend (start-up handshake)", "kv": "DistBackend (MXNet's exit barrier)",
            "server": "LocalBackend (the in-process server)"}


def test_both_backends_implement_every_declared_method():
    for cls in (backends.DistBackend, backends.LocalBackend):
        assert issubclass(cls, backends.Backend)
        assert not cls.__abstractmethods__, (cls.__name__, sorted(cls.__abstractmethods__))
        for name in backends.Backend.__abstractmethods__:
            declared = inspect.signature(getattr(backends.Backend, name))
            assert inspect.signature(getattr(cls, name)) == declared, (cls.__name__, name)
    local = backends.LocalBackend()
    assert (local.rank, local.num_workers, local.num_servers, local.region, local.rounds) == (0, 1, 1, 0, {})


def test_the_kvstore_uses_only_what_a_backend_declares():
    used = set()
    for name in ("kvstore.py", "job_checkpoint.py", "guards.py", "rounds.py", "step.py", "local_update.py", "compression.py", "gluon_rules.py"):
        text = (ROOT / "cdsgd_mx" / "worker" / name).read_text()
        used |= set(re.findall(r"(?:_backend|\bbackend)\.([a-z_]+)", text))
    assert used, "no backend use found: the pattern is out of date"
    undeclared = used - DECLARED - set(ONLY_ONE)
    assert not undeclared, "used but not declared in backends.Backend: %s" % sorted(undeclared)


def test_create_picks_the_in_process_server_for_local_and_none():
    for kvstore in ("local", None):
        assert type(backends.create(kvstore)) is backends.LocalBackend

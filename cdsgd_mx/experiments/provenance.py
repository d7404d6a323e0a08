"""Where and how a result was made, recorded beside it so that anyone can rerun it and tell a
real change from another machine: the commit (and whether the tree had changes), the exact
command from the repository's root, the numerics mode and its pinned settings, the CPU, cores
and threads, and the versions of Python, MXNet (with its build features), numpy and cdsgd_mx.

    record(argv)  ->  a JSON-ready dict (scripts/train.py, scripts/reproduce.py, bench.* --json)
"""
import os
import platform
import shlex
import socket
import subprocess
import sys
import time

from cdsgd_mx import numerics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout cdsgd_mx runs from
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "amx_tile")


def _git(*args):
    try:
        out = subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def code_version():
    """{'commit', 'dirty', 'changes'}: the checkout's commit and its uncommitted changes (paths,
    untracked ones too: a new module counts). commit None where cdsgd_mx is not run from a git
    checkout (a plain pip install): then only the package version says what ran."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "changes": []}
    status = _git("status", "--porcelain") or ""
    changes = [line[3:] for line in status.splitlines() if line.strip()]
    out = {"commit": commit.strip(), "dirty": bool(changes), "changes": changes[:50]}
    if changes:  # which changes: two runs with edits in the same files may still differ
        out["changes_sha256"] = _changes_digest(status)
    return out


def _changes_digest(status):
    """SHA-256 of the uncommitted changes: the diff against HEAD and every untracked file."""
    import hashlib
    h = hashlib.sha256((_git("diff", "HEAD", "--binary") or "").encode())
    for line in status.splitlines():
        if line.startswith("??"):
            path = os.path.join(ROOT, line[3:])
            for folder, _, files in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
                for name in sorted(files):
                    f = os.path.join(folder, name)
                    h.update(f.encode())
                    try:
                        with open(f, "rb") as fh:
                            h.update(fh.read())
                    except OSError:
                        pass
    return h.hexdigest()


def code_id(version):
    """One string per code version: 'COMMIT' or 'COMMIT+changes:DIGEST12'; None: no git."""
    if not version or not version.get("commit"):
        return None
    return version["commit"] + ("+changes:" + version.get("changes_sha256", "?")[:12] if version.get("dirty") else "")


def command(argv):
    """argv (the interpreter first) as a command to run from the repository's root: the
    interpreter as `python`, paths inside the checkout made relative to it (the same command
    works in another clone)."""
    out = ["python"]
    for a in argv[1:]:
        if "=" in a and not a.startswith("-"):  # field=path overrides
            key, value = a.split("=", 1)
            out.append(key + "=" + _relative(value))
        else:
            out.append(_relative(a))
    return out


def _relative(path):
    if os.path.isabs(path) and (path + os.sep).startswith(ROOT + os.sep):
        return os.path.relpath(path, ROOT)
    return path


def cpu():
    flags = numerics.cpu_flags()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"model": numerics.cpu_model(), "machine": platform.machine(),
            "isa_flags": [f for f in ISA_FLAGS if f in flags], "cores": os.cpu_count(), "cores_usable": affinity}


def threads():
    out = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS", "OPENBLAS_NUM_THREADS")}
    if "cdsgd_mx.codec" in sys.modules:
        out["codec"] = sys.modules["cdsgd_mx.codec"].get_num_threads()
    return out


def libraries(with_mxnet=True):
    import numpy
    out = {"python": platform.python_version(), "numpy": numpy.__version__,
           "cdsgd_mx": sys.modules["cdsgd_mx"].__version__}  # loaded: this module is inside it
    if with_mxnet and (numerics.mxnet_loaded() or _can_load_mxnet()):
        from cdsgd_mx.mxnet_import import import_mxnet
        mx = import_mxnet()
        out["mxnet"] = mx.__version__
        try:
            out["mxnet_features"] = sorted(f.name for f in mx.runtime.Features().values() if f.enabled)
        except Exception as e:  # an old or odd build: say so rather than fail the run
            out["mxnet_features"] = "unknown (%s)" % e
    return out


def _can_load_mxnet():
    import importlib.util
    return os.environ.get("DMLC_ROLE") not in ("server", "scheduler") and importlib.util.find_spec("mxnet") is not None


def record(argv=None, with_mxnet=True):
    """Everything above, for the command argv (default: this process's)."""
    if argv is None:  # as typed: `python -m cdsgd_mx.bench.comm ...` keeps its -m
        argv = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
    cmd = command(argv)
    return dict(code_version(), command=cmd, command_line=shlex.join(cmd), numerics=numerics.settings(),
                cpu=cpu(), threads=threads(), libraries=libraries(with_mxnet), host=socket.gethostname(),
                time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

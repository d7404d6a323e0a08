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


CODE_SUFFIXES = (".py", ".pyx", ".c", ".cc", ".cpp", ".h", ".cu", ".yaml", ".yml", ".toml", ".cfg", ".sh")


def code_version():
    """The checkout's commit and its uncommitted changes: 'dirty' (any change), 'changes' (their
    paths), and 'code_changed' with 'changes_sha256' for those that can change what runs
    (source, configs, build files: CODE_SUFFIXES; not results or docs written beside, so a
    sweep writing into the checkout does not change its own code version). commit None where
    cdsgd_mx does not run from a git checkout (a plain pip install): then only the package
    version says what ran."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "changes": []}
    status = _git("status", "--porcelain", "--untracked-files=all") or ""
    changes = [line[3:] for line in status.splitlines() if line.strip()]
    code = sorted(p for p in changes if p.endswith(CODE_SUFFIXES))
    out = {"commit": commit.strip(), "dirty": bool(changes), "changes": changes[:50], "code_changed": bool(code)}
    if code:  # which changes: two runs with edits in the same files may still differ
        out["changes_sha256"] = _changes_digest(code)
    return out


def _changes_digest(paths):
    """SHA-256 of these paths (relative to the root) as they are now: each one's name and bytes."""
    import hashlib
    h = hashlib.sha256()
    for path in paths:
        h.update(path.encode() + b"\0")
        try:
            with open(os.path.join(ROOT, path), "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(b"(deleted)")
    return h.hexdigest()


def code_id(version):
    """One string per code version: 'COMMIT' or 'COMMIT+changes:DIGEST12'; None: no git."""
    if not version or not version.get("commit"):
        return None
    changed = version.get("code_changed", version.get("dirty"))  # (records before code_changed: dirty)
    return version["commit"] + ("+changes:" + version.get("changes_sha256", "?")[:12] if changed else "")


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


def current_argv():
    """This process's command as typed: `python -m cdsgd_mx.bench.comm ...` keeps its -m
    (sys.orig_argv from Python 3.10; before, rebuilt from __main__'s module name)."""
    if getattr(sys, "orig_argv", None):
        return list(sys.orig_argv)
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        name = spec.name[:-len(".__main__")] if spec.name.endswith(".__main__") else spec.name
        return [sys.executable, "-m", name] + sys.argv[1:]
    return [sys.executable] + sys.argv


def cpu():
    flags = numerics.cpu_flags()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"model": numerics.cpu_model(), "machine": platform.machine(),
            "isa_flags": [f for f in ISA_FLAGS if f in flags], "cores": os.cpu_count(), "cores_usable": affinity}


def machine_line(info=None):
    """One line naming this machine (or the cpu() dict given), which benchmarks print first and
    the test run last: a figure is read against the machine that made it (a machine without
    AVX-512 ran this project's suite about 2x slower than CI's: docs/performance.md)."""
    info = info or cpu()
    flags = info["isa_flags"]
    isa = "AVX-512" if "avx512f" in flags else "AVX2, no AVX-512" if "avx2" in flags else "no AVX2"
    return "machine: %s (%s), %s cores usable, %s" % (info["model"], info["machine"], info["cores_usable"], isa)


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
    argv = current_argv() if argv is None else argv
    cmd = command(argv)
    return dict(code_version(), command=cmd, command_line=shlex.join(cmd), numerics=numerics.settings(),
                cpu=cpu(), threads=threads(), libraries=libraries(with_mxnet), host=socket.gethostname(),
                time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

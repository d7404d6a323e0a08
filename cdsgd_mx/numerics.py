"""Numerics modes: whether a run's numbers may depend on the CPU it ran on.

MXNet's oneDNN picks its kernels by the CPU's instruction set, and OpenMP splits an op's work
(and so the order of its float sums) by the core count. The same run therefore gives other
weights on an AVX-512 machine than on an AVX2-only one, or on 2 cores than on 64
(docs/reproduction.md, "Portable numerics").

- 'native' (the default): nothing pinned, the libraries pick the fastest kernels for this CPU.
- 'portable': every process of the job pins what the numbers depend on, before MXNet loads:
  oneDNN's instruction set capped at AVX2 (every x86-64 server of the last ten years has it),
  OpenBLAS's kernel (Haswell: AVX2), and one OpenMP/BLAS thread per op. A CPU without AVX2 and
  FMA stops the run in one line: capped kernels it cannot run would silently fall further.

Not pinned, because they do not move the numbers: MXNet's engine threads (they run whole ops in
parallel, each op's result depends only on its own OpenMP count; the launcher gives workers 2
on every machine) and the codec's kernels (compiled without FMA contraction or reassociation:
their AVX-512, AVX2 and baseline copies give the same bits; they run on 1 thread unless told).

The mode travels in the environment as CDSGD_NUMERICS, which every launcher passes on, and is
applied by `import cdsgd_mx` (this module imports no MXNet). A process that loaded MXNet before
the pins were set cannot be pinned any more: use() says so instead of pretending.
"""
import os
import platform
import sys

ENV = "CDSGD_NUMERICS"
MODES = ("native", "portable")
ISA = "AVX2"
NEEDED_FLAGS = ("avx2", "fma")  # what oneDNN's and OpenBLAS's AVX2 kernels execute
PINS = {
    "DNNL_MAX_CPU_ISA": ISA,        # oneDNN < 2.5 reads this name,
    "ONEDNN_MAX_CPU_ISA": ISA,      # later ones this
    "OPENBLAS_CORETYPE": "Haswell",  # OpenBLAS's AVX2 kernels, also numpy's
    "OMP_NUM_THREADS": "1",          # one thread per op: the same split of every sum on any core count
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}
_APPLIED = None  # the mode this process put in force (use()), whatever os.environ says since
RECORDED = tuple(PINS) + ("MXNET_CPU_WORKER_NTHREADS", "MXNET_ENGINE_TYPE", "KMP_AFFINITY", "OMP_PROC_BIND")


class NumericsError(ValueError):
    """One line: what cannot be pinned, and why. from_environment: it came from CDSGD_NUMERICS
    (cdsgd_mx's import prints it without a traceback)."""
    from_environment = False


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's feature flags (a set), empty where they cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model(path="/proc/cpuinfo"):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def check_cpu(flags=None, machine=None):
    """Raise NumericsError unless this CPU runs the pinned (AVX2) kernels."""
    machine = machine or platform.machine()
    if machine not in ("x86_64", "AMD64"):
        raise NumericsError("numerics: portable pins x86-64's %s kernels; this machine is %s (use numerics: native)"
                            % (ISA, machine))
    flags = cpu_flags() if flags is None else flags
    missing = [f for f in NEEDED_FLAGS if f not in flags]
    if missing:
        raise NumericsError("numerics: portable pins %s kernels, and this CPU lacks %s (use numerics: native, whose "
                            "numbers then hold on this CPU type only)" % (ISA, " and ".join(missing)))


def mxnet_loaded():
    return "mxnet" in sys.modules


def check_mode(mode, field="numerics"):
    if mode not in MODES:
        raise NumericsError("%s must be one of %s, got %r" % (field, ", ".join(MODES), mode))


def use(mode, environ=None):
    """Put `mode` in force for this process and every process it starts (through the
    environment). Must run before MXNet loads; after that only the mode already in force is
    accepted."""
    global _APPLIED
    environ = os.environ if environ is None else environ
    check_mode(mode)
    if mode == "portable":
        check_cpu()
        unpinned = {k: v for k, v in PINS.items() if environ.get(k) != v}
        if unpinned and mxnet_loaded():
            raise NumericsError("numerics: portable must be in force before MXNet loads, and MXNet is loaded in this "
                                "process with %s: start the job with %s=portable in its environment (or set it in "
                                "os.environ before the first import of cdsgd_mx or mxnet)"
                                % (", ".join("%s=%s" % (k, environ.get(k, "unset")) for k in sorted(unpinned)), ENV))
        environ.update(PINS)
    elif active(environ) == "portable" and mxnet_loaded():
        raise NumericsError("numerics: this process already runs pinned (portable) numerics with MXNet loaded; "
                            "native needs a new process without %s=portable" % ENV)
    environ[ENV] = mode
    if environ is os.environ:
        _APPLIED = mode
    if mode == "portable" and "cdsgd_mx.codec" in sys.modules:
        sys.modules["cdsgd_mx.codec"].set_num_threads(1)


def active(environ=None):
    """The mode in force in this process: what use() applied ('native' if nothing was), not
    what os.environ says now (a CDSGD_NUMERICS set after `import cdsgd_mx` pinned nothing).
    With environ: the mode that environment asks for (of a process to start)."""
    if environ is None:
        return _APPLIED or "native"
    return environ.get(ENV) or "native"


def from_environment():
    """At `import cdsgd_mx`: put CDSGD_NUMERICS's mode in force (a bad value or a CPU that
    cannot run the pinned kernels is a NumericsError whose one line the import prints)."""
    mode = os.environ.get(ENV)
    if not mode:
        return
    try:
        check_mode(mode, field=ENV)
        use(mode)
    except NumericsError as e:
        e.from_environment = True
        raise


def settings(environ=None):
    """What a result records of its numerics: the mode and the settings that move numbers."""
    mode = active(environ)
    environ = os.environ if environ is None else environ
    return {"mode": mode, "env": {k: environ.get(k) for k in RECORDED}}

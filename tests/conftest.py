import os
import pathlib
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BASELINE_DIR = ROOT.parent / "shared" / "tools" / "mxnet-2bit-baseline"


@pytest.fixture(scope="session")
def mxnet_2bit():
    """MXNet's own 2-bit kernels through shared/tools/mxnet-2bit-baseline (skips without it)."""
    if not (BASELINE_DIR / "build.sh").exists():
        pytest.skip("MXNet 2-bit baseline shim not found at %s" % BASELINE_DIR)
    out = tempfile.mkdtemp(prefix="gcshim-")
    proc = subprocess.run(["bash", str(BASELINE_DIR / "build.sh"), out], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("MXNet 2-bit baseline shim did not build: %s" % proc.stderr.strip()[-300:])
    os.environ["MXNET_2BIT_SHIM"] = os.path.join(out, "libgcshim.so")
    import sys
    sys.path.insert(0, str(BASELINE_DIR))
    try:
        import mxnet_2bit
    finally:
        sys.path.remove(str(BASELINE_DIR))
    return mxnet_2bit


# -- what the suite costs (docs/testing.md) ---------------------------------------------------
SLOW_AFTER = 60.0  # seconds: a test that takes longer says why, in a docstring line "Slow: ..."


def pytest_addoption(parser):
    parser.addoption("--file-durations", action="store_true",
                     help="print each test file's total time (setup + call + teardown), the largest first")


_spent = {}  # nodeid -> seconds, all phases
_explained = set()  # nodeids whose docstring has a "Slow:" line


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Whether the test says why it is slow travels with its report (also from pytest-xdist's
    workers, where the tests are collected)."""
    outcome = yield
    if call.when == "call":
        doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
        outcome.get_result().user_properties.append(("explains_slow", "Slow:" in doc))


def pytest_runtest_logreport(report):
    _spent[report.nodeid] = _spent.get(report.nodeid, 0.0) + report.duration
    if dict(report.user_properties).get("explains_slow"):
        _explained.add(report.nodeid)


def pytest_terminal_summary(terminalreporter, config):
    """The machine (so that a run's time can be read against it, CI's included), tests over
    SLOW_AFTER seconds with no "Slow:" line in their docstring (always), and per-file totals
    (--file-durations)."""
    from cdsgd_mx.experiments import provenance
    terminalreporter.write_line(provenance.machine_line())
    unexplained = []
    for nodeid, seconds in sorted(_spent.items(), key=lambda kv: -kv[1]):
        if seconds > SLOW_AFTER and nodeid not in _explained:
            unexplained.append("%7.1f s  %s" % (seconds, nodeid))
    if unexplained:
        terminalreporter.write_sep("-", "over %.0f s with no 'Slow:' line in the docstring (docs/testing.md)" % SLOW_AFTER)
        for line in unexplained:
            terminalreporter.write_line(line)
    if config.getoption("--file-durations"):
        files = {}
        for nodeid, seconds in _spent.items():
            files[nodeid.split("::")[0]] = files.get(nodeid.split("::")[0], 0.0) + seconds
        terminalreporter.write_sep("-", "time per test file (%.0f s in all)" % sum(files.values()))
        for path, seconds in sorted(files.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line("%7.1f s  %s" % (seconds, path))


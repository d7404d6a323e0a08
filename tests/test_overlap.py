"""The overlap is real: a CD-SGD worker starts step t+1 while step t's communication is still
in flight; a BIT-SGD worker does not start it before step t's pushes are acknowledged."""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def spans(trace, name):
    ev = json.load(open(trace))["traceEvents"]
    return [e for e in ev if e.get("ph") == "X" and e["name"] == name]


def run_bench(tmp_path, algorithms):
    cmd = [sys.executable, "-m", "cdsgd_mx.bench.overlap", "--params", "2e5", "--iterations", "14",
           "--warmup", "2", "--k", "3", "--algorithms", algorithms, "--trace-dir", str(tmp_path), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]


def acknowledged(trace):
    """step -> end of its last 'wait push' (the servers applied every payload of that step)."""
    acked = {}
    for e in spans(trace, "wait push"):
        s = e["args"]["step"]
        acked[s] = max(acked.get(s, 0), e["ts"] + e["dur"])
    return acked


def test_trace_shows_overlap_for_cdsgd_and_none_for_bitsgd(tmp_path):
    run_bench(tmp_path, "bitsgd,cdsgd")
    for alg in ("cdsgd", "bitsgd"):
        trace = str(tmp_path / ("%s.json" % alg))
        fb = {e["args"]["step"]: e for e in spans(trace, "forward/backward") if e["args"]["step"] >= 0}
        acked = acknowledged(trace)
        assert len(acked) >= 6, "%s trace has too few compressed rounds" % alg
        early = [s for s, end in acked.items() if s + 1 in fb and fb[s + 1]["ts"] < end - 1.0]
        if alg == "cdsgd":
            # forward/backward of t+1 starts while round t's pushes are still unacknowledged
            assert len(early) >= len(acked) // 2, "cdsgd: no overlap (%d of %d steps)" % (len(early), len(acked))
        else:
            assert early == [], "bitsgd started steps %s before the previous step was acknowledged" % early

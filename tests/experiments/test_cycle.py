"""bench.cycle cuts CD-SGD's cycle from a trace: round, wake, local update, push start."""
import gzip
import json
import subprocess
import sys

import pytest

from cdsgd_mx.bench import cycle


def span(name, step, ts_ms, dur_ms):
    return {"ph": "X", "name": name, "ts": ts_ms * 1e3, "dur": dur_ms * 1e3, "args": {"step": step}}


def steps(rounds):
    """Delayed steps: step t waits for round t-1, updates locally, then round t starts."""
    ev, now = [span("wait W(t)", 0, -20.0, 10.0), span("local update", 0, -10.0, 5.0)], 0.0
    for t, (length, wake, local, push, fp32) in enumerate(rounds):
        ev.append(span("pull", t, now, length))
        ev.append(span("push fp32" if fp32 else "push codes", t, now, 1.0))
        end = now + length
        ev.append(span("wait W(t)", t + 1, end - 100.0, 100.0 + wake))  # began during forward/backward
        ev.append(span("local update", t + 1, end + wake, local))
        now = end + wake + local + push
    ev.append(span("pull", len(rounds), now, 10.0))
    return ev


def test_each_cycle_is_its_round_and_the_work_between_rounds(tmp_path):
    ev = steps([(200.0, 1.0, 5.0, 2.0, False), (300.0, 3.0, 7.0, 4.0, True), (220.0, 2.0, 6.0, 3.0, False)])
    got = cycle.cycles(ev)
    assert [c["kind"] for c in got] == ["2-bit", "fp32", "2-bit"]
    assert [round(c["cycle"], 6) for c in got] == [208.0, 314.0, 231.0]
    assert [(c["round"], round(c["wake"], 6), round(c["local"], 6), round(c["push"], 6)) for c in got] == [
        (200.0, 1.0, 5.0, 2.0), (300.0, 3.0, 7.0, 4.0), (220.0, 2.0, 6.0, 3.0)]
    table = cycle.summary(got)
    assert table["2-bit"]["round"] == (210.0, 210.0) and table["fp32"]["local"] == (7.0, 7.0)
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": ev}, f)
    out = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.cycle", str(path), "--json"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["steps"] == 3


@pytest.mark.parametrize("content", [None, "not json", json.dumps({"traceEvents": []})])
def test_a_trace_it_cannot_use_stops_in_one_line(tmp_path, content):
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    out = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.cycle", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("trace: ") and "Traceback" not in out.stderr

"""A trace span that waits for the engine ends when the engine finished, not when a Python
thread got round to looking: bench.overlap's proof that BIT-SGD waits reads these ends."""
import json
import sys
import time

import mxnet as mx

from cdsgd_mx.worker.trace import Tracer


def test_a_watched_span_ends_at_the_engines_time_not_the_watchers(tmp_path):
    tracer = Tracer(str(tmp_path / "t.json"))
    a = mx.nd.ones((200, 200))
    a.wait_to_read()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5.0)  # the watcher gets the GIL only once this thread lets it go
    try:
        start = tracer.now_us()
        b = a * 2  # done within milliseconds
        tracer.watch("x", b, start, step=0)
        until = time.perf_counter() + 0.3
        while time.perf_counter() < until:  # hold the GIL, as a busy main thread does
            pass
    finally:
        sys.setswitchinterval(interval)
    b.wait_to_read()
    for _ in range(200):
        if tracer.events:
            break
        time.sleep(0.01)
    (ev,) = json.load(open(tracer.save()))["traceEvents"][-1:]
    assert ev["name"] == "x" and ev["args"] == {"step": 0}
    assert 0 <= ev["dur"] < 150e3, "the span ended %.0f ms after it began" % (ev["dur"] / 1e3)

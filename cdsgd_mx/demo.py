"""The README's first command: a small, real run that prints what it did.

For now this exercises the codec the way a CD-SGD worker and server use it: a stream of
gradients is quantized with error feedback, carried over the wire format, decoded and summed,
and the demo reports bytes, accuracy of what arrived and throughput.
"""
import argparse
import time

import numpy as np

from . import codec


def run(n=1_000_000, steps=20, threshold=0.05, workers=2, seed=0):
    rng = np.random.default_rng(seed)
    residuals = [np.zeros(n, np.float32) for _ in range(workers)]
    packed = np.zeros(codec.packed_size(n), np.uint32)
    wire = np.zeros(codec.wire_size(n), np.float32)
    received = np.zeros(n, np.float32)
    sent_total = np.zeros(n, np.float64)
    grad_total = np.zeros(n, np.float64)
    t_encode = t_decode = 0.0
    print("cdsgd_mx demo: %d workers, %d values per gradient, threshold %g, %d steps" % (workers, n, threshold, steps))
    for step in range(steps):
        received[:] = 0
        for w in range(workers):
            grad = rng.normal(0, threshold, n).astype(np.float32)
            grad_total += grad
            t0 = time.perf_counter()
            codec.quantize(grad, residuals[w], packed, threshold)      # worker: 2-bit codes
            codec.wire_encode(packed, wire)                           # worker: server-safe floats
            t1 = time.perf_counter()
            codec.wire_decode(wire, packed)                           # server: back to codes
            codec.dequantize(packed, received, threshold, accumulate=True)  # server: sum
            t2 = time.perf_counter()
            t_encode += t1 - t0
            t_decode += t2 - t1
        sent_total += received
        if step % 5 == 4 or step == steps - 1:
            held = sum(r.astype(np.float64) for r in residuals)
            err = np.abs(sent_total + held - grad_total).max()
            print("step %3d: nonzero codes %5.1f%%, |sent + residual - gradients| max %.2e" % (
                step + 1, 100 * np.count_nonzero(received) / n, err))
    fp32 = 4 * n
    print("bytes per worker per step: %d on the wire vs %d fp32 (%.1fx smaller, %.3f B/value)" % (
        wire.nbytes, fp32, fp32 / wire.nbytes, wire.nbytes / n))
    per = steps * workers
    print("worker encode %.2f ms/step (%.0f Melem/s), server decode+sum %.2f ms/step (%.0f Melem/s)" % (
        1e3 * t_encode / per, n * per / t_encode / 1e6, 1e3 * t_decode / per, n * per / t_decode / 1e6))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    for name in ("size", "steps", "workers"):
        if getattr(args, name) < 1:
            ap.exit(2, "error: --%s must be >= 1, got %d\n" % (name, getattr(args, name)))
    run(n=args.size, steps=args.steps, workers=args.workers)


if __name__ == "__main__":
    main()

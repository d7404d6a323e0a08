"""Codec throughput beside a memory-copy roofline and MXNet's own 2-bit kernels, in one run.

    python -m cdsgd_mx.bench.codec [--threads 1,2] [--sizes 1e4,1e5,1e6,1e7,1e8] [--json]
        [--mxnet-baseline DIR] [--device cpu|cuda]

--json: one JSON object per line, the first {"provenance": ...} (cdsgd_mx.experiments.provenance.record()),
then one row per op, size and thread count.

Each figure is the best of several repetitions (at least --min-time seconds in all).
gb_per_s counts the bytes an op must move per value: quantize reads grad and residual and
writes residual and codes (12.25 B), dequantize reads codes and writes floats (4.25 B; 8.25 B
when it accumulates into them, dequantize_acc), wire
encode/decode read and write a 4-byte word per 16 values (0.5 B), copy reads and writes 4 B each;
decode_sgd (the server's decode of two workers' rows fused with SGD and momentum), pull_encode
and pull_decode (a 2-bit pull's server and worker side, one piece per 4096 values) as listed
in BYTES_PER_VALUE.
MXNet's kernels (--mxnet-baseline: a folder with build.sh and mxnet_2bit.py, e.g. the project's
shared/tools/mxnet-2bit-baseline) are measured when they can be built, and skipped with a note
otherwise.

--device cuda runs the CUDA kernels on GPU 0 instead, on arrays of whichever framework holds
GPU arrays (MXNet with CUDA, else PyTorch or CuPy; see cdsgd_mx.bench.gpu), beside a
device-to-device copy. Each call includes its launch and the wait for its result, as in training.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from cdsgd_mx import codec
from cdsgd_mx.experiments import provenance

BYTES_PER_VALUE = {
    "copy": 8.0,
    "quantize": 12.25,
    "dequantize": 4.25,
    "dequantize_acc": 8.25,
    "quantize_unaligned": 12.25,
    "dequantize_unaligned": 4.25,
    "wire_encode": 0.5,
    "wire_decode": 0.5,
    # a server's round and a 2-bit pull's (issue 29): decode_sgd of two workers' rows reads their
    # words and weight and momentum, writes weight and momentum; pull_encode's two passes read W
    # and V, then read them again and write V and the words; pull_decode reads the words and V,
    # writes V and out
    "decode_sgd": 16.5,
    "pull_encode": 20.25,
    "pull_decode": 12.25,
    "mxnet_quantize": 12.25,
    "mxnet_dequantize": 4.25,
}


def best_time(fn, min_time, min_reps=3):
    fn()  # warm: page faults, caches, lazy init
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def load_mxnet_baseline(folder):
    """MXNet2Bit class from the baseline folder, or (None, reason)."""
    if not folder or not os.path.exists(os.path.join(folder, "build.sh")):
        return None, "no MXNet baseline folder (--mxnet-baseline)"
    out = tempfile.mkdtemp(prefix="gcshim-")
    proc = subprocess.run(["bash", os.path.join(folder, "build.sh"), out], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, "MXNet baseline did not build: " + proc.stderr.strip()[-200:]
    os.environ["MXNET_2BIT_SHIM"] = os.path.join(out, "libgcshim.so")
    sys.path.insert(0, folder)
    try:
        import mxnet_2bit
    finally:
        sys.path.remove(folder)
    return mxnet_2bit.MXNet2Bit, None


def measure(n, threads, min_time, baseline, threshold=0.5):
    rng = np.random.default_rng(0)
    grad = rng.normal(0, 0.5, n).astype(np.float32)
    residual = np.zeros(n, np.float32)
    out = np.empty(n, np.float32)
    dst = np.empty(n, np.float32)
    packed = np.zeros(codec.packed_size(n), np.uint32)
    wire = np.zeros(codec.wire_size(n), np.float32)
    codec.quantize(grad, residual, packed, threshold)
    codec.wire_encode(packed, wire)
    rows2 = np.stack([wire, wire])
    weight, mom = rng.normal(0, 1, n).astype(np.float32), np.zeros(n, np.float32)
    v = (weight + rng.normal(0, 0.01, n)).astype(np.float32)
    pieces = [(b, min(n, b + 4096)) for b in range(0, n, 4096)]
    down = np.zeros(codec.packed_size(n), np.float32)
    scales = codec.pull_encode(weight, v.copy(), pieces, down)
    ops = {
        "copy": lambda: np.copyto(dst, grad),
        "quantize": lambda: codec.quantize(grad, residual, packed, threshold, threads=threads),
        "dequantize": lambda: codec.dequantize(packed, out, threshold, threads=threads),
        "wire_encode": lambda: codec.wire_encode(packed, wire, threads=threads),
        "wire_decode": lambda: codec.wire_decode(wire, packed, threads=threads),
        "decode_sgd": lambda: codec.decode_sgd(rows2, weight, mom, n, threshold, [(0, n, 1e-6, 0.0)], 0.9, 1.0,
                                               threads=threads),
        "pull_encode": lambda: codec.pull_encode(weight, v, pieces, down, threads=threads),
        "pull_decode": lambda: codec.pull_decode(down, v, pieces, scales, out=out, threads=threads),
    }
    if baseline is not None:
        import mxnet as mx
        q = baseline(threshold=threshold)
        mg, mr = mx.nd.array(grad), mx.nd.zeros(n)
        mp, mo = mx.nd.zeros(q.compressed_size(n)), mx.nd.zeros(n)
        mx.nd.waitall()

        def mx_quantize():
            q.quantize(mg, mp, mr)
            mp.wait_to_read()

        def mx_dequantize():
            q.dequantize(mp, mo)
            mo.wait_to_read()

        ops["mxnet_quantize"] = mx_quantize
        ops["mxnet_dequantize"] = mx_dequantize
    rows = time_ops(ops, n, min_time, threads=threads)
    for r in rows:
        if r["op"] == "copy":
            r["threads"] = 1  # numpy's copy is single-threaded
    return rows


def time_ops(ops, n, min_time, **fields):
    """One row per op (dict order): throughput of its best time, plus the given fields."""
    rows = []
    for op, fn in ops.items():
        t = best_time(fn, min_time)
        rows.append(dict(op=op, n=n, **fields, melem_per_s=n / t / 1e6,
                         gb_per_s=n * BYTES_PER_VALUE[op] / t / 1e9))
    return rows


def measure_cuda(n, min_time, arrays, threshold=0.5):
    """The same ops on GPU 0; copy is the framework's device-to-device copy. The *_unaligned rows
    run on views one float into their arrays (n - 1 values), which take the one-value-per-thread
    kernels (codec.md): what an array that is not 16-byte aligned costs."""
    rng = np.random.default_rng(0)
    m = codec.packed_size(n)
    g, r = arrays.array(rng.normal(0, 0.5, n).astype(np.float32)), arrays.zeros(n, "float32")
    dst, out = arrays.zeros(n, "float32"), arrays.zeros(n, "float32")
    p, w = arrays.zeros(m, "int32"), arrays.zeros(m, "float32")
    g_, r_, out_, p_, w_ = (arrays.arg(x) for x in (g, r, out, p, w))  # capsules made once
    codec.quantize(g_, r_, p_, threshold)
    ops = {
        "copy": lambda: arrays.copy(g, dst),
        "quantize": lambda: codec.quantize(g_, r_, p_, threshold),
        "dequantize": lambda: codec.dequantize(p_, out_, threshold),
        "dequantize_acc": lambda: codec.dequantize(p_, out_, threshold, accumulate=True),
        "wire_encode": lambda: codec.wire_encode(p_, w_),
        "wire_decode": lambda: codec.wire_decode(w_, p_),
    }
    if n > 1:
        g1, r1, out1 = (arrays.arg(x[1:]) for x in (g, r, out))
        p1 = arrays.arg(p[:codec.packed_size(n - 1)])
        ops["quantize_unaligned"] = lambda: codec.quantize(g1, r1, p1, threshold)
        ops["dequantize_unaligned"] = lambda: codec.dequantize(p1, out1, threshold)
    return time_ops(ops, n, min_time, threads=0, device="cuda:" + arrays.name)


def main(argv=None):
    default_baseline = os.environ.get("CDSGD_MXNET_BASELINE", os.path.join("..", "shared", "tools", "mxnet-2bit-baseline"))
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.codec", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7,1e8", help="comma-separated n (default %(default)s)")
    ap.add_argument("--threads", default="1", help="comma-separated thread counts (default %(default)s)")
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds of repetitions per figure")
    ap.add_argument("--mxnet-baseline", default=default_baseline, help="folder of the MXNet 2-bit baseline shim")
    ap.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = ap.parse_args(argv)
    if args.device not in ("cpu", "cuda"):
        ap.exit(2, "error: --device must be one of cpu, cuda, got %r\n" % args.device)
    try:
        sizes = [int(float(s)) for s in args.sizes.split(",")]
        threads = [int(s) for s in args.threads.split(",")]
        if any(s < 1 for s in sizes) or any(t < 1 for t in threads):
            raise ValueError
    except ValueError:
        ap.exit(2, "error: --sizes and --threads take comma-separated positive numbers, e.g. --sizes 1e6,1e7 --threads 1,2\n")
    if args.device == "cuda":
        from cdsgd_mx.bench import gpu
        arrays, why = (None, "cdsgd_mx was built without CUDA or sees no GPU") \
            if codec.cuda_device_count() == 0 else gpu.backend()
        if arrays is None:
            ap.exit(2, "error: --device cuda: %s\n" % why)
        threads, baseline, why = [0], None, "MXNet's 2-bit kernels are measured on the CPU only"
    else:
        baseline, why = load_mxnet_baseline(os.path.abspath(args.mxnet_baseline))
    if why and not args.json:
        print("note: MXNet kernels not measured: %s" % why)
    if args.json:  # the first line: where and how these rows were made (provenance.py)
        print(json.dumps({"provenance": provenance.record()}), flush=True)
    else:
        print("%-17s %11s %7s %12s %9s %10s %10s" % ("op", "n", "threads", "Melem/s", "GB/s", "x mxnet", "% of copy"))
    for n in sizes:
        for t in threads:
            rows = measure_cuda(n, args.min_time, arrays) if args.device == "cuda" \
                else measure(n, t, args.min_time, baseline)
            by_op = {r["op"]: r for r in rows}
            for r in rows:
                mx_op = {"quantize": "mxnet_quantize", "dequantize": "mxnet_dequantize"}.get(r["op"])
                if mx_op in by_op:
                    r["x_mxnet"] = r["melem_per_s"] / by_op[mx_op]["melem_per_s"]
                r["fraction_of_copy"] = r["gb_per_s"] / by_op["copy"]["gb_per_s"]
                if args.json:
                    print(json.dumps(r), flush=True)
                else:
                    x = "%10.1f" % r["x_mxnet"] if "x_mxnet" in r else "%10s" % "-"
                    print("%-17s %11d %7d %12.1f %9.2f %s %9.0f%%" % (
                        r["op"], r["n"], r["threads"], r["melem_per_s"], r["gb_per_s"], x,
                        100 * r["fraction_of_copy"]), flush=True)


if __name__ == "__main__":
    main()

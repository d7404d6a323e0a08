"""The device part of a compressed round against the host path it replaces (issue 12).

    python -m cdsgd_mx.bench.device [--values 25600000] [--repeats 50] [--threads 16,1] [--json F]

For one bucket of --values values (default: ResNet-50's 25.6 M) whose gradient lives on GPU 0:
- host path: the fp32 gradient to page-locked host memory, then the CPU quantizer (with each
  of --threads threads): what a worker does when only the host compresses;
- device part (cdsgd_mx.worker.device.DeviceBucket.compress): quantize + residual on the GPU, the
  codes (0.25 B/value) to page-locked host memory;
- codec alone: the same two native calls made directly, with the arrays' DLPack views made
  beforehand (what integration adds is the difference);
- weights back: the fp32 weights from the host to the device (both paths pay it once per bucket);
- per step: the same values in buckets of --bucket-values (the worker's bucket size), one call
  each, with the codes' copy in the kernel's wait (DeviceBucket.compress) or after it in a
  second wait, beside one call of 16 values (the launch and the wait alone).
Median wall time of --repeats runs each, in one process, side by side. Needs a CUDA GPU and one of
MXNet with CUDA, PyTorch or CuPy; `--device cpu` runs the same steps on host arrays (a check that
the command works, not a measurement of anything a GPU does).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from cdsgd_mx import codec
from cdsgd_mx.experiments import provenance
from cdsgd_mx.worker.device import DeviceBucket
from cdsgd_mx.bench import gpu

T = 0.5


def median_ms(fn, repeats, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(B, n, repeats, threads, bucket_values):
    rng = np.random.default_rng(0)
    g = B.array(rng.normal(0, 0.4, n).astype(np.float32))
    bucket = DeviceBucket(n, T, B.zeros)
    host_g = codec.host_buffer(n)
    host_residual = np.zeros(n, np.float32)
    host_codes = np.zeros(codec.packed_size(n), np.uint32)
    weights = codec.host_buffer(n)
    out = B.zeros(n, "float32")
    row = {"values": n, "pinned": codec.is_pinned(host_g), "framework": B.name}

    for t in threads:
        def host_path():
            codec.copy(g, host_g)
            codec.quantize(host_g, host_residual, host_codes, T, threads=t)
        row["host_path_ms_%dthreads" % t] = median_ms(host_path, repeats)

    row["device_part_ms"] = median_ms(lambda: bucket.compress(g), repeats)
    g_arg, r_arg, c_arg = B.arg(g), B.arg(bucket.residual), B.arg(bucket.codes)  # made once, outside the timing
    row["codec_alone_ms"] = median_ms(
        lambda: codec.quantize(g_arg, r_arg, c_arg, T, codes_to=bucket.host_codes), repeats)

    # A model's gradients go through in buckets, one call each: what a step pays in calls
    size = min(bucket_values, n)
    small = DeviceBucket(size, T, B.zeros)
    gs = B.array(rng.normal(0, 0.4, size).astype(np.float32))
    gs_arg, rs_arg, cs_arg = B.arg(gs), B.arg(small.residual), B.arg(small.codes)

    def two_waits():  # the kernel's wait, then the codes' copy and its own wait
        codec.quantize(gs_arg, rs_arg, cs_arg, T)
        codec.copy(cs_arg, small.host_codes)
    row["bucket_values"], row["buckets"] = size, -(-n // size)
    row["bucket_compress_ms"] = median_ms(lambda: small.compress(gs), repeats)  # with the arrays' conversions
    row["bucket_one_wait_ms"] = median_ms(
        lambda: codec.quantize(gs_arg, rs_arg, cs_arg, T, codes_to=small.host_codes), repeats)
    row["bucket_two_waits_ms"] = median_ms(two_waits, repeats)
    tiny = DeviceBucket(16, T, B.zeros)
    gt = B.array(np.ones(16, np.float32))
    row["call_latency_ms"] = median_ms(lambda: tiny.compress(gt), repeats)  # 16 values: the call alone
    row["weights_back_ms"] = median_ms(lambda: bucket.to_device(weights, out), repeats)
    best_host = min(row["host_path_ms_%dthreads" % t] for t in threads)
    row["host_path_over_device_part"] = best_host / row["device_part_ms"]
    row["device_part_over_codec_alone"] = row["device_part_ms"] / row["codec_alone_ms"]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.bench.device", description=__doc__.split("\n\n")[0])
    ap.add_argument("--values", type=int, default=25_600_000, help="values in the bucket (default: ResNet-50's 25.6 M)")
    ap.add_argument("--bucket-values", type=int, default=1 << 20,
                    help="values per bucket for the per-step figures (default 2^20)")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--threads", default="%d,1" % (os.cpu_count() or 1),
                    help="CPU threads of the host path's quantizer, comma-separated (default: all cores, then 1)")
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    try:
        threads = [int(t) for t in args.threads.split(",") if t.strip()]
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        sys.exit("bench.device: --threads must be integers >= 1, comma-separated, got %r" % args.threads)
    if args.values < 1 or args.repeats < 1 or args.bucket_values < 1:
        sys.exit("bench.device: --values, --bucket-values and --repeats must be >= 1")
    if args.device == "cpu":
        B = gpu.HostArrays()
    else:
        if codec.cuda_device_count() == 0:
            sys.exit("bench.device: no CUDA GPU here (or cdsgd_mx built without CUDA); "
                     "--device cpu runs the steps on host arrays")
        B, why = gpu.backend()
        if B is None:
            sys.exit("bench.device: " + why)
    print("bench.device: %d values, %s, %d repeats" % (args.values, B.name, args.repeats), flush=True)
    row = measure(B, args.values, args.repeats, threads, args.bucket_values)
    print("host memory page-locked: %s" % row["pinned"])
    for t in threads:
        print("host path (fp32 to host, CPU quantize, %2d threads): %8.3f ms" % (t, row["host_path_ms_%dthreads" % t]))
    print("device part (DeviceBucket.compress)               : %8.3f ms" % row["device_part_ms"])
    print("codec alone (quantize + codes to host, one call)  : %8.3f ms" % row["codec_alone_ms"])
    print("weights back (fp32, host to device)               : %8.3f ms" % row["weights_back_ms"])
    print("host path / device part: %.1fx (goal >= 10); device part / codec alone: %.2f (goal <= 1.5)"
          % (row["host_path_over_device_part"], row["device_part_over_codec_alone"]))
    k, b = row["buckets"], row["bucket_values"]
    print("per step, %d buckets of %d values, a call each (ms per step, per bucket):" % (k, b))
    for label, key in (("DeviceBucket.compress", "bucket_compress_ms"),
                       ("codec alone, codes in the same wait", "bucket_one_wait_ms"),
                       ("codec alone, quantize then copy", "bucket_two_waits_ms")):
        print("  %-38s: %8.3f  %7.3f" % (label, k * row[key], row[key]))
    print("  %-38s: %8.3f" % ("the whole model in one call", row["device_part_ms"]))
    print("  %-38s: %8.3f" % ("one call of 16 values (launch + wait)", row["call_latency_ms"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(row, provenance=provenance.record()), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The README's first command: a small real CD-SGD run beside S-SGD, printing what it did.

LeNet-5 on MNIST, 2 workers + 1 server on this machine (loopback), the paper's LeNet settings
(global lr 0.1, local lr 0.4, threshold 0.5, batch 32 per worker, k = 2), a few hundred
iterations per algorithm. MNIST is fetched once (see cdsgd_mx.data).
"""
import argparse
import json
import subprocess
import sys

ALGORITHMS = ["ssgd", "cdsgd"]


def run_job(algorithm, workers, servers, iterations, extra):
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", str(workers), "-s", str(servers), "--timeout", "900", "--",
           sys.executable, "-m", "cdsgd_mx.examples.lenet_mnist", "--algorithm", algorithm,
           "--iterations", str(iterations)] + extra
    print("\n$ " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    result = None
    for line in proc.stdout:
        if "RESULT " in line:
            result = json.loads(line.split("RESULT ", 1)[1])
        elif "iteration" in line or "error" in line.lower() or "Traceback" in line or "launch |" in line:
            print("  " + line.rstrip(), flush=True)
    if proc.wait() != 0 or result is None:
        sys.exit("demo: the %s job failed (exit code %s)" % (algorithm, proc.returncode))
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS),
                    help="comma-separated, from ssgd, bitsgd, odsgd, cdsgd (default %(default)s)")
    args = ap.parse_args(argv)
    algorithms = args.algorithms.split(",")
    bad = [a for a in algorithms if a not in ("ssgd", "bitsgd", "odsgd", "cdsgd")]
    if bad:
        ap.error("--algorithms: %s not one of ssgd, bitsgd, odsgd, cdsgd" % ", ".join(bad))
    for name in ("iterations", "workers", "servers"):
        if getattr(args, name) < 1:
            ap.error("--%s must be >= 1" % name)
    print("cdsgd_mx demo: LeNet-5 on MNIST, %d workers + %d server(s) on this machine, %d iterations each"
          % (args.workers, args.servers, args.iterations))
    results = [run_job(a, args.workers, args.servers, args.iterations, []) for a in algorithms]
    print("\n%-8s %14s %14s %18s %12s" % ("algorithm", "test accuracy", "ms/iteration", "MB pushed/worker", "final loss"))
    for r in results:
        print("%-8s %13.2f%% %14.1f %18.1f %12.4f" % (r["algorithm"], 100 * r["test_accuracy"], r["iter_ms"],
                                                     r["bytes_pushed_per_worker"] / 1e6, r["final_loss"]))
    print("data: %s" % results[0]["data"])
    print("ms/iteration excludes the warm-up steps; on one 2-core machine compute and three processes share the "
          "CPUs, so this shows the algorithms work, not the speedups of a real cluster (see docs/performance.md).")


if __name__ == "__main__":
    main()

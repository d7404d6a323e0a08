"""What a clip on the local step costs in time: the local update (eq. 11) with and without
clip_gradient, side by side, interleaved, on arrays of the given sizes.

    python -m cdsgd_mx.bench.local_step [--sizes 61706,25600000] [--repeats 30]

The local update is MXNet's sgd_update on the worker (cdsgd_mx.worker.local_update), on the main
thread between backward and the next forward; `local_clip` (train.py) / the local optimizer's
clip_gradient only adds a parameter to it. Prints the median time of each and their ratio.
"""
import argparse
import time

import numpy as np

from cdsgd_mx.mxnet_import import import_mxnet


def time_local_step(mx, n, repeats, clip, lr=0.4, rescale=1 / 64, calls=5):
    w, g = mx.nd.random.normal(shape=(n,)), mx.nd.random.normal(shape=(n,))
    kwargs = {} if clip is None else {"clip_gradient": clip}
    mx.nd.waitall()

    def once():
        start = time.perf_counter()
        for _ in range(calls):
            mx.nd.sgd_update(w, g, lr=lr, rescale_grad=rescale, out=w, **kwargs)
        w.wait_to_read()
        return (time.perf_counter() - start) / calls
    return once


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="61706,25600000", help="values per array (LeNet-5's, ResNet-50's)")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--clip", type=float, default=0.1)
    args = ap.parse_args(argv)
    mx = import_mxnet()
    for n in (int(float(s)) for s in args.sizes.split(",")):
        plain, clipped = time_local_step(mx, n, args.repeats, None), time_local_step(mx, n, args.repeats, args.clip)
        times = {"plain": [], "clipped": []}
        for _ in range(args.repeats):  # interleaved: a change in the machine's load hits both alike
            times["plain"].append(plain())
            times["clipped"].append(clipped())
        a, b = np.median(times["plain"]), np.median(times["clipped"])
        print("%d values: local step %.3f ms, with clip_gradient=%g %.3f ms: %.2fx" % (n, 1e3 * a, args.clip, 1e3 * b, b / a),
              flush=True)


if __name__ == "__main__":
    main()

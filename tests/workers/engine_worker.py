"""A worker of the engine tests: deterministic gradients that depend on the weights in use.

g_r(x, t) = round64(c_r * x + d_{r,t}) per parameter: a function of the weights x the worker
trains with (so the one-step delay is visible in the result), on a 1/64 grid (so quantization
decisions do not hinge on float rounding, and sums are exact in any order; config "offgrid":
true leaves out the rounding, so that the order of the servers' fp32 sum shows). Modes:
  cdsgd     cdsgd_mx.Trainer with --algorithm
  stock     gluon.Trainer with kvstore='dist_sync' (S-SGD reference)
  stock_local  the same with update_on_kvstore=False (workers update; honours lr_mult/wd_mult)
  mxnet2bit kv.push/kv.pull with MXNet's own 2-bit compression (BIT-SGD reference)
Config "clip": C runs cdsgd mode with update_on_kvstore=False, the workers updating:
allreduce_grads(), gluon's clip_global_norm(gradients, C), update() (gluon-nlp's clipping).
Config "fp32_sum": the Trainer's (a list: one per launch index, for workers that disagree).
Config "bucket_size": the Trainer's (default: its own). Config "trace": the trace's path, "{index}"
in it replaced by the worker's launch index.
Config "devices": D puts every parameter on cpu(0) .. cpu(D-1), each device with its own
gradient (device_grad: another batch share), as ctx=[mx.gpu(i) ...] would; a list gives each
rank its own count (cdsgd mode).
Writes OUT/rank<R>.npz: final x and global W per parameter, bytes pushed per step, and with
several devices the x of every device ("x<i>_dev<d>").
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np

SHAPES = [(37,), (5, 7), (700,), (1,)]  # (700,) is above the bound the tests set (600)


def grad_fn(x, rank, t, index, stable=False, grid=True):
    """stable=True: c > 0 everywhere, so long runs stay bounded (a pull towards -d/c).
    grid=False: float32 values with all their bits (sums depend on their order)."""
    rng = np.random.RandomState(1000 * rank + 10 * index + 1)
    c = rng.uniform(0.05 if stable else -0.3, 0.3, x.shape).astype(np.float32)
    d = np.random.RandomState(7919 * t + 97 * rank + index).normal(0, 0.4, x.shape).astype(np.float32)
    g = (c * x + d).astype(np.float32)
    return (np.round(g * 64) / 64).astype(np.float32) if grid else g


def offgrid_grad(x, rank, t, index, stable=False):
    """grad_fn without the grid (config "offgrid"), as a grad_fn for the simulation."""
    return grad_fn(x, rank, t, index, stable, grid=False)


def device_grad(x, rank, t, index, device, stable=False, grid=True):
    """The gradient of one device of a worker: device 0's is grad_fn's, the others' differ."""
    return grad_fn(x, rank + 50 * device, t, index, stable, grid)


def summed_grad(devices):
    """A worker's gradient with `devices` devices: the sum of theirs (what it pushes; exact,
    on the 1/64 grid), as a grad_fn for the simulation."""
    def grad(x, rank, t, index, stable=False):
        return sum(device_grad(x, rank, t, index, d, stable) for d in range(devices))
    return grad


def init_value(index, shape):
    return np.random.RandomState(31 + index).uniform(-1, 1, shape).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="cdsgd")
    ap.add_argument("--algorithm", default="cdsgd")
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--config", default="{}")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ckpt", default=None, help="checkpoint path (with --save-at or --resume-at)")
    ap.add_argument("--save-at", type=int, default=None, help="save after this many steps and stop")
    ap.add_argument("--resume-at", type=int, default=None, help="load the checkpoint, continue from this step")
    args = ap.parse_args()
    cfg = json.loads(args.config)
    from cdsgd_mx.mxnet_import import import_mxnet
    import_mxnet()  # as the project's own nodes start: without scikit-learn
    import mxnet as mx
    from mxnet import gluon

    opt_params = {"learning_rate": cfg.get("lr", 0.25), "momentum": cfg.get("momentum", 0.5), "wd": cfg.get("wd", 0.0)}
    batch = cfg.get("batch", 4)
    params = gluon.ParameterDict()
    plist = []
    for i, shape in enumerate(SHAPES):
        p = params.get("p%d" % i, shape=shape, init=mx.init.Constant(init_value(i, shape).tolist()))
        plist.append(p)
    devices, store = cfg.get("devices", 1), None
    if isinstance(devices, list):  # a count per rank: the rank first, from the store the Trainer wraps
        store = mx.kv.create("dist_sync")
        devices = devices[store.rank]
    contexts = [mx.cpu(d) for d in range(devices)]
    params.initialize(ctx=contexts)
    def set_mults():  # per-parameter settings as gluon-cv's no-wd option and lr_mult would set them
        plist[1].lr_mult = 2.0
        plist[2].wd_mult = 3.0
        plist[3].wd_mult = 0.0  # the (1,) parameter plays a bias
    if cfg.get("mults") and not cfg.get("mults_at"):
        set_mults()

    if args.mode == "mxnet2bit":
        kv = mx.kv.create("dist_sync")
        kv.set_gradient_compression({"type": "2bit", "threshold": args.threshold})
        for i, p in enumerate(plist):
            kv.init(i, p.data())
        kv.set_optimizer(mx.optimizer.create("sgd", rescale_grad=1.0 / batch, **opt_params))
        rank = kv.rank
        for t in range(args.steps):
            for i, p in enumerate(plist):
                g = mx.nd.array(grad_fn(p.data().asnumpy(), rank, t, i))
                kv.push(i, g)
                kv.pull(i, out=p.data())
        mx.nd.waitall()
        finals = [p.data().asnumpy() for p in plist]
        save(args.out, rank, finals, finals, {})
        return

    if args.mode in ("stock", "stock_local"):
        trainer = gluon.Trainer(params, "sgd", opt_params, kvstore="dist_sync",
                                update_on_kvstore=False if args.mode == "stock_local" else None)
        trainer._optimizer.rescale_grad = 1.0 / batch  # what step() sets; the kvstore exists now
        trainer._init_kvstore()
        # Stock MXNet 1.9.1 races here if left to step(): its first step broadcasts the initial
        # weights (init + pull into a pinned buffer) and then pushpulls the gradients through
        # another buffer, so the engine does not order the two; when the pushpull reaches the
        # server first, the pull returns the summed gradient as the weights (seen in about one
        # run in eight, for one key on both ranks). Broadcast before the first step and wait.
        trainer._init_params()
        mx.nd.waitall()
        rank = trainer._kvstore.rank
    else:
        import cdsgd_mx
        if "part_close" in cfg:  # how near the part choice's medians must be for a second look
            from cdsgd_mx.worker import part_choice
            part_choice.CLOSE = cfg["part_close"]
        if store is None:
            store = cfg.get("kvstore", "dist_sync")
        if cfg.get("existing_store"):  # as MXNet's cifar10_dist.py does, for its rank before its data loaders
            store = mx.kv.create("dist_sync")
        fp32_sum = cfg.get("fp32_sum", "arrival")
        if isinstance(fp32_sum, list):  # one per launch index: workers that disagree
            fp32_sum = fp32_sum[int(os.environ.get("CDSGD_LAUNCH_INDEX", 0))]
        trainer = cdsgd_mx.Trainer(params, "sgd", opt_params, kvstore=store,
                                   algorithm=args.algorithm,
                                   k=args.k + int(os.environ.get("CDSGD_LAUNCH_INDEX", 0)) * cfg.get("k_by_index", 0),
                                   warmup_steps=args.warmup,
                                   threshold=args.threshold,
                                   trace=cfg["trace"].replace("{index}", os.environ.get("CDSGD_LAUNCH_INDEX", "0"))
                                   if cfg.get("trace") else None,
                                   nonfinite=cfg.get("nonfinite", "error"),
                                   local_optimizer_params={"learning_rate": cfg.get("local_lr", 0.5)},
                                   pull_compression=cfg.get("pull", "none"), resync_every=cfg.get("resync_every", 10),
                                   fp32_sum=fp32_sum, bucket_size=cfg.get("bucket_size"),
                                   update_on_kvstore=False if cfg.get("clip") else None)
        rank = trainer.kvstore.rank
    first, copies = 0, []
    if args.resume_at is not None:
        saved = np.load("%s.x%d.npz" % (args.ckpt, rank))
        for i, p in enumerate(plist):
            p.set_data(mx.nd.array(saved["x%d" % i]))
        trainer.load_states(args.ckpt)
        first = args.resume_at
    for t in range(first, args.steps):
        if cfg.get("pause_at") and t == cfg["pause_at"][0]:  # until the test says go (test_security)
            pause(cfg["pause_at"][1], rank)
        if args.save_at is not None and t == args.save_at:
            trainer.save_states(args.ckpt)
            np.savez("%s.x%d.npz" % (args.ckpt, rank), **{"x%d" % i: p.data().asnumpy() for i, p in enumerate(plist)})
            break
        if cfg.get("mults") and t == cfg.get("mults_at"):  # changed mid-training, before step t
            set_mults()
        for i, p in enumerate(plist):
            if [rank, t, i] in cfg.get("stale", []) or [-1, t, i] in cfg.get("stale", []):
                continue  # no backward reached it: its old gradient stays, not fresh (-1: every rank)
            for d, ctx in enumerate(contexts):  # from each device's own weights: all must be updated
                g = device_grad(p.data(ctx).asnumpy(), rank, t, i, d, stable=cfg.get("stable", False),
                                grid=not cfg.get("offgrid"))
                if [rank, t] in cfg.get("nan_at", []) and i == 1:
                    g[0, 0] = np.nan  # a non-finite gradient in one parameter of this worker
                p.grad(ctx)[:] = g
                p.data(ctx)._fresh_grad = True  # as backward would: gluon's local update skips stale ones
        if cfg.get("clip"):  # the workers update: the summed gradients clipped to a global norm first
            trainer.allreduce_grads()
            gluon.utils.clip_global_norm([p.grad() for p in plist], cfg["clip"])
            trainer.update(batch)
            continue
        trainer.step(batch, ignore_stale_grad=bool(cfg.get("stale")))
        if cfg.get("pull", "none") != "none":  # each bucket's V after every step's round: (weight key, round, crc)
            trainer.kvstore.wait_all()
            copies.extend([b.weight_key, trainer.kvstore.backend.rounds.get(b.weight_key, 0),
                           zlib.crc32(bset.copy.v[b.offset:b.offset + b.size].tobytes())]
                          for bset in trainer.kvstore.bucket_sets for b in bset.buckets)
    if args.mode in ("stock", "stock_local"):
        mx.nd.waitall()
        rank = trainer._kvstore.rank
        finals = [p.data().asnumpy() for p in plist]
        save(args.out, rank, finals, finals, {}, devices=device_weights(plist, contexts))
        return
    kv = trainer.kvstore
    kv.wait_all()
    xs = [p.data().asnumpy() for p in plist]
    # (where the workers update, the servers hold the last summed gradient, not weights)
    ws = xs if cfg.get("clip") else [kv.global_weights(i).asnumpy() for i in range(len(plist))]
    extra = dict(device_weights(plist, contexts), device_path=np.array(all(s.device is not None for s in kv.bucket_sets)),
                 parts=np.array(sum(len(b.parts) for s in kv.bucket_sets for b in s.buckets)))  # (buckets.partition)
    if copies:  # V: every step's, and the last one whole
        extra.update(copies=np.array(copies, np.int64), v=np.concatenate([s.copy.values() for s in kv.bucket_sets]))
    save(args.out, kv.rank, xs, ws, kv.bytes_by_step,
         expected=[kv.push_bytes_of_step(t) for t in sorted(kv.bytes_by_step)], devices=extra)
    if cfg.get("trace"):
        trainer.save_trace()


def pause(go, rank):
    """Say this worker is paused (GO.paused<rank>, with the job's secret for the leak checks,
    readable by its owner only), then wait until the file GO exists. A restarted job (--max-restarts)
    finds GO there and goes on."""
    import time
    from cdsgd_mx.wire import auth
    if os.path.exists(go):
        return
    fd = os.open("%s.paused%d" % (go, rank), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, auth.job_secret())
    os.close(fd)
    while not os.path.exists(go):
        time.sleep(0.05)


def device_weights(plist, contexts):
    """{"x<i>_dev<d>": the weights of parameter i on device d} for the devices after the first."""
    return {"x%d_dev%d" % (i, d): p.data(ctx).asnumpy() for i, p in enumerate(plist)
            for d, ctx in enumerate(contexts) if d > 0}


def save(out, rank, xs, ws, bytes_by_step, expected=(), devices=None):
    os.makedirs(out, exist_ok=True)
    data = dict(devices or {})
    data.update({"x%d" % i: x for i, x in enumerate(xs)})
    data.update({"w%d" % i: w for i, w in enumerate(ws)})
    steps = sorted(bytes_by_step)
    data["bytes"] = np.array([bytes_by_step[s] for s in steps], np.int64)
    data["bytes_expected"] = np.array(expected, np.int64)
    np.savez(os.path.join(out, "rank%d.npz" % rank), **data)


if __name__ == "__main__":
    sys.exit(main())

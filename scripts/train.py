#!/usr/bin/env python
"""Train one configuration (configs/*.yaml) with S-SGD, BIT-SGD, OD-SGD or CD-SGD.

    python scripts/train.py --config configs/fig6_lenet_mnist.yaml [field=value ...] [--resume]

The whole config is validated before anything starts (one line naming the field and what it
allows). With workers > 1 (or an emulated link) the job runs under cdsgd_mx.launch; each worker
trains on its shard. Writes into `out`: config.json, metrics-rank<r>.jsonl (one JSON object per
iteration: loss, iteration time, bytes pushed; and per epoch: loss, train and test accuracy),
and, per epoch, a checkpoint that --resume continues from: one all-or-nothing set whose
manifest is `out/checkpoint.states` (trainer states, each worker's parameters, the epoch;
cdsgd_mx.wire.checkpoint.load_parameters reads a worker's parameters back). A job restarted by the
launcher (max_restarts, CDSGD_RESTART > 0) resumes from it by itself.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

from cdsgd_mx.server.node import serve_if_not_worker

serve_if_not_worker()  # with MXNet's tools/launch.py every role runs this script

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cdsgd_mx import numerics  # noqa: E402
from cdsgd_mx.experiments import provenance  # noqa: E402
from cdsgd_mx.experiments import config as C  # noqa: E402

COMMAND_ENV = "CDSGD_TRAIN_COMMAND"  # the command the user ran, for the workers' provenance record


def choose_k(cfg):
    if cfg.k != "auto":
        return cfg.k
    from cdsgd_mx.experiments import timemodel
    try:
        rows = [json.loads(line) for line in open(cfg.costs) if line.strip().startswith("{")]
        costs = next(r for r in rows if "phi_ms" in r)
        tau = [r["compute_ms"] for r in rows if "compute_ms" in r]
        pull = cfg.pull_compression == "2bit"
        if pull and "psi_pull_plus_delta_ms" not in costs:
            raise C.ConfigError("costs: %s has no 2-bit pull round (psi_pull_plus_delta_ms): measure it with python "
                                "-m cdsgd_mx.bench.overlap --interleaved --algorithms cdsgd,cdsgd_2bit --json"
                                % cfg.costs)
        c = timemodel.calibrate(sum(tau) / len(tau), costs["phi_ms"], costs["psi_plus_delta_ms"],
                                pull_round_ms=costs.get("psi_pull_plus_delta_ms"))
    except (OSError, ValueError, StopIteration, KeyError, ZeroDivisionError) as e:
        raise C.ConfigError("costs: %s is not the --json output of python -m cdsgd_mx.bench.overlap (%s)"
                            % (cfg.costs, e))
    return timemodel.choose_k(c, pull=pull)


class ArrayData:
    """An in-memory data set: this rank's shard of the training set (which samples it holds
    follows the seed; a new order per epoch, depending on (seed, epoch, rank) only, so a
    resumed run sees the same batches), the whole test set on every rank. augment: random
    4-pixel-padded crops and horizontal flips (the usual CIFAR-10 augmentation)."""

    def __init__(self, xtr, ytr, xte, yte, source, cfg, rank, workers, augment=False):
        from cdsgd_mx.experiments import data
        if cfg.train_samples:
            xtr, ytr = xtr[:cfg.train_samples], ytr[:cfg.train_samples]
        if cfg.test_samples:
            xte, yte = xte[:cfg.test_samples], yte[:cfg.test_samples]
        idx = data.shard(len(xtr), rank, workers, seed=cfg.seed)
        self.xtr, self.ytr, self.xte, self.yte = xtr[idx], ytr[idx], xte, yte
        self.source, self.augment = source, augment
        self.batch, self.seed, self.rank = cfg.batch_size, cfg.seed, rank
        # every rank the same number of batches, from the smallest shard (a synchronous job
        # hangs when one rank steps more): the rest of a larger shard waits for another epoch's order
        self.per_epoch = max(1, len(xtr) // workers // self.batch)

    def train_batches(self, epoch):
        import numpy as np
        order = np.random.RandomState([self.seed, epoch, self.rank]).permutation(len(self.xtr))
        rng = np.random.RandomState([self.seed, epoch, self.rank, 1])
        for b in range(self.per_epoch):
            sel = order[b * self.batch:(b + 1) * self.batch]
            x = self.xtr[sel]
            if self.augment:
                x = _crop_and_flip(x, rng)
            yield x, self.ytr[sel]

    def test_batches(self):
        for i in range(0, len(self.xte), 1000):
            yield self.xte[i:i + 1000], self.yte[i:i + 1000]


def _crop_and_flip(x, rng, pad=4):
    import numpy as np
    n, _, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.empty_like(x)
    dy, dx = rng.randint(0, 2 * pad + 1, n), rng.randint(0, 2 * pad + 1, n)
    flip = rng.rand(n) < 0.5
    for i in range(n):
        img = padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
        out[i] = img[:, :, ::-1] if flip[i] else img
    return out


class RecordData:
    """ImageNet from MXNet's RecordIO files: each rank reads its part of train.rec."""

    def __init__(self, cfg, rank, workers, shape):
        from cdsgd_mx.experiments import data
        self.records = data.ImageNetRecords(cfg.data_dir, rank, workers, cfg.batch_size, shape=shape, seed=cfg.seed)
        self.source = self.records.source
        self.per_epoch = max(1, self.records.num_train // workers // cfg.batch_size)
        self.test_samples = cfg.test_samples

    def train_batches(self, epoch):
        import itertools
        for x, y in itertools.islice(self.records.train_batches(epoch), self.per_epoch):  # the same on every rank
            yield x, y.asnumpy()

    def test_batches(self):
        seen = 0
        for x, y in self.records.val_batches():
            if self.test_samples and seen >= self.test_samples:
                return
            seen += len(y)
            yield x, y.asnumpy()


def num_classes(cfg):
    """ImageNet's 1000, also for synthetic ImageNet-shaped inputs; else 10."""
    from cdsgd_mx.experiments import models
    imagenet_shaped = models.INPUT_SHAPES[cfg.model][1] == 224
    return 1000 if cfg.dataset == "imagenet" or (cfg.dataset == "synthetic" and imagenet_shaped) else 10


def load_data(cfg, rank, workers):
    from cdsgd_mx.experiments import data, models
    shape = models.INPUT_SHAPES[cfg.model]
    if cfg.dataset == "synthetic":
        x, y, source = data.synthetic(shape, num_classes(cfg), 64 * cfg.batch_size, seed=cfg.seed + rank)
        return ArrayData(x, y, x[:0], y[:0], source + " (speed only)", cfg, 0, 1)
    if cfg.dataset == "imagenet":
        return RecordData(cfg, rank, workers, shape)
    load = getattr(data, "load_" + cfg.dataset)  # load_mnist, load_fashion_mnist, load_cifar10
    xtr, ytr, xte, yte, source = load(cfg.data_dir)
    if shape[0] == 3 and xtr.shape[1] == 1:  # colour models on grey images: repeat the channel
        xtr, xte = xtr.repeat(3, axis=1), xte.repeat(3, axis=1)
    return ArrayData(xtr, ytr, xte, yte, source, cfg, rank, workers, augment=cfg.dataset == "cifar10")


def open_metrics(path, resume, it, epoch):
    """The metrics log, to append to. A resumed run keeps only the rows before where it
    resumes (iteration `it`, epoch `epoch`): a restart after a failure mid-epoch would
    otherwise log the steps it takes again twice."""
    kept = []
    if resume and os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut by the failure
                before = row["iteration"] < it if "iteration" in row else row.get("epoch", epoch) < epoch
                if before:
                    kept.append(line if line.endswith("\n") else line + "\n")
    log = open(path, "w")
    log.writelines(kept)
    return log


def written_by(ckpt, run):
    """Whether checkpoint ckpt was written by this launcher run (a restart resumes only from
    its own: an older run's checkpoint in the same `out` is not this run's progress). A
    manifest that cannot be read counts as ours: loading it then says what is wrong."""
    from cdsgd_mx.wire import checkpoint
    try:
        return checkpoint.read_manifest(ckpt).get("extra", {}).get("run") == run
    except ValueError:
        return True


def earlier_provenance(out):
    """The provenance that config.json held before this resumed run rewrites it (None if none)."""
    try:
        return json.load(open(os.path.join(out, "config.json"))).get("provenance")
    except (OSError, ValueError):
        return None


def weights_digest(net):
    """SHA-256 of every parameter's float bytes, in name order."""
    import hashlib
    h = hashlib.sha256()
    for name, p in sorted(net.collect_params().items()):
        h.update(name.encode())
        h.update(p.data().asnumpy().tobytes())
    return h.hexdigest()


def worker(cfg, resume):
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon
    import cdsgd_mx
    from cdsgd_mx.experiments import models
    from cdsgd_mx.experiments.progress import Progress

    mx.random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    kvstore = "dist_sync" if "DMLC_ROLE" in os.environ else "local"
    run = os.environ.get("CDSGD_RUN_ID")  # the launcher's, the same across its restarts
    restarted = int(os.environ.get("CDSGD_RESTART", "0")) > 0  # by the launcher (--max-restarts)
    k = choose_k(cfg)
    trainer_args = dict(kvstore=kvstore, algorithm=cfg.algorithm, k=k, warmup_steps=cfg.warmup_steps,
                        threshold=cfg.threshold, nonfinite=cfg.nonfinite,
                        pull_compression=cfg.pull_compression, resync_every=cfg.resync_every, fp32_sum=cfg.fp32_sum,
                        local_optimizer_params=dict({"learning_rate": cfg.local_lr or cfg.lr},
                                                    **({} if cfg.local_clip is None else
                                                       {"clip_gradient": cfg.local_clip})))
    # the data shard needs the rank, which the Trainer's kvstore knows: model, trainer, then data
    shape = models.INPUT_SHAPES[cfg.model]
    net = models.build(cfg.model, num_classes(cfg))
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=mx.cpu())
    net(mx.nd.zeros((1,) + shape))
    net.hybridize()
    trainer = cdsgd_mx.Trainer(net.collect_params(), "sgd", {"learning_rate": cfg.lr, "momentum": cfg.momentum,
                                                            "wd": cfg.wd}, **trainer_args)
    rank, workers = trainer.kvstore.rank, trainer.kvstore.num_workers
    try:
        dataset = load_data(cfg, rank, workers)
    except FileNotFoundError as e:
        sys.stderr.write("data error: %s\n" % e)
        sys.exit(2)
    source = dataset.source
    per_epoch = dataset.per_epoch
    total = cfg.iterations or cfg.epochs * per_epoch
    epochs = math.ceil(total / per_epoch)
    os.makedirs(cfg.out, exist_ok=True)
    ckpt = os.path.join(cfg.out, "checkpoint.states")  # the manifest of the last complete set
    start_epoch = 0
    if os.path.exists(ckpt) and (resume or restarted and written_by(ckpt, run)):
        try:
            start_epoch = trainer.load_states(ckpt)["epoch"]  # the parameters' weights come with it
        except (ValueError, KeyError) as e:
            sys.stderr.write("resume error: %s\n" % (e if isinstance(e, ValueError) else
                                                      "checkpoint %s holds no epoch: not written by this script" % ckpt))
            sys.exit(2)
    if rank == 0:  # with how it was made: the user's command, this worker's numerics, CPU, versions
        command = json.loads(os.environ[COMMAND_ENV]) if os.environ.get(COMMAND_ENV) else None
        made = provenance.record(command)
        if start_epoch > 0:  # resumed: the epochs before were made as the earlier record says
            made["resumed_at_epoch"] = start_epoch
            made["before"] = earlier_provenance(cfg.out)
        with open(os.path.join(cfg.out, "config.json"), "w") as f:
            # the scheduler's address says where the job ran (network: hosts puts it on an emulated host)
            json.dump(dict(C.as_dict(cfg), k_used=k, data=source, scheduler=os.environ.get("DMLC_PS_ROOT_URI"),
                           provenance=made), f, indent=1)
    it = start_epoch * per_epoch
    log = open_metrics(os.path.join(cfg.out, "metrics-rank%d.jsonl" % rank), resume or restarted, it, start_epoch)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for epoch in range(start_epoch, epochs):
        factor = cfg.lr_factor ** sum(1 for e in cfg.lr_steps if e <= epoch)
        if trainer.learning_rate != cfg.lr * factor:
            trainer.set_learning_rate(cfg.lr * factor, local_lr=(cfg.local_lr or cfg.lr) * factor)
        bar = None
        if rank == 0:  # a bar on a terminal, else a line every 10 s (no \r redraws in a job's log)
            bar = Progress(min(per_epoch, total - it), "epoch %d/%d" % (epoch + 1, epochs))
        losses, correct, seen = [], 0, 0
        t0 = time.perf_counter()
        for xb, yb in dataset.train_batches(epoch):
            if it >= total:
                break
            x, y = mx.nd.array(xb), mx.nd.array(yb)
            with autograd.record():
                out = net(x)
                loss = loss_fn(out, y)
            loss.backward()
            trainer.step(cfg.batch_size * workers)  # Module's convention, as in the paper
            value = float(loss.mean().asscalar())
            correct += int((out.argmax(axis=1).asnumpy() == yb).sum())
            seen += len(yb)
            losses.append(value)
            now = time.perf_counter()  # from the end of the previous step: data loading included
            log.write(json.dumps({"iteration": it, "epoch": epoch, "loss": value,
                                  "iter_ms": 1e3 * (now - t0),
                                  "bytes_pushed": trainer.kvstore.push_bytes_of_step(it)}) + "\n")
            it += 1
            t0 = now
            if bar:
                bar.update(1, loss="%.4f" % np.mean(losses[-20:]))
        if bar:
            bar.close()
        trainer.wait_all()
        test_acc, hits, tested = None, 0, 0
        for xb, yb in dataset.test_batches():
            hits += int((net(mx.nd.array(xb)).argmax(axis=1).asnumpy() == yb).sum())
            tested += len(yb)
        if tested:
            test_acc = hits / tested
        record = {"epoch": epoch, "loss": float(np.mean(losses)) if losses else None,
                  "train_accuracy": correct / max(1, seen), "test_accuracy": test_acc,
                  "learning_rate": trainer.learning_rate, "data": source}
        record["weights_sha256"] = weights_digest(net)  # bit for bit: what verify and the golden run compare
        if trainer.kvstore.pull_error is not None:  # 2-bit pulls: ||W - V|| / ||W|| after the last one
            record["pull_error"] = trainer.kvstore.pull_error
        log.write(json.dumps(record) + "\n")
        log.flush()
        if rank == 0:
            print("epoch %d: loss %.4f train acc %.4f test acc %s%s" % (
                epoch + 1, record["loss"] or float("nan"), record["train_accuracy"],
                "%.4f" % test_acc if test_acc is not None else "-",
                " ||W-V||/||W|| %.2e" % record["pull_error"] if "pull_error" in record else ""), flush=True)
        if cfg.checkpoint:
            trainer.save_states(ckpt, extra={"epoch": epoch + 1, "run": run})  # raises (the job stops) if any node fails
    log.close()


def current_command(argv=None):
    """The command that ran this script (argv: main's, when called from Python)."""
    if argv is not None:
        return [sys.executable, os.path.abspath(__file__)] + list(argv)
    return provenance.current_argv()


def pin_numerics(mode, argv=None):
    """Put the config's numerics mode in force. Portable pins must be set before MXNet loads,
    and this script has loaded it (cdsgd_mx registers its store on import): run this script
    again with CDSGD_NUMERICS in its environment, where `import cdsgd_mx` pins first; the
    processes it launches inherit it."""
    if mode is None or mode == numerics.active():  # null: as CDSGD_NUMERICS says
        return
    if numerics.active() == "portable":
        raise numerics.NumericsError("numerics: the config says %s, and this job's environment has %s=portable: "
                                     "unset one" % (mode, numerics.ENV))
    numerics.check_cpu()
    if argv is not None:  # called from Python: this process cannot be started again
        raise numerics.NumericsError("numerics: %s must be in force before MXNet loads: set %s=%s in the "
                                     "environment first" % (mode, numerics.ENV, mode))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, current_command(), dict(os.environ, **{numerics.ENV: mode}))


def in_this_process(cfg):
    """One worker with no link to shape trains here, without the launcher, servers or network."""
    return cfg.workers == 1 and not cfg.bandwidth and not cfg.latency


def settle_network(cfg, overrides):
    """The network the run will have, in cfg and, where it differs from the config, in the
    workers' overrides (config.json records what the run had). network: hosts needs emulated
    hosts; without them, the shared loopback, shaped if a namespace can be made here, else
    unshaped; each fallback said in one line. One worker with nothing to shape runs in this
    process: no network at all."""
    if in_this_process(cfg):
        cfg.network = "shared"
        return
    if cfg.network != "hosts":
        return
    from cdsgd_mx.cluster import emulate, shaping
    why = emulate.unavailable()
    if not why:
        return
    cfg.network = "shared"
    overrides.append("network=shared")
    why_not_shaped = shaping.netns_unavailable() if (cfg.bandwidth or cfg.latency) else None
    if why_not_shaped:
        print("train: emulated hosts are not available here (%s), nor a shaped link (%s): every node on one "
              "unshaped loopback instead (network=shared bandwidth=null latency=null)" % (why, why_not_shaped),
              flush=True)
        cfg.bandwidth = cfg.latency = None
        overrides += ["bandwidth=null", "latency=null"]
    else:
        print("train: emulated hosts are not available here (%s): every node on one shared loopback instead "
              "(network=shared)" % why, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="scripts/train.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoint in `out`")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="field=value, e.g. k=10 workers=4")
    args = ap.parse_args(argv)
    try:
        cfg = C.load(args.config, args.overrides)
        if cfg.k == "auto":
            choose_k(cfg)  # a bad costs file is a config error too
    except C.ConfigError as e:
        sys.stderr.write("config error: %s\n" % e)
        return 2
    try:
        pin_numerics(cfg.numerics, argv)
    except numerics.NumericsError as e:
        sys.stderr.write("config error: %s\n" % e)
        return 2
    if not args.worker:  # the launching process fetches what is missing: workers read from disk only
        from cdsgd_mx.experiments import data
        try:
            data.ensure(cfg.dataset, cfg.data_dir)
        except data.DataMissing as e:
            sys.stderr.write("data error: %s\n" % e)
            return 2
    if not args.worker:
        os.environ[COMMAND_ENV] = json.dumps(current_command(argv))
    overrides = list(args.overrides)
    if not args.worker:
        settle_network(cfg, overrides)
    if args.worker or in_this_process(cfg):
        worker(cfg, args.resume)
        return 0
    cmd = [sys.executable, "-m", "cdsgd_mx.launch", "-n", str(cfg.workers), "-s", str(cfg.servers),
           "--stall-timeout", str(cfg.stall_timeout), "--start-timeout", str(cfg.start_timeout),
           "--max-restarts", str(cfg.max_restarts)]
    if cfg.network == "hosts":  # a host per node, a NIC of `bandwidth` each way per host
        cmd += ["--emulate-hosts", str(cfg.workers + cfg.servers)] + (["--nic", cfg.bandwidth] if cfg.bandwidth else [])
    elif cfg.bandwidth:
        cmd += ["--bandwidth", cfg.bandwidth]
    if cfg.latency:
        cmd += ["--latency", str(cfg.latency)]
    # the user's command, for rank 0's provenance: over ssh (emulated hosts) only what the launcher sends arrives
    cmd += ["--env", "%s=%s" % (COMMAND_ENV, os.environ[COMMAND_ENV])]
    cmd += ["--", sys.executable, os.path.abspath(__file__), "--config", os.path.abspath(args.config),
            "--worker"] + (["--resume"] if args.resume else []) + overrides
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())

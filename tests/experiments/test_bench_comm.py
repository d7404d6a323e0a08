"""The peer benchmark (python -m cdsgd_mx.bench.comm): it runs stock MXNet and ours side by side
and reports what each pushed; bad arguments get one line, no traceback."""
import argparse
import json
import os
import subprocess
import sys
import time

import pytest

from cdsgd_mx.wire import auth, protocol
from cdsgd_mx import codec
from cdsgd_mx.bench.comm_systems import build_model
from cdsgd_mx.worker.buckets import plan

pytestmark = pytest.mark.slow


def test_one_round_of_stock_and_ours_side_by_side(tmp_path):
    out = tmp_path / "comm.json"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.comm", "--models", "lenet5", "--bandwidth", "none", "--network", "shared",
                           "--rounds", "3", "--systems", "stock_fp32,stock_2bit,ssgd,bitsgd", "--bucket-size", "20000",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "bitsgd/stock_2bit" in proc.stdout and "[4/4] lenet5 none bitsgd" in proc.stdout
    # the proofs' share of a round, from the servers' timing inside the jobs and the workers' calls
    assert "none ssgd" in proc.stdout.split("proof of every push")[1] and "next proofs, off the path" in proc.stdout
    data = json.loads(out.read_text())
    made = data["provenance"]  # where and how (cdsgd_mx.experiments.provenance), once, by the leader
    assert made["command"][:3] == ["python", "-m", "cdsgd_mx.bench.comm"] and "--json" in made["command"]
    assert "commit" in made and made["numerics"]["mode"] in ("native", "portable")
    run, = data["runs"]
    values = data["models"]["lenet5"]["trained_values"]
    for system in ("stock_fp32", "stock_2bit", "ssgd", "bitsgd"):
        assert run["systems"][system]["ms"] > 0, run["systems"][system]
    sizes = [int(p.data().size) for p in build_model("lenet5").collect_params().values() if p.grad_req != "null"]
    buckets = len(plan(list(enumerate(sizes)), 20000, 2, 1, protocol.Keys(1)))
    proof = 4 * auth.TAG_FLOATS  # bytes of one worker's tag (auth.py)
    # fp32: 4 B/value, plus per bucket the proof region (a slot per worker, 2 workers)
    assert run["systems"]["ssgd"]["bytes_per_round"] == 4 * values + 2 * proof * buckets
    # 2-bit: 0.25 B/value, plus per bucket its last word's padding, 8 bytes of row index and its tag
    bits = run["systems"]["bitsgd"]["bytes_per_round"]
    low = 4 * codec.packed_size(values) + (8 + proof) * buckets
    assert low <= bits <= low + 4 * buckets


def test_both_network_models_side_by_side(tmp_path):
    """--network shared,hosts: the same round on the shared loopback and with a NIC per emulated
    host; the wire bounds follow each model (per host: the server's NIC, each direction apart)."""
    from cdsgd_mx.cluster import emulate
    if emulate.unavailable():
        pytest.skip(emulate.unavailable())
    out = tmp_path / "comm.json"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.comm", "--models", "lenet5", "--bandwidth", "100mbit",
                           "--network", "shared,hosts", "--rounds", "3", "--systems", "ssgd", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "[2/2] lenet5 100mbit/hosts ssgd" in proc.stdout
    runs = {r["network"]: r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == {"shared", "hosts"} and all(r["link"] == "100mbit" for r in runs.values())
    assert all(r["systems"]["ssgd"]["ms"] > 0 for r in runs.values())
    # the servers' proof checks are timed inside the job on either network (their setting reaches ssh nodes too)
    assert all(r["systems"]["ssgd"]["server_proof_us"] > 0 for r in runs.values())
    shared, hosts = runs["shared"], runs["hosts"]
    assert hosts["fp32_bound_ms"] == pytest.approx(shared["fp32_bound_ms"] / 2)  # 2 workers, 1 server: 8 B vs max(4, 4)
    assert hosts["2bit_bound_ms"] == pytest.approx(hosts["fp32_bound_ms"])  # the fp32 pull bounds it
    assert hosts["both_bound_ms"] == pytest.approx(hosts["fp32_bound_ms"] / 16)


def paired_job(tmp_path, system):
    """bench.comm's paired `system` on LeNet-5, 4 rounds of each half: (the process, its JSON figures)."""
    out = tmp_path / (system + ".json")
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.comm", "--models", "lenet5", "--bandwidth", "none", "--network", "shared",
                           "--rounds", "4", "--systems", system, "--bucket-size", "20000", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc, json.loads(out.read_text())["runs"][0]["systems"][system]


def test_paired_mode_alternates_fp32_and_2bit_rounds_in_one_job(tmp_path):
    """--systems paired: S-SGD's and BIT-SGD's rounds taking turns in one job (the ratio without
    the job-to-job spread); half the rounds push fp32 and half push codes."""
    proc, p = paired_job(tmp_path, "paired")
    assert p["ssgd_ms"] > 0 and p["bitsgd_ms"] > 0 and p["ratio"] == pytest.approx(p["bitsgd_ms"] / p["ssgd_ms"])
    assert "lenet5 none paired in one job (4 rounds of each): ssgd %.1f ms, bitsgd %.1f ms, bitsgd/ssgd %.2f" % (
        p["ssgd_ms"], p["bitsgd_ms"], p["ratio"]) in proc.stdout
    ratios = [w["ratio"] for w in p["workers"]]  # printed: the larger, and the mean over the workers
    assert len(ratios) == 2 and p["ratio"] == max(ratios) and p["mean_ratio"] == pytest.approx(sum(ratios) / 2)
    assert "(worker rank %d; mean over the workers %.2f)" % (p["rank"], p["mean_ratio"]) in proc.stdout
    values = sum(int(q.data().size) for q in build_model("lenet5").collect_params().values() if q.grad_req != "null")
    sizes = [int(q.data().size) for q in build_model("lenet5").collect_params().values() if q.grad_req != "null"]
    buckets = len(plan(list(enumerate(sizes)), 20000, 2, 1, protocol.Keys(1)))
    proof = 4 * auth.TAG_FLOATS
    fp32 = 4 * values + 2 * proof * buckets
    low = 4 * codec.packed_size(values) + (8 + proof) * buckets
    assert (fp32 + low) / 2 <= p["bytes_per_round"] <= (fp32 + low + 4 * buckets) / 2


def test_paired_sum_times_arrival_and_rank_order_fp32_rounds_in_one_job(tmp_path):
    """--systems paired_sum (issue 41): S-SGD's round with the fp32 sum in arrival order (to the
    weight keys) and in rank order (rows keys) taking turns in one job; a row carries its index."""
    proc, p = paired_job(tmp_path, "paired_sum")
    assert p["arrival_ms"] > 0 and p["rank_ms"] > 0 and p["ratio"] == pytest.approx(p["rank_ms"] / p["arrival_ms"])
    assert "lenet5 none paired_sum in one job (4 rounds of each): arrival %.1f ms, rank %.1f ms, rank/arrival %.2f" % (
        p["arrival_ms"], p["rank_ms"], p["ratio"]) in proc.stdout
    sizes = [int(q.data().size) for q in build_model("lenet5").collect_params().values() if q.grad_req != "null"]
    buckets = len(plan(list(enumerate(sizes)), 20000, 2, 1, protocol.Keys(1), fp32_rows=True))
    fp32 = 4 * sum(sizes) + 2 * 4 * auth.TAG_FLOATS * buckets  # the data and a 2-worker proof region per bucket
    assert p["bytes_per_round"] == fp32 + 8 * buckets / 2  # half the rounds send rows: + their index


def test_both_ways_systems_pull_a_quarter_byte_per_value(tmp_path):
    """bitsgd_2bit and paired_pull (issue 29): their rounds run, push what bitsgd pushes plus one
    pull flag per bucket, and the table prints the both-ways wire bound beside the others. With
    fresh gradients each round (issue 47), and the server's stages of a compressed round printed."""
    out, traces = tmp_path / "both.json", tmp_path / "traces"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.comm", "--models", "lenet5", "--bandwidth", "none", "--network", "shared",
                           "--rounds", "4", "--systems", "stock_2bit,bitsgd,bitsgd_2bit,cdsgd_2bit,paired_pull",
                           "--bucket-size", "20000", "--json", str(out), "--trace", str(traces), "--grads", "fresh"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    run = data["runs"][0]
    assert data["grads"] == "fresh" and "; fresh gradients)" in proc.stdout
    # the server's stages: a both-ways round aims and encodes the pull (momentum 0.9), one way does not
    both, one = run["systems"]["bitsgd_2bit"]["server_stages"], run["systems"]["bitsgd"]["server_stages"]
    assert all(both[k]["ms"] > 0 for k in ("decode + update", "aim", "encode pull", "proof")), both
    assert "aim" not in one and one["decode + update"]["ms"] > 0, one
    assert "lenet5 none bitsgd_2bit: decode + update" in proc.stdout.split("stage by stage")[1]
    assert "both bound" in proc.stdout and "bitsgd_2bit/bitsgd" in proc.stdout
    sizes = [int(q.data().size) for q in build_model("lenet5").collect_params().values() if q.grad_req != "null"]
    buckets = len(plan(list(enumerate(sizes)), 20000, 2, 1, protocol.Keys(1)))
    one_way = run["systems"]["bitsgd"]["bytes_per_round"]
    assert run["systems"]["bitsgd_2bit"]["bytes_per_round"] == one_way + 4 * buckets  # the pull flag
    assert run["systems"]["cdsgd_2bit"]["ms"] > 0
    p = run["systems"]["paired_pull"]
    assert p["ratio"] == pytest.approx(p["bitsgd_2bit_ms"] / p["bitsgd_ms"])
    assert "paired_pull in one job (4 rounds of each): bitsgd %.1f ms, bitsgd_2bit %.1f ms" % (
        p["bitsgd_ms"], p["bitsgd_2bit_ms"]) in proc.stdout
    # --trace: every worker of the project's jobs left its trace; the spans of the timed rounds
    # are printed (a both-ways round decodes its pull; a one-way round has nothing to decode)
    for system in ("bitsgd", "bitsgd_2bit", "cdsgd_2bit", "paired_pull"):
        for rank in (0, 1):
            assert (traces / ("lenet5-none-%s-rank%d.json" % (system, rank))).exists()
    assert not list(traces.glob("*stock_2bit*"))
    spans = run["systems"]["bitsgd_2bit"]["spans"]
    assert len(spans) == 2 and all(s["decode pull"] > 0 and s["quantize"] > 0 for s in spans)
    assert "decode pull" not in run["systems"]["bitsgd"]["spans"][0]
    assert "where the rounds went" in proc.stdout and "lenet5 none bitsgd_2bit rank 1: " in proc.stdout
    # the workers' traces share one clock: how far apart their rounds end, per traced job
    spread = run["systems"]["bitsgd"]["pull_spread"]
    assert spread["steps"] >= 1 and 0 <= spread["median_ms"] <= spread["max_ms"] and sum(spread["last"]) == spread["steps"]
    assert "how far apart the workers' rounds end" in proc.stdout and "lenet5 none bitsgd: " in proc.stdout


def test_span_medians_take_each_timed_step_total_and_count_a_missing_span_as_zero(tmp_path):
    from cdsgd_mx.bench.comm_jobs import span_medians
    ev = lambda name, step, ms: {"name": name, "ph": "X", "ts": 0, "dur": 1e3 * ms, "pid": 0, "tid": 0,
                                 "args": {"step": step}}
    events = [ev("step", t, 10.0 + t) for t in range(6)]
    events += [ev("decode pull", t, 1.0) for t in (0, 4, 5)] + [ev("decode pull", 5, 2.0)]  # two buckets at step 5
    events += [ev("resend", 1, 50.0), {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "x"}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got = span_medians(str(path), first_step=2)  # steps 2..5
    assert got["step"] == pytest.approx(13.5)
    assert got["decode pull"] == pytest.approx(0.5)  # 0, 0, 1, 3 ms
    assert "resend" not in got  # only before the timed steps


def test_pull_spread_lays_the_workers_traces_on_one_clock(tmp_path):
    """Each worker's spans count from its own origin; the spread of a step is the last worker's
    last pull landing minus the first worker's, on the machine's clock."""
    from cdsgd_mx.bench.comm_jobs import pull_spread
    from cdsgd_mx.worker.trace import Tracer

    def trace(name, origin_s, pulls):  # pulls: [(step, start ms, end ms)], two buckets a step
        events = [{"name": "pull", "ph": "X", "ts": 1e3 * a, "dur": 1e3 * (b - a), "pid": 0, "tid": 0,
                   "args": {"step": t}} for t, a, b in pulls]
        events.append({"name": "step", "ph": "X", "ts": 0, "dur": 9e9, "pid": 0, "tid": 0, "args": {"step": 9}})
        path = tmp_path / name
        path.write_text(json.dumps({"traceEvents": events, "otherData": {"perf_counter_origin_s": origin_s}}))
        return str(path)

    # worker 0 started 1 s before worker 1: its times are 1000 ms larger for the same instant
    w0 = trace("a.json", 100.0, [(0, 1000, 1010), (1, 1100, 1130), (1, 1100, 1150), (2, 1200, 1260)])
    w1 = trace("b.json", 101.0, [(0, 0, 40), (1, 100, 120), (2, 200, 230), (2, 200, 240)])
    got = pull_spread([w0, w1], first_step=1)  # steps 1 and 2: |150 - 120| = 30, |260 - 240| = 20
    assert got["steps"] == 2 and got["median_ms"] == pytest.approx(25) and got["max_ms"] == pytest.approx(30)
    assert got["last"] == [2, 0]  # worker 0's pulls landed last in both steps
    # a Tracer writes its origin on the machine's monotonic clock
    tracer = Tracer(str(tmp_path / "c.json"))
    with tracer.span("pull", step=0):
        pass
    saved = json.loads(open(tracer.save()).read())
    origin = saved["otherData"]["perf_counter_origin_s"]
    assert origin <= time.perf_counter() and origin > time.perf_counter() - 60


@pytest.mark.parametrize("args,message", [
    (["--models", "lenet9"], "--models: unknown 'lenet9' (allowed: "),
    (["--systems", "ssgd,fastest"], "--systems: unknown 'fastest'"),
    (["--bandwidth", "1gbt"], "--bandwidth: bad link '1gbt'"),
    (["--rounds", "0"], "--rounds must be >= 1, got 0"),
    (["--busy-cores", "64000"], "--busy-cores must be between 0 and "),
    (["--busy-cores", "-1"], "--busy-cores must be between 0 and "),
])
def test_bad_arguments_get_one_line(args, message):
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.comm"] + args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_busy_cores_spin_on_the_last_cores_until_the_run_ends():
    """--busy-cores (bench/busy.py): each spinner is pinned to one of the machine's last cores, at
    nice -20 where the user may set it, spins (CPU time grows), and is gone after the run."""
    import os
    from cdsgd_mx.bench.busy import BusyCores, cores
    if len(cores()) < 2:
        pytest.skip("one core: none can be taken away")
    with BusyCores(1) as busy:
        (core, proc), = busy.procs
        assert core == cores()[-1] and os.sched_getaffinity(proc.pid) == {core}
        assert busy.nice == [-20 if os.geteuid() == 0 else 0]
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == busy.nice[0]
        ticks = lambda: sum(int(v) for v in open("/proc/%d/stat" % proc.pid).read().rsplit(")", 1)[1].split()[11:13])
        first = ticks()
        time.sleep(0.5)
        assert ticks() > first  # spinning
        assert busy.describe().startswith("busy cores: a process spins on core %d" % core)
        assert "the jobs have %d of %d core(s)" % (len(cores()) - 1, len(cores())) in busy.describe()
    assert proc.poll() is not None


def test_check_compares_each_ratio_of_median_jobs_with_its_goal(monkeypatch, capsys):
    """--check's verdicts (bench.comm_check.run_check), with the jobs' times given: the median over the
    repeats of each system, a goal missed by a hair counts, and a failed job is a miss. On per-host
    NICs stock MXNet's jobs run at 1 Gbit/s too, and the targets (ours against stock, each round
    against its bound) are printed apart: a missed target does not fail the check."""
    from cdsgd_mx.bench import comm_check, comm_report
    times = {"ssgd": [100.0, 90.0, 300.0], "bitsgd": [50.0, 60.0, 55.0], "bitsgd_2bit": [8.0, 9.0, 8.5],
             "stock_fp32": [120.0, 110.0, 100.0], "stock_2bit": [70.0, 50.0, 60.0]}
    calls = []

    def job(args, model, link, system):
        calls.append((model, link, system))
        t = times[system][sum(1 for c in calls if c == (model, link, system)) - 1]
        if model == "resnet20" and link.startswith("10gbit"):
            t = {"ssgd": 10.0, "bitsgd": 10.05, "bitsgd_2bit": 5.0}[system]  # 2-bit 0.5% slower than fp32
        return {"ms": t}
    monkeypatch.setattr(comm_check, "run_job", job)
    for network in ("shared", "hosts"):
        calls.clear()
        labels = [l + ("/hosts" if network == "hosts" else "") for l in comm_check.CHECK["bandwidth"]]
        args = argparse.Namespace(models=comm_check.CHECK["models"], bandwidth=labels, rounds=20,
                                  workers=2, servers=1, grads="fresh", systems=comm_check.CHECK["systems"],
                                  busy_cores=1 if network == "hosts" else 0)
        infos = {"inception_bn": {"trained_values": 1651114}, "resnet20": {"trained_values": 272474}}
        assert comm_check.run_check(args, infos) == 2
        out = capsys.readouterr().out
        # ours on both links, stock MXNet's on 1 Gbit/s only, every repeat
        assert len(calls) == (2 * 2 * 3 + 2 * 1 * 2) * comm_check.CHECK["repeats"]
        assert calls[:5] == [("inception_bn", labels[0], s) for s in ("ssgd", "bitsgd", "bitsgd_2bit", "stock_fp32",
                                                                        "stock_2bit")]
        # medians: 2-bit 55, fp32 100, both ways 8.5: 8.5 / 55 = 0.15 (0.1545 > 0.15: missed)
        assert "BIT-SGD both ways / one way  inception_bn 1gbit    0.15 (0.16, 0.15, 0.15)  goal <= 0.15: NOT MET" in out
        assert "our 2-bit / our fp32 round   inception_bn 1gbit    0.55 (0.50, 0.67, 0.18)  goal <= 1.00: met" in out
        assert "our 2-bit / our fp32 round   resnet20     10gbit   1.01 (1.01, 1.01, 1.01)  goal <= 1.00: NOT MET" in out
        # the header says when cores were taken away (--busy-cores)
        assert ("momentum 0.9, 1 core(s) taken by spinning processes)" in out) == (network == "hosts")
        if network == "shared":  # the targets are a cluster's: not judged on the shared loopback
            assert out.strip().endswith("--check: 2 goal(s) not met") and "targets" not in out
            continue
        # ours / stock: fp32 100 / 110 = 0.91 (missed), 2-bit 55 / 60 = 0.92 (missed)
        assert "our fp32 / stock fp32        inception_bn 1gbit    0.91 (0.83, 0.82, 3.00)  goal <= 0.90: NOT MET" in out
        assert "our 2-bit / MXNet 2-bit      resnet20     1gbit    0.92 (0.71, 1.20, 0.92)  goal <= 0.90: NOT MET" in out
        fp32_bound = comm_report.bounds(infos["inception_bn"], labels[0], 2, 1)[0]
        assert "our fp32 / bound             inception_bn 1gbit    %.2f" % (100.0 / fp32_bound) in out
        assert "stock fp32 / bound" in out and "MXNet 2-bit / bound" in out and "our 2-bit / bound" in out
        assert out.strip().endswith("--check: 2 goal(s) not met; 4 of 8 targets not met")
    monkeypatch.setattr(comm_check, "run_job", lambda *a: {"error": "boom"})
    assert comm_check.run_check(args, infos) == 8  # every gate
    assert "a job failed" in capsys.readouterr().out


def test_the_network_is_a_clusters_where_hosts_can_be_emulated(monkeypatch, capsys):
    """--network's default: hosts where cdsgd_mx.cluster.emulate can run, else the shared loopback,
    said in one line; a --network given is kept."""
    from cdsgd_mx.bench import comm
    from cdsgd_mx.experiments import provenance
    seen = []
    monkeypatch.setattr(comm, "leader", lambda args: seen.append(args.bandwidth) or 0)
    for why, expected in ((None, ["1gbit/hosts"]), ("needs root", ["1gbit"])):
        monkeypatch.setattr(comm.emulate, "unavailable", lambda why=why: why)
        assert comm.main(["--models", "lenet5", "--bandwidth", "1gbit"]) == 0
        assert seen.pop() == expected
    out = capsys.readouterr().out
    assert "note: no emulated hosts here (needs root): the shared loopback instead" in out
    line = provenance.machine_line()  # every run names its machine before its first figure
    assert out.splitlines()[0] == line and out.splitlines()[2] == line and out.count("machine: ") == 2
    assert comm.main(["--models", "lenet5", "--bandwidth", "1gbit", "--network", "shared"]) == 0
    assert seen.pop() == ["1gbit"]


def test_repeats_run_each_systems_jobs_in_turn_and_show_the_median_job(monkeypatch, capsys, tmp_path):
    """--repeats N: every system's job N times, the repeats in turn; the table shows the median
    job, the notes each job's time, the JSON every job's; a failed job fails its system."""
    from cdsgd_mx.bench import comm
    times = {"ssgd": [30.0, 10.0, 20.0], "bitsgd": [5.0, 7.0, 6.0]}
    calls = []

    def job(args, model, link, system):
        calls.append(system)
        return {"ms": times[system][calls.count(system) - 1], "workers": [], "bytes_per_round": None}
    monkeypatch.setattr(comm, "run_job", job)
    monkeypatch.setattr(comm, "model_info", lambda m: {"arrays": 1, "values": 10, "trained_arrays": 1,
                                                       "trained_values": 10})
    out = tmp_path / "r.json"
    assert comm.main(["--models", "lenet5", "--bandwidth", "none", "--network", "shared", "--systems", "ssgd,bitsgd",
                      "--repeats", "3", "--json", str(out)]) == 0
    assert calls == ["ssgd", "bitsgd"] * 3
    text = capsys.readouterr().out
    assert "[6/6] lenet5 none bitsgd" in text
    assert "lenet5 none each job (the table: the median job): ssgd 30.0/10.0/20.0, bitsgd 5.0/7.0/6.0" in text
    systems = json.loads(out.read_text())["runs"][0]["systems"]
    assert (systems["ssgd"]["ms"], systems["bitsgd"]["ms"]) == (20.0, 6.0)
    assert systems["ssgd"]["jobs_ms"] == [30.0, 10.0, 20.0]
    assert comm.median_job([{"ms": 4.0}, {"error": "boom"}]) == {"error": "boom"}
    assert comm.median_job([{"ms": 4.0}, {"ms": 2.0}])["ms"] == 2.0  # the lower middle of an even count


def test_the_unwindowed_system_runs_ssgd_with_no_push_window_beside_ssgd(monkeypatch, capsys):
    """ssgd_unwindowed: S-SGD's job with CDSGD_PUSH_WINDOW=0 (every other job keeps the
    default window), printed under the table beside ssgd's round; the proofs' share of each
    system is taken on that system's own bucket plan (S-SGD's 2^16 values, BIT-SGD's 2^20)."""
    from cdsgd_mx.bench import comm, comm_jobs, comm_proofs
    envs = {}

    class Done:
        returncode, stdout, stderr = 1, "", "no job here"

    def run(cmd, env=None, **kw):
        envs[cmd[cmd.index("--system") + 1]] = env
        return Done()
    monkeypatch.setattr(comm_jobs.subprocess, "run", run)
    args = argparse.Namespace(workers=2, servers=1, timeout=60, rounds=3, grads="fixed", bucket_size=None, trace=None)
    for system in ("ssgd", "ssgd_unwindowed"):
        comm_jobs.run_job(args, "lenet5", "1gbit/hosts", system)
    assert envs["ssgd_unwindowed"]["CDSGD_PUSH_WINDOW"] == "0"
    assert envs["ssgd"].get("CDSGD_PUSH_WINDOW") == os.environ.get("CDSGD_PUSH_WINDOW")

    times = {"ssgd": 30.0, "ssgd_unwindowed": 40.0, "bitsgd": 20.0}
    monkeypatch.setattr(comm, "run_job", lambda args, model, link, system: {"ms": times[system], "workers": [],
                                                                            "bytes_per_round": None})
    monkeypatch.setattr(comm, "model_info", lambda m: {"arrays": 1, "values": 10, "trained_arrays": 1,
                                                       "trained_values": 10})
    sizes = []
    monkeypatch.setattr(comm_proofs, "proof_cost",
                        lambda model, w, s, size, repeats, parts: sizes.append((size, parts)) or (1, 1, 3))
    monkeypatch.setattr(comm_proofs, "server_proof_cost", lambda model, w, size, parts: 1.0)
    assert comm.main(["--models", "lenet5", "--bandwidth", "none", "--network", "shared", "--systems",
                      "ssgd,ssgd_unwindowed,bitsgd"]) == 0
    text = capsys.readouterr().out
    assert "lenet5 none ssgd_unwindowed (no window of fp32 pushes in flight): 40.0 ms, ssgd / ssgd_unwindowed 0.75" \
        in text
    assert sizes == [(1 << 20, False)]  # one default bucket size for every algorithm; no job went in parts
    assert "lenet5, buckets of 1048576 values (3 on the busiest server)" in text


def test_proof_costs_count_the_parts_of_the_rounds_that_went_in_parts(monkeypatch, capsys):
    """A job whose fp32 rounds went in parts sends a proof with every part: its share is taken
    on the parts (all of S-SGD's rounds, CD-SGD's every K-th), a job's without parts on its
    buckets."""
    from cdsgd_mx.bench import comm_proofs
    from cdsgd_mx.bench.comm_systems import K
    costs = {False: (10.0, 1.0, 2), True: (100.0, 1.0, 20)}  # (worker path us, next us, messages on the busiest server)
    monkeypatch.setattr(comm_proofs, "proof_cost", lambda model, w, s, size, repeats, parts: costs[parts])
    monkeypatch.setattr(comm_proofs, "server_proof_cost", lambda model, w, size, parts: 3.0 if parts else 4.0)
    job = lambda way: dict({"ms": 10.0, "server_proof_us": 5.0, "server_proof_cpu_us": 5.0}, **way)
    results = {("lenet5", "1gbit"): {"ssgd": job({"way": "parts"}), "cdsgd": job({"way": "parts"}),
                                     "bitsgd": job({})}}
    args = argparse.Namespace(models=["lenet5"], bandwidth=["1gbit"], workers=2, servers=1, bucket_size=None)
    comm_proofs.print_proof_costs(args, results)
    text = capsys.readouterr().out
    assert "(2 on the busiest server; 20 parts and buckets in an fp32 round in parts)" in text
    assert "1gbit ssgd (in parts) 200 us = 2.00%" in text  # 100 + 5 us x 20 parts
    x = 1 / K  # CD-SGD: a correction in K rounds; the others' 2-bit codes whole
    path, messages = (1 - x) * 10 + x * 100, (1 - x) * 2 + x * 20
    assert "1gbit cdsgd (1 round in %d in parts) %.0f us" % (K, path + 5 * messages) in text
    assert "1gbit bitsgd 20 us = 0.20%" in text  # 10 + 5 us x 2 buckets
    # on an idle core: the server's own cost per message of each way
    assert "in parts, a worker 100 us + the server 3 us per message = 160 us: 1gbit ssgd 1.60%" in text
    assert comm_proofs.in_parts("ssgd", {"way": "whole buckets"}) == 0.0


def test_proof_cost_counts_a_message_per_part():
    """proof_cost's plan in parts: each part of a bucket is a message with its own proof."""
    from cdsgd_mx.bench import comm_proofs
    from cdsgd_mx.worker.buckets import PART_SIZE
    values = sum(int(p.data().size) for p in build_model("resnet20").collect_params().values() if p.grad_req != "null")
    whole = comm_proofs.proof_cost("resnet20", 2, 1, repeats=2)
    parts = comm_proofs.proof_cost("resnet20", 2, 1, repeats=2, parts=True)
    assert whole[2] == 1 and parts[2] >= -(-values // PART_SIZE) > 1
    assert comm_proofs.server_proof_cost("resnet20", 2, repeats=2, parts=True) > 0


class FakeStore:
    """What warm_up reads of our store: the part choice made after `decided_after` rounds."""

    def __init__(self, decided_after):
        self.rounds_done, self.decided_after = 0, decided_after

    @property
    def part_choice_pending(self):
        return self.rounds_done < self.decided_after

    def wait_all(self):
        pass


@pytest.mark.parametrize("system, decided_after, expected", [
    ("cdsgd", 36, 36),           # its trials: 7 corrections, a correction every K-th round
    ("ssgd", 3, 8),              # decided within WARMUP_ROUNDS
    ("paired", 15, 16),          # an even count: the timed rounds start with the even kind
    ("bitsgd", 1000, 8),         # no fp32 round timed: nothing to wait for
    ("stock_fp32", 1000, 8)])
def test_warm_up_runs_on_until_the_part_choice_is_made(system, decided_after, expected):
    from cdsgd_mx.bench import comm_worker
    store = FakeStore(decided_after)
    trainer = argparse.Namespace(_kvstore=store)
    rounds = []
    one_round = lambda: setattr(store, "rounds_done", store.rounds_done + 1)
    assert comm_worker.warm_up(trainer, system, rounds.append, one_round) == expected
    assert rounds == list(range(expected)) and store.rounds_done == expected


def test_warm_up_stops_loudly_where_the_part_choice_is_never_made():
    from cdsgd_mx.bench import comm_worker
    store = FakeStore(10 ** 6)
    one_round = lambda: setattr(store, "rounds_done", store.rounds_done + 1)
    with pytest.raises(RuntimeError, match="part choice was not made in %d untimed rounds" % comm_worker.MAX_WARMUP_ROUNDS):
        comm_worker.warm_up(argparse.Namespace(_kvstore=store), "ssgd", lambda r: None, one_round)


def test_cd_sgd_jobs_time_their_rounds_after_the_part_choice(tmp_path, monkeypatch):
    """CD-SGD's trials of parts and whole buckets are its first 7 corrections, one every K
    rounds: its job warms up until they are over, so no timed round is a trial, and says which
    way its corrections went (LeNet-5 in parts of 4096 values)."""
    from cdsgd_mx.bench.comm_systems import K, WARMUP_ROUNDS
    from cdsgd_mx.worker.part_choice import TIMED, TRIALS
    monkeypatch.setenv("CDSGD_PART_SIZE", "4096")
    out = tmp_path / "comm.json"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.comm", "--models", "lenet5", "--bandwidth", "none",
                           "--network", "shared", "--rounds", "3", "--systems", "ssgd,cdsgd", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    systems = json.loads(out.read_text())["runs"][0]["systems"]
    # the choice is made at the 8th fp32 step, or after a second look at the 14th (part_choice.CLOSE)
    decided_at = (len(TRIALS) + 1, len(TRIALS) + TIMED + 1)
    for system, warmups in (("ssgd", [max(WARMUP_ROUNDS, n) for n in decided_at]),
                            ("cdsgd", [K * (n - 1) + 1 for n in decided_at])):
        assert systems[system]["way"] in ("parts", "whole buckets"), systems[system]
        (warmup,) = set(w["warmup_rounds"] for w in systems[system]["workers"])
        assert warmup in warmups, (system, warmup)
        # what the trials measured, each way's median step (ms), and the way is the faster one
        parts_ms, whole_ms = systems[system]["trials"]["ms"]
        assert parts_ms > 0 and whole_ms > 0 and (whole_ms < parts_ms) == (systems[system]["way"] == "whole buckets")
        assert "lenet5 none %s ... " % system in proc.stdout and \
            "(fp32 rounds in %s; trials: parts %.1f, whole %.1f ms" % (systems[system]["way"], parts_ms, whole_ms) \
            in proc.stdout


def test_a_jobs_progress_line_says_its_way_and_what_its_trials_measured():
    from cdsgd_mx.bench.comm_jobs import outcome
    assert outcome({"ms": 12.0}) == "12.0 ms"
    assert outcome({"error": "boom"}) == "failed: boom"
    assert outcome({"ms": 12.0, "way": "parts", "trials": {"ms": [10.0, 12.5], "first_look_ms": None}}) == \
        "12.0 ms (fp32 rounds in parts; trials: parts 10.0, whole 12.5 ms)"
    assert outcome({"ms": 12.0, "way": "parts", "trials": {"ms": [10.0, 12.5], "first_look_ms": [11.0, 11.5]}}) == \
        "12.0 ms (fp32 rounds in parts; trials: parts 10.0, whole 12.5 ms, after a first look at 11.0 and 11.5)"
    assert outcome({"ms": 12.0, "way": "whole buckets", "trials": None}) == "12.0 ms (fp32 rounds in whole buckets)"

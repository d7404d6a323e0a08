"""The overlap is real: a CD-SGD worker starts step t+1 while step t's communication is still
in flight; a BIT-SGD worker does not start it before step t's pushes are acknowledged."""
import json
import os
import statistics
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def spans(trace, name):
    ev = json.load(open(trace))["traceEvents"]
    return [e for e in ev if e.get("ph") == "X" and e["name"] == name]


def run_bench(tmp_path, algorithms):
    cmd = [sys.executable, "-m", "cdsgd_mx.bench.overlap", "--params", "2e5", "--iterations", "14",
           "--warmup", "2", "--k", "3", "--algorithms", algorithms, "--trace-dir", str(tmp_path), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]


def acknowledged(trace):
    """step -> end of its last 'wait push' (the servers applied every payload of that step)."""
    acked = {}
    for e in spans(trace, "wait push"):
        s = e["args"]["step"]
        acked[s] = max(acked.get(s, 0), e["ts"] + e["dur"])
    return acked


def test_trace_shows_overlap_for_cdsgd_and_none_for_bitsgd(tmp_path):
    run_bench(tmp_path, "bitsgd,cdsgd")
    for alg in ("cdsgd", "bitsgd"):
        trace = str(tmp_path / ("%s.json" % alg))
        fb = {e["args"]["step"]: e for e in spans(trace, "forward/backward") if e["args"]["step"] >= 0}
        acked = acknowledged(trace)
        assert len(acked) >= 6, "%s trace has too few compressed rounds" % alg
        early = [s for s, end in acked.items() if s + 1 in fb and fb[s + 1]["ts"] < end - 1.0]
        if alg == "cdsgd":
            # forward/backward of t+1 starts while round t's pushes are still unacknowledged
            assert len(early) >= len(acked) // 2, "cdsgd: no overlap (%d of %d steps)" % (len(early), len(acked))
        else:
            assert early == [], "bitsgd started steps %s before the previous step was acknowledged" % early


def test_interleaved_schedule_runs_each_segment_as_its_algorithm():
    from cdsgd_mx.worker.schedule import InterleavedSchedule
    s = InterleavedSchedule(k=3)
    s.begin(0, "ssgd")
    s.begin(2, "cdsgd")
    s.begin(9, "bitsgd")
    s.begin(10, "odsgd")
    with pytest.raises(ValueError):
        InterleavedSchedule(3).compressed(0)  # no segment yet
    # (compressed, delayed) for steps 0..11; cdsgd corrects at its own offsets 0, 3, 6 (steps 2, 5, 8)
    got = [(s.compressed(t), s.delayed(t)) for t in range(12)]
    assert got == [(False, False)] * 2 + [(False, True), (True, True), (True, True)] * 2 \
        + [(False, True), (True, False), (False, True), (False, True)]
    assert [s.phase(t) for t in (1, 2, 9, 11)] == ["ssgd", "cdsgd", "bitsgd", "odsgd"]
    assert not any(s.in_warmup(t) for t in range(12))


def test_interleaved_job_runs_every_algorithm_by_its_schedule():
    """One job (--bucket-size: every algorithm on the same buckets), the four algorithms taking
    turns: what each pushed per timed step proves the switch (fp32 for S-SGD and OD-SGD, codes
    for BIT-SGD, one correction in k for CD-SGD). Its buckets have parts (CDSGD_PART_SIZE): the
    part choice's trials are over before anything is timed, so every timed fp32 round goes the
    same way (a part's proof region is pushed with it: a trial of the other way among the
    timed steps would change what CD-SGD's correction pushes beside S-SGD's round)."""
    k = 3
    cmd = [sys.executable, "-m", "cdsgd_mx.bench.overlap", "--params", "2e5", "--iterations", "12",
           "--warmup", "2", "--k", str(k), "--compute-iterations", "1", "--interleaved", "--json",
           "--bucket-size", "65536"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CDSGD_PART_SIZE="16384"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    # the first JSON line, and the only one of its kind (the leader's, none from the workers): provenance
    assert list(rows[0]) == ["provenance"] and sum("provenance" in r for r in rows) == 1
    made = rows[0]["provenance"]
    assert made["command"][:3] == ["python", "-m", "cdsgd_mx.bench.overlap"] and "--interleaved" in made["command"]
    assert "commit" in made and made["numerics"]["mode"] in ("native", "portable")
    jobs = {r["job"]: r for r in rows if "job" in r}
    assert sorted(jobs) == ["bitsgd", "cdsgd", "odsgd", "ssgd"] and all(r["interleaved"] for r in jobs.values())
    assert all(r["bucket_size"] == 65536 for r in jobs.values())
    fp32 = 4 * jobs["ssgd"]["params"]
    assert fp32 <= jobs["ssgd"]["bytes_per_step"] < 1.01 * fp32  # + the proofs
    assert jobs["odsgd"]["bytes_per_step"] == jobs["ssgd"]["bytes_per_step"]
    assert jobs["bitsgd"]["bytes_per_step"] < fp32 / 15  # 2 bits a value
    assert jobs["cdsgd"]["bytes_per_step"] == pytest.approx(
        (jobs["ssgd"]["bytes_per_step"] + (k - 1) * jobs["bitsgd"]["bytes_per_step"]) / k)
    # 12 timed steps per algorithm in blocks of 2k: 2 cycles, each one time per algorithm
    assert all(len(r["cycle_iter_ms"]) == 2 and r["iter_ms"] > 0 for r in jobs.values())
    comm = next(r for r in rows if "phi_ms" in r)
    assert comm["phi_ms"] > 0 and comm["psi_plus_delta_ms"] > 0
    assert [j["algorithms"] for j in comm["jobs"]] == [["ssgd", "bitsgd", "odsgd", "cdsgd"]]
    assert comm["jobs"][0]["fp32_way"] in ("parts", "whole buckets"), comm["jobs"]


def test_emulated_compute_on_emulated_hosts(tmp_path):
    """--compute-ms T --emulate-hosts N --nic RATE (issue 48): each step's forward/backward is T
    ms of waiting, the jobs run on emulated hosts, and the rest is real. At 100 Mbit/s per NIC
    an MLP of 265 K weights makes communication dominate; each algorithm's step is what the time
    model predicts from the measured compute and rounds, and CD-SGD's is shorter than S-SGD's.
    The compute (150 ms) is near CD-SGD's communication, where the paper's overlap pays: with a
    full-duplex NIC a 2-bit push does not shorten the fp32 pulls, so with little compute to hide
    a round behind, S-SGD's step approaches CD-SGD's as S-SGD's round nears the wire's bound.
    Slow: 6 jobs of 3 nodes, each on a host of its own, about 65 s on 2 cores."""
    from cdsgd_mx.cluster import emulate
    from cdsgd_mx.experiments import timemodel
    if emulate.unavailable():
        pytest.skip(emulate.unavailable())
    compute = 150
    cmd = [sys.executable, "-m", "cdsgd_mx.bench.overlap", "--params", "2e5", "--iterations", "16", "--warmup", "2",
           "--k", "3", "--compute-ms", str(compute), "--emulate-hosts", "3", "--nic", "100mbit", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    jobs = {r["job"]: r for r in rows if "job" in r}
    costs = rows[-1]
    assert all(r["emulate_hosts"] == 3 and r["nic"] == "100mbit" and r["compute_ms_emulated"] == compute
               for r in jobs.values())
    for alg in ("ssgd", "bitsgd", "odsgd", "cdsgd"):
        assert compute - 1 <= jobs[alg]["compute_ms"] <= compute + 20, jobs[alg]  # the waiting, measured as compute was
        assert 0 < jobs[alg]["worker_cpu_ms"] < jobs[alg]["iter_ms"], jobs[alg]
        # the server's CPU while it served, per step: there, and not its start (about 1 s of imports)
        assert 0 < jobs[alg]["server_cpu_ms"] < jobs[alg]["iter_ms"], jobs[alg]
    # an fp32 round: 1.06 MB from each worker into the server's 100 Mbit/s NIC, and back: >= 170 ms
    assert costs["phi_ms"] >= 160 and costs["psi_plus_delta_ms"] < 0.8 * costs["phi_ms"], costs
    tau = sum(r["compute_ms"] for r in jobs.values() if "_comm" not in r["job"]) / 4
    predicted = timemodel.predict(timemodel.calibrate(tau, costs["phi_ms"], costs["psi_plus_delta_ms"]), 3)
    for alg in ("ssgd", "bitsgd", "odsgd", "cdsgd"):
        assert 0.8 <= jobs[alg]["iter_ms"] / predicted[alg] <= 1.25, (alg, jobs[alg]["iter_ms"], predicted)
    assert jobs["cdsgd"]["iter_ms"] < 0.85 * jobs["ssgd"]["iter_ms"], jobs


def test_the_scaling_table_runs_a_cell_and_draws_it(tmp_path):
    """python -m cdsgd_mx.bench.scaling (issue 48): one cell (LeNet-5, 2 workers + 1 server on
    3 emulated hosts at 100 Mbit/s, 20 ms of compute) with every algorithm beside the time
    model, stock MXNet's rows, the servers' CPU, the verdict and the plot, each algorithm's
    median of three timed blocks beside their spread; and one-line stops for bad input. Slow: three
    interleaved jobs of 3 nodes and three jobs of each stock system, about 90 s on 2 cores."""
    from cdsgd_mx.cluster import emulate
    bad = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.scaling", "--workers", "2,4", "--servers", "1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and bad.stderr.strip() == \
        "bench.scaling: --servers needs one entry per --workers entry (2), got 1", bad.stderr
    if emulate.unavailable():
        pytest.skip(emulate.unavailable())
    out, png = tmp_path / "cells.json", tmp_path / "scaling.png"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.scaling", "--models", "lenet5", "--workers", "2",
                           "--servers", "1", "--nic", "100mbit", "--compute-ms", "lenet5=20", "--json", str(out),
                           "--plot", str(png)], capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads(out.read_text())
    cell = record["cells"][0]
    assert (cell["model"], cell["workers"], cell["servers"], cell["nic"]) == ("lenet5", 2, 1, "100mbit")
    from cdsgd_mx.experiments import provenance  # the machine first, as in the record
    assert proc.stdout.splitlines()[0] == provenance.machine_line(record["provenance"]["cpu"]) == provenance.machine_line()
    # each algorithm on its default buckets (one size for all), the both-ways ones apart from the
    # one-way ones (a store has one pull setting)
    assert [(j["bucket_size"], j["algorithms"]) for j in cell["jobs"]] == [
        (1 << 20, ["ssgd", "bitsgd", "odsgd", "cdsgd"]), (1 << 20, ["bitsgd_2bit", "cdsgd_2bit"])]
    assert cell["phi_ms"] == cell["jobs"][0]["phi_ms"]  # CD-SGD's corrections: its own job's fp32 round
    # CD-SGD both ways' corrections cost their own round alone (fp32, V tracked), in its model
    from cdsgd_mx.experiments import timemodel
    job = cell["jobs"][1]
    assert cell["phi_pull_ms"] == job["phi_pull_ms"] > 0 and cell["psi_pull_plus_delta_ms"] == job["psi_pull_plus_delta_ms"]
    costs = timemodel.calibrate(job["tau_ms"], job["phi_ms"], job["psi_plus_delta_ms"],
                                pull_round_ms=job["psi_pull_plus_delta_ms"], correction_pull_round_ms=job["phi_pull_ms"])
    assert cell["model_ms"]["cdsgd_2bit"] == pytest.approx(timemodel.predict(costs, 5)["cdsgd_2bit"])
    assert "CD-SGD both ways' correction alone (fp32, V tracked: phi_pull)" in proc.stdout
    assert 19 <= cell["tau_ms"] <= 35 and cell["psi_plus_delta_ms"] < cell["phi_ms"], cell
    for alg in ("ssgd", "bitsgd", "odsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit", "stock_fp32", "stock_2bit"):
        # three timed blocks (stock: jobs) each, the figure their median, the table their spread
        blocks = cell["blocks_ms"][alg]
        assert len(blocks) == 3 and cell["iter_ms"][alg] == pytest.approx(statistics.median(blocks)), (alg, cell)
        assert "%.1f-%.1f (3)" % (min(blocks), max(blocks)) in proc.stdout, alg
    for alg in ("ssgd", "bitsgd", "odsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit"):
        assert 0.75 <= cell["iter_ms"][alg] / cell["model_ms"][alg] <= 1.3, (alg, cell)
        assert 0 < cell["worker_cpu_ms"][alg] < cell["iter_ms"][alg], (alg, cell)
        assert 0 < cell["cpu_busy"][alg] < 1, (alg, cell)  # 3 nodes' few ms a step: not CPU-bound
    assert 0 < cell["server_cpu_ms"] < cell["iter_ms"]["ssgd"], cell
    # LeNet-5's fp32 round at 100 Mbit/s is 4x its compute: communication dominates, CD-SGD gains
    assert cell["cdsgd_comm_ms"] > cell["tau_ms"] and cell["iter_ms"]["cdsgd"] < 0.8 * cell["iter_ms"]["ssgd"], cell
    assert "CD-SGD / BIT-SGD" in proc.stdout and png.stat().st_size > 10_000
    # stock MXNet on the same hosts: compute plus its round, a round of fp32 at least LeNet-5's wire time
    fp32_wire_ms = 1e3 * 2 * 4 * 61706 * 8 / 100e6  # 2 workers' pulls through the server's NIC, its busier way
    assert cell["stock_round_ms"]["stock_fp32"] > 0.9 * fp32_wire_ms, cell
    for s in ("stock_fp32", "stock_2bit"):
        assert cell["iter_ms"][s] == pytest.approx(cell["tau_ms"] + cell["stock_round_ms"][s]), cell
    assert "against stock MXNet: S-SGD / stock fp32" in proc.stdout


def test_a_cell_whose_nodes_fill_the_cores_is_called_cpu_bound():
    """The scaling table must not read a cell limited by this machine's 2 cores as the
    network's verdict: 16 workers at 12 ms of CPU a step and 4 servers at 35 ms, in a 150 ms step
    on 2 cores, keep (192 + 140) / 300 = 111% of them busy."""
    from cdsgd_mx.bench import scaling
    algs = scaling.ALGORITHMS
    cell = {"workers": 16, "servers": 4, "cores": 2, "server_cpu_ms": 35.0, "tau_ms": 25.0, "cdsgd_comm_ms": 200.0,
            "iter_ms": dict.fromkeys(algs, 150.0), "worker_cpu_ms": dict.fromkeys(algs, 12.0)}
    cell["iter_ms"].update(cdsgd=150.0, bitsgd=170.0, ssgd=400.0)
    cell["cpu_busy"] = scaling.cpu_busy(cell)
    assert abs(cell["cpu_busy"]["cdsgd"] - (16 * 12 + 4 * 35) / (2 * 150)) < 1e-9
    assert scaling.verdict(cell) == "missed: CPU-bound here (111% of 2 cores busy)"
    cell["iter_ms"]["cdsgd"] = 1000.0  # the same CPU in a long step: the network's cell, and slow
    cell["cpu_busy"] = scaling.cpu_busy(cell)
    assert "CPU-bound" not in scaling.verdict(cell) and "not faster than bitsgd" in scaling.verdict(cell)
    # a job per bucket size: each algorithm counts the servers of the job that ran it
    cell["iter_ms"]["cdsgd"] = 150.0
    cell["jobs"] = [{"algorithms": ["ssgd", "odsgd"], "server_cpu_ms": 80.0},
                    {"algorithms": ["bitsgd", "cdsgd", "bitsgd_2bit", "cdsgd_2bit"], "server_cpu_ms": 35.0}]
    busy = scaling.cpu_busy(cell)
    assert abs(busy["cdsgd"] - (16 * 12 + 4 * 35) / (2 * 150)) < 1e-9
    assert abs(busy["ssgd"] - (16 * 12 + 4 * 80) / (2 * 400)) < 1e-9


def test_a_cut_parameter_that_mkldnn_keeps_blocked_still_gets_its_weights(tmp_path):
    """A forward pass outside autograd lets MKL-DNN keep conv weights in a blocked layout, whose
    views it refuses to write ("Check failed: !is_view"); a parameter cut into pieces by a small
    big-array bound was written through such views (found at 16 workers + 4 servers, where the
    pieces get small). bench.overlap runs that forward pass before training."""
    env = dict(os.environ, MXNET_KVSTORE_BIGARRAY_BOUND="20000")
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.overlap", "--model", "resnet20", "--workers", "1",
                           "--compute-ms", "1", "--iterations", "8", "--warmup", "2", "--algorithms", "cdsgd",
                           "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "is_view" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    rows = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert any(r.get("job") == "cdsgd" and r["iter_ms"] > 0 for r in rows), rows

"""Every bench.* JSON output says where and how it was made (cdsgd_mx.experiments.provenance.record()):
line-oriented output (--json of bench.codec, bench.overlap) starts with one {"provenance": ...}
line; a JSON file of one object (bench.device --json F, bench.comm --json F) holds a top-level
"provenance". The cheapest outputs run here; bench.comm and bench.overlap are checked in
test_bench_comm.py and test_overlap.py (slow: real jobs)."""
import json
import subprocess
import sys

import pytest


def check_provenance(p, module):
    assert p["commit"] is None or len(p["commit"]) == 40  # None only outside a git checkout
    cmd = p["command"]
    assert cmd[0] == "python" and cmd[1:3] == ["-m", module], cmd  # as typed from the repository's root
    assert p["command_line"].startswith("python -m " + module)
    assert p["numerics"]["mode"] in ("native", "portable")
    assert p["libraries"]["cdsgd_mx"] and p["cpu"]["cores"] >= 1


def test_codec_json_lines_start_with_one_provenance_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.codec", "--sizes", "1000", "--min-time", "0.001",
                           "--json", "--mxnet-baseline", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    first, rest = rows[0], rows[1:]
    assert list(first) == ["provenance"]
    check_provenance(first["provenance"], "cdsgd_mx.bench.codec")
    assert "--json" in first["provenance"]["command"]
    # once, and the rows as before: one per op, none of them touched
    assert sum("provenance" in r for r in rows) == 1
    assert [r["op"] for r in rest] == ["copy", "quantize", "dequantize", "wire_encode", "wire_decode", "decode_sgd",
                                       "pull_encode", "pull_decode"]
    assert all(r["n"] == 1000 and r["melem_per_s"] > 0 for r in rest)


def test_device_json_file_holds_a_provenance_key(tmp_path):
    out = tmp_path / "d.json"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.device", "--device", "cpu", "--values", "1000",
                           "--repeats", "1", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    check_provenance(data["provenance"], "cdsgd_mx.bench.device")
    assert data["values"] == 1000 and data["device_part_ms"] > 0  # the figures as before, beside it
    assert "provenance" not in proc.stdout  # the file only: the printed summary is unchanged


@pytest.mark.slow
def test_numerics_bench_times_native_and_portable_in_pairs():
    """python -m cdsgd_mx.bench.numerics: each pair's seconds per epoch of both modes, their
    ratio, and a summary that is the mean of the pairs' ratios."""
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.numerics", "--pairs", "1", "--iterations", "20",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert list(rows[0]) == ["provenance"] and rows[0]["provenance"]["command"][:3] == \
        ["python", "-m", "cdsgd_mx.bench.numerics"]
    pair, summary = rows[1], rows[2]
    assert pair["native_epoch_s"] > 0 and pair["portable_epoch_s"] > 0
    assert pair["ratio"] == pair["portable_epoch_s"] / pair["native_epoch_s"] == summary["ratio_mean"]
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.numerics", "--pairs", "0"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "--pairs must be an integer >= 1, got 0" in proc.stderr


def test_the_machine_line_names_the_cpu_and_its_vector_width():
    """The line benchmarks print first and the test run last: model, architecture, usable cores,
    and whether the CPU has AVX-512 (this project's suite ran about 2x slower without it)."""
    from cdsgd_mx.experiments import provenance
    info = {"model": "AMD EPYC", "machine": "x86_64", "cores_usable": 2, "isa_flags": ["avx2", "fma", "avx512f"]}
    assert provenance.machine_line(info) == "machine: AMD EPYC (x86_64), 2 cores usable, AVX-512"
    info["isa_flags"] = ["avx2", "fma"]
    assert provenance.machine_line(info) == "machine: AMD EPYC (x86_64), 2 cores usable, AVX2, no AVX-512"
    info["isa_flags"] = ["sse4_2"]
    assert provenance.machine_line(info).endswith("2 cores usable, no AVX2")
    assert provenance.machine_line().startswith("machine: %s (" % provenance.cpu()["model"])

"""The peer benchmark (python -m cdsgd_mx.bench.comm): it runs stock MXNet and ours side by side
and reports what each pushed; bad arguments get one line, no traceback."""
import json
import subprocess
import sys

import pytest

from cdsgd_mx import codec

pytestmark = pytest.mark.slow


def test_one_round_of_stock_and_ours_side_by_side(tmp_path):
    out = tmp_path / "comm.json"
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.comm", "--models", "lenet5", "--bandwidth", "none",
                           "--rounds", "3", "--systems", "stock_fp32,stock_2bit,ssgd,bitsgd", "--bucket-size", "20000",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "bitsgd/stock_2bit" in proc.stdout and "[4/4] lenet5 none bitsgd" in proc.stdout
    data = json.loads(out.read_text())
    run, = data["runs"]
    values = data["models"]["lenet5"]["trained_values"]
    for system in ("stock_fp32", "stock_2bit", "ssgd", "bitsgd"):
        assert run["systems"][system]["ms"] > 0, run["systems"][system]
    assert run["systems"]["ssgd"]["bytes_per_round"] == 4 * values
    # 2-bit: 0.25 B/value, plus per bucket its last word's padding and 8 bytes of row index
    bits = run["systems"]["bitsgd"]["bytes_per_round"]
    buckets = -(-values // 20000)
    assert 4 * codec.packed_size(values) <= bits <= 4 * codec.packed_size(values) + 12 * buckets


@pytest.mark.parametrize("args,message", [
    (["--models", "lenet9"], "--models: unknown 'lenet9' (allowed: "),
    (["--systems", "ssgd,fastest"], "--systems: unknown 'fastest'"),
    (["--bandwidth", "1gbt"], "--bandwidth: bad link '1gbt'"),
    (["--rounds", "0"], "--rounds must be >= 1, got 0"),
])
def test_bad_arguments_get_one_line(args, message):
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.bench.comm"] + args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1

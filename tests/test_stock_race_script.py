"""scripts/stock_first_step_race.py (docs/failures.md) runs for a user: one job of stock MXNet,
its verdict on one line. (Whether a run of stock MXNet is hit is chance: the script counts.)"""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_the_script_runs_stock_jobs_and_counts_the_runs_apart():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "stock_first_step_race.py"), "--runs", "1",
                           "--devices", "2", "--early-setup"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "run 1: workers the same" in proc.stdout  # set up early, stock's workers agree
    assert proc.stdout.strip().endswith("0 of 1 runs ended with the workers apart (2 contexts per worker, "
                                        "kvstore set up before the first step)")
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "stock_first_step_race.py"), "--runs", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--runs and --devices must be >= 1" in bad.stderr

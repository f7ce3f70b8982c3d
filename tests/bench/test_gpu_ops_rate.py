"""scripts/gpu_ops_rate.py: its rows from the processes' reports, and a run on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.script_env import ROOT, load_script, run_script

ops_rate = load_script("gpu_ops_rate")


def test_a_row_is_every_kernel_over_the_slowest_process() -> None:
    reports = [{"rank": 0, "graphs": 10, "kernels": 1000, "seconds": 2.0},
               {"rank": 1, "graphs": 30, "kernels": 3000, "seconds": 4.0},
               {"rank": 2, "error": "AcceleratorError: busy"}]
    row = ops_rate.summarize(3, True, reports)
    assert row["kernels_per_s"] == 4000 / 4.0 and row["ok"] == 2 and row["sync"] == 1
    assert row["per_process"] == {"min": 500.0, "median": 750.0, "max": 750.0}
    assert row["errors"] == ["AcceleratorError: busy"]
    assert "kernels_per_s" not in ops_rate.summarize(1, False, [{"rank": 0, "error": "x"}])


def test_the_script_runs_processes_together_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "ops.json"
    done = run_script("gpu_ops_rate", "--out", str(out), "--device", "cpu", "--procs", "2",
                      "--sync", "0,1", "--kernels", "5", "--seconds", "0.2", "--stagger", "0.1")
    rows = json.loads(out.read_text())["rows"]
    assert [(r["procs"], r["sync"], r["ok"], r["errors"]) for r in rows] == \
        [(2, 0, 2, []), (2, 1, 2, [])]
    assert all(r["kernels_per_s"] > 0 for r in rows)
    assert "2 processes, sync 1:" in done.stdout


def test_bad_counts_are_refused(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_ops_rate.py"), "--out",
                           str(tmp_path / "x.json"), "--kernels", "0"],
                          check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and "must be positive" in done.stderr
    assert not (tmp_path / "x.json").exists()


def test_processes_that_cannot_start_are_reported_without_a_hang(tmp_path: Path) -> None:
    """Each process that fails to warm up (here: no such device) says why and still meets the
    others at the start, so the row ends with its errors instead of waiting forever."""
    out = tmp_path / "ops.json"
    done = run_script("gpu_ops_rate", "--out", str(out), "--device", "nosuchdevice", "--procs",
                      "2", "--sync", "1", "--seconds", "0.1", "--stagger", "0")
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ok"] == 0 and "kernels_per_s" not in row and len(row["errors"]) == 1
    assert "RuntimeError" in row["errors"][0] and "0 reported" in done.stdout

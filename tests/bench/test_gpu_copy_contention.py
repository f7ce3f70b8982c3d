"""scripts/gpu_copy_contention.py: its rows and statistics, run on the CPU (the GPU run is the
measurement; docs/benchmarks/e2e.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.bench.script_env import ROOT, load_script

contention = load_script("gpu_copy_contention")


def test_summary_is_median_p90_and_max() -> None:
    assert contention.summary([float(v) for v in range(1, 11)]) == \
        {"median": 5.5, "p90": 10.0, "max": 10.0}
    assert contention.summary([2.0]) == {"median": 2.0, "p90": 2.0, "max": 2.0}


def test_a_dry_run_on_the_cpu_gives_a_row_per_background(tmp_path: Path) -> None:
    out = tmp_path / "copies.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_copy_contention.py"),
                    "--device", "cpu", "--procs", "1", "--mb", "1", "--probe-mb", "1",
                    "--reps", "3", "--backgrounds", "none,memcpy,kernel,spin", "--out", str(out)],
                   env=env, check=True, timeout=180,
                   capture_output=True)
    rows = json.loads(out.read_text())["rows"]
    assert [r["background"] for r in rows] == ["none", "memcpy", "kernel", "spin"]
    for row in rows:
        assert set(row["probe"]) == set(contention.PROBES)
        assert all(v["median"] >= 0 for v in row["probe"].values())
    assert "background_gb_per_s" not in rows[0]
    assert rows[1]["background_gb_per_s"] > 0 and rows[2]["background_gb_per_s"] > 0
    assert rows[3]["background_spins_per_s"] > 0 and "background_gb_per_s" not in rows[3]


def test_an_unknown_background_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_copy_contention.py"),
                           "--device", "cpu", "--backgrounds", "none,dma", "--out",
                           str(tmp_path / "x.json")], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "unknown background 'dma'" in done.stderr
    assert not (tmp_path / "x.json").exists()

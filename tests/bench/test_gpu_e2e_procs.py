"""scripts/gpu_e2e_procs.py, the e2e with several processes a GPU, run on the CPU with a tiny
input (its numbers need a GPU; this checks that the processes start together, push, report
and are summed, and that a bad row is refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_e2e_procs.py"


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False,
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def _one_row(tmp_path: Path, rows: str, *more: str) -> dict:
    """The script's one row ``rows`` on the CPU (tiny input, two sessions, half a second),
    which ran without an error."""
    out = tmp_path / "procs.json"
    done = _run("--out", str(out), "--device", "cpu", "--input-size", "72x128",
                "--backend", "eager-fp32", "--rows", rows, "--sessions", "2",
                "--seconds", "0.5", "--frames", "6", "--threads", "1", *more)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert "error" not in row, row
    return row


def test_two_processes_push_together_and_their_rates_are_summed(tmp_path: Path) -> None:
    row = _one_row(tmp_path, "2x1")
    assert (row["procs"], row["batch"], row["sessions_per_proc"]) == (2, 1, 1)
    assert len(row["frames_per_s_each"]) == 2 and min(row["frames_per_s_each"]) > 0
    assert abs(row["frames_per_s"] - sum(row["frames_per_s_each"])) < 0.2
    assert row["rows_out"] > 0 and row["pushes"] >= 2
    # one session a process at 60 fps: a push of 3 frames takes 50 ms to gather
    assert row["gather_ms_at_60fps"] == 50.0
    assert row["latency_ms_p99_at_60fps"] > row["push_ms_p99"] >= row["push_ms_p50"] > 0
    # the load the parent sampled while the two pushed (no GPU here: no utilization)
    assert 0 < row["cpu_busy_pct"] <= 100 and row["cores"] == os.cpu_count()
    assert row["gpu_util_pct"] is None and row["gpu_samples"] == 0


def test_lanes_push_from_threads_of_one_process_and_are_summed(tmp_path: Path) -> None:
    row = _one_row(tmp_path, "1x1x2")
    assert (row["procs"], row["batch"], row["lanes"], row["sessions_per_proc"]) == (1, 1, 2, 2)
    assert len(row["frames_per_s_each"]) == 1 and row["frames_per_s"] > 0
    assert row["rows_out"] > 0 and row["pushes"] >= 4  # both lanes pushed, twice at least
    assert row["uncaptured_calls"] == 0  # the CPU has no graphs to freeze
    assert 0 < row["start_s_max"] < 240  # how long the process took to build its lanes
    # one session a lane: its push of 3 frames takes 50 ms to gather at 60 fps
    assert row["gather_ms_at_60fps"] == 50.0


def test_the_load_sampler_reads_the_host_and_says_when_it_cannot_read_the_gpu(monkeypatch) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_e2e_procs", SCRIPT)
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # its `from gpu_e2e import ...`
    procs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(procs)
    monkeypatch.setattr(procs, "_gpu_sample", lambda: (40.0, 350.0, 1980.0))
    load = procs.sample_load(0.3, every_s=0.1)
    assert (load["gpu_util_pct"], load["gpu_power_w"], load["gpu_sm_clock_mhz"]) == (40.0, 350.0, 1980.0)
    assert load["gpu_samples"] >= 2
    assert 0 <= load["cpu_busy_pct"] <= 100
    monkeypatch.setattr(procs, "cpu_ticks", lambda: None)
    monkeypatch.setattr(procs, "_gpu_sample", lambda: None)
    assert procs.sample_load(0.1) == {"cpu_busy_pct": None, "cores": os.cpu_count(),
                                      "gpu_util_pct": None, "gpu_power_w": None,
                                      "gpu_sm_clock_mhz": None, "gpu_samples": 0}


def test_a_row_that_is_not_processes_x_batch_is_refused_in_one_line(tmp_path: Path) -> None:
    for rows in ("2x0", "two", "3x4x5x6", "1x4x0"):
        done = _run("--out", str(tmp_path / "x.json"), "--device", "cpu", "--rows", rows,
                    timeout=60)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1].startswith("gpu_e2e_procs.py: error: --rows")
    assert not (tmp_path / "x.json").exists()


def test_a_start_that_times_out_says_so_in_the_row(tmp_path: Path) -> None:
    """Processes not all built within --start-timeout-s: the row's error names the option
    (the twenty-second session lost a call to rows reported as a bare BrokenBarrierError)."""
    out = tmp_path / "procs.json"
    done = _run("--out", str(out), "--device", "cpu", "--input-size", "72x128",
                "--backend", "eager-fp32", "--rows", "2x1", "--sessions", "2",
                "--seconds", "0.5", "--frames", "6", "--threads", "1",
                "--start-timeout-s", "0.1")  # a spawned process takes seconds to import torch
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert "frames_per_s" not in row
    assert "not every process was ready within --start-timeout-s 0.1" in row["error"]
    assert len(row["reports"]) == 2 and all(r["start_s"] > 0 for r in row["reports"])


def test_network_only_lanes_run_just_the_backend(tmp_path: Path) -> None:
    """``--network-only``: each lane calls its backend on fixed windows (no JPEG, no rows);
    frames count ``--step`` a window, beside the windows."""
    # 2 s, not half a second: on a loaded 2-core CI machine the first calls of two lanes took
    # most of the half second (a fresh-clone run counted 2 pushes)
    row = _one_row(tmp_path, "1x2x2", "--network-only", "--seconds", "2")
    assert row["network_only"] and (row["procs"], row["batch"], row["lanes"]) == (1, 2, 2)
    assert row["rows_out"] == 0 and row["decoder"] is None
    assert row["pushes"] >= 4  # both lanes called their backend, twice at least
    assert row["frames_per_push"] == 6  # two windows of three frames
    assert abs(row["windows_per_s"] * 3 - row["frames_per_s"]) < 1e-6
    assert row["gather_ms_at_60fps"] is None and row["push_ms_p50"] > 0
    plain = _one_row(tmp_path, "1x1")
    assert not plain["network_only"] and plain["windows_per_s"] is None

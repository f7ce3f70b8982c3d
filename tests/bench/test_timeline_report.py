"""scripts/timeline_report.py: the span, busy time and overlap of profiled graph replays, on a
hand-made timeline whose answers are known."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _kernel(name: str, start: float, end: float, stream: int) -> dict:
    return {"name": name, "start_us": start, "end_us": end, "stream": stream}


def test_two_replays_with_overlap_and_copies(tmp_path: Path) -> None:
    kernels = []
    for t0, stretch in ((0.0, 1.0), (1000.0, 2.0)):
        kernels += [
            _kernel("Memcpy DtoD (Device -> Device)", t0, t0 + 5, 7),  # the copy-in: dropped
            _kernel("conv_kernel", t0 + 10, t0 + 30, 7),
            _kernel("conv_kernel", t0 + 20, t0 + 20 + 20 * stretch, 8),  # overlaps the first
            _kernel("se_tail_kernel", t0 + 60, t0 + 70, 7),  # after an idle gap
        ]
    path = tmp_path / "timeline.json.gz"
    path.write_bytes(gzip.compress(json.dumps(
        {"backend": "b", "batch": 1, "replays": 2, "kernels": kernels}).encode()))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "timeline_report.py"),
                           str(path), "--kernels"], capture_output=True, text=True, timeout=60,
                          check=True)
    out = done.stdout
    # replay 1: span 10..70 = 60, busy 10..40 + 60..70 = 40, kernel time 20 + 20 + 10 = 50;
    # replay 2: span 60, busy 10..60 + 60..70 = 60, kernel time 20 + 40 + 10 = 70
    assert "3 kernels a replay, 2 replays" in out
    assert "median span 60.0 us" in out
    assert "some kernel running 60.0 us (100% of the span)" in out  # the upper median
    assert "sum of kernel durations 70.0 us" in out
    assert "stream 8: 1 kernels, busy 40.0 us, from 10.0 to 50.0 us" in out
    assert "Memcpy" not in out

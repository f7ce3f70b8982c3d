"""scripts/ncu_summary.py on a hand-made Nsight Compute CSV and on the committed profile."""

from __future__ import annotations

import csv
import gzip
import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ncu_summary.py"
FIELDS = ["ID", "Kernel Name", "Grid Size", "Block Size", "Section Name", "Metric Name",
          "Metric Unit", "Metric Value", "Rule Name", "Rule Type", "Rule Description",
          "Estimated Speedup"]


def _row(kid: str, section: str, metric: str = "", value: str = "", unit: str = "",
         rule: str = "", speedup: str = "") -> dict[str, str]:
    return {"ID": kid, "Kernel Name": f"kernel_{kid}", "Grid Size": "(132, 1, 1)",
            "Block Size": "(256, 1, 1)", "Section Name": section, "Metric Name": metric,
            "Metric Unit": unit, "Metric Value": value, "Rule Name": "R" if rule else "",
            "Rule Type": "OPT" if rule else "", "Rule Description": rule,
            "Estimated Speedup": speedup}


def _run(*paths: Path) -> str:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True,
                          text=True, timeout=60, check=True).stdout


def test_kernels_metrics_and_stall_rules(tmp_path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, FIELDS, quoting=csv.QUOTE_ALL)
    writer.writeheader()
    writer.writerows([
        _row("0", "GPU Speed Of Light Throughput", "Duration", "1,837,696", "ns"),
        _row("0", "Launch Statistics", "Registers Per Thread", "255", "register/thread"),
        _row("0", "PM Sampling", "Maximum Buffer Size", "1", "byte"),  # not summarised
        _row("0", "WarpStateStats", rule="each warp spends 2.2 cycles waiting", speedup="37.85"),
        _row("1", "GPU Speed Of Light Throughput", "DRAM Throughput", "63.26", "%"),
    ])
    path = tmp_path / "ncu.csv.gz"
    path.write_bytes(gzip.compress(("==PROF== Connected\n" + buf.getvalue()).encode()))
    out = _run(path)
    assert "[0] kernel_0  grid (132, 1, 1) block (256, 1, 1)" in out
    assert "Duration: 1,837,696 ns" in out and "Registers Per Thread: 255" in out
    assert "rule (37.85): each warp spends 2.2 cycles waiting" in out
    assert "Maximum Buffer Size" not in out
    assert "[1] kernel_1" in out and "DRAM Throughput: 63.26 %" in out


def test_the_committed_profile_reads() -> None:
    path = ROOT / "docs" / "benchmarks" / "h200-2026-12-01f" / "ncu" / "ncu-b64.csv.gz"
    out = _run(path)
    assert out.count("grid (") == 7  # the seven profiled steps
    assert "conv3x3_direct_kernel<128, 16, 16, 16>" in out


def test_a_file_without_a_table_says_so(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("==PROF== nothing profiled\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode != 0 and "no ncu table" in done.stderr

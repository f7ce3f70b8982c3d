"""Summarise Nsight Compute's ``--csv --page details`` output on the CPU: per profiled kernel
its grid, block, duration, throughputs (SM, memory, DRAM, L1/TEX, L2), registers, occupancy,
cycles per issued instruction, issue-slot use, and the stall rules ncu attached with their
estimated speedups (what the "details" page keeps of the warp-state breakdown).

    python scripts/ncu_summary.py docs/benchmarks/h200-2026-12-01f/ncu/ncu-b64.csv.gz
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
from pathlib import Path

METRICS = (
    "Duration", "SM Frequency", "Compute (SM) Throughput", "Memory Throughput",
    "DRAM Throughput", "L1/TEX Cache Throughput", "L2 Cache Throughput",
    "Registers Per Thread", "Dynamic Shared Memory Per Block", "Achieved Active Warps Per SM",
    "Warp Cycles Per Issued Instruction", "Issue Slots Busy",
    "Local Memory Spilling Requests",
)
RULE_SECTIONS = ("WarpStateStats", "ComputeWorkloadAnalysis", "SchedulerStats")


def read_rows(path: Path) -> list[dict[str, str]]:
    """The table of an ncu CSV (gzip or plain): ncu prints its own messages first."""
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit(f"{path}: no ncu table (a line starting with \"ID\") found")
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def summary(rows: list[dict[str, str]]) -> list[str]:
    kernels: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        kernels.setdefault(row["ID"], []).append(row)
    out = []
    for kid, krows in kernels.items():
        first = krows[0]
        out.append(f"[{kid}] {first['Kernel Name'][:90]}  grid {first['Grid Size']} "
                   f"block {first['Block Size']}")
        seen = set()
        for row in krows:
            name = row["Metric Name"]
            if name in METRICS and name not in seen:
                seen.add(name)
                out.append(f"    {name}: {row['Metric Value']} {row['Metric Unit']}".rstrip())
        for row in krows:
            text = (row.get("Rule Description") or "").strip()
            if row["Section Name"] in RULE_SECTIONS and row.get("Estimated Speedup") and text:
                out.append(f"    rule ({row['Estimated Speedup']}): {text[:240]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", type=Path, nargs="+")
    args = parser.parse_args()
    for path in args.csv:
        print(f"== {path}")
        print("\n".join(summary(read_rows(path))))


if __name__ == "__main__":
    main()

"""Summarise ``gpu_graph_timeline.py`` output on the CPU: per graph replay its span (first
kernel start to last kernel end), the time at least one kernel runs (union), the sum of the
kernels' durations (> union where streams overlap), each stream's busy time, and the kernels
in order with start, end and stream, of the replay whose span is the median (the upper one
of an even count).

    python scripts/timeline_report.py docs/benchmarks/h200-2026-12-01e/timeline-b1.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def replays(data: dict) -> list[list[dict]]:
    """The kernel records split into replays of ttball's kernels: the copies in and out and
    PyTorch's own kernels (the fill that zeroes the SE sums) are left out."""
    kernels = [k for k in data["kernels"] if "Memcpy" not in k["name"]
               and "at::native" not in k["name"]]
    n = len(kernels) // data["replays"]
    return [kernels[i * n:(i + 1) * n] for i in range(data["replays"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("timeline")
    parser.add_argument("--kernels", action="store_true", help="list one replay's kernels")
    args = parser.parse_args()
    path = Path(args.timeline)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    data = json.loads(raw)
    rows = []
    for rep in replays(data):
        start = min(k["start_us"] for k in rep)
        span = max(k["end_us"] for k in rep) - start
        busy = union([(k["start_us"], k["end_us"]) for k in rep])
        total = sum(k["end_us"] - k["start_us"] for k in rep)
        rows.append((span, busy, total, rep, start))
    rows.sort(key=lambda r: r[0])
    span, busy, total, rep, start = rows[len(rows) // 2]
    print(f"{data['backend']} batch {data['batch']}: {len(rep)} kernels a replay, "
          f"{len(rows)} replays; median span {span:.1f} us (min {rows[0][0]:.1f}, max "
          f"{rows[-1][0]:.1f})")
    print(f"  that replay: some kernel running {busy:.1f} us ({busy / span:.0%} of the span), "
          f"sum of kernel durations {total:.1f} us ({total / span:.2f} kernels at a time "
          "on average)")
    streams: dict[int, list[tuple[float, float]]] = {}
    for k in rep:
        streams.setdefault(k["stream"], []).append((k["start_us"], k["end_us"]))
    for s, iv in sorted(streams.items(), key=lambda kv: min(a for a, _ in kv[1])):
        first = min(a for a, _ in iv) - start
        last = max(b for _, b in iv) - start
        print(f"  stream {s}: {len(iv)} kernels, busy {union(iv):.1f} us, from {first:.1f} "
              f"to {last:.1f} us")
    if args.kernels:
        for k in rep:
            print(f"  {k['start_us'] - start:7.1f} {k['end_us'] - start:7.1f} "
                  f"{k['end_us'] - k['start_us']:6.1f}  s{k['stream']}  {k['name'][:70]}")


if __name__ == "__main__":
    main()

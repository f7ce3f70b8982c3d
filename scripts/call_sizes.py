"""A load test's network calls by size, and what they cost counted with the network's own
times: from a worker's ``/metrics`` snapshot after a run (minus one taken before it, e.g. once
ready) and a ``ttball bench`` report of the same backend at the warmed batch sizes.

Each call of ``n`` windows runs padded up to the smallest warmed size ``>= n``
(``ttball_batch_size`` counts ``n``; its buckets 1, 2, 3, 4, 6, 8, 12, 16, ... each fall to one
warmed size of 1, 2, 4, 8, 16). Counting every call at its padded size's median time alone
gives the network's GPU time the run asked for, a window's share of it, and what the same
windows would cost in full calls of the largest size -- the thirty-ninth session's count for
``serve --carry-windows`` (``docs/benchmarks/LOG.md``)::

    python scripts/call_sizes.py RUN/metrics-8-320.txt RUN/metrics-8-0.txt \\
        --bench prime/bench.md --variant triton-fp16-direct

Snapshots may be gzipped; samples of several replicas are summed.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import math
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families


def read_text(path: Path) -> str:
    data = path.read_bytes()
    return gzip.decompress(data).decode() if data[:2] == b"\x1f\x8b" else data.decode()


def counts(text: str) -> dict[str, float]:
    """The batch-size histogram's cumulative buckets (``le_N``), its count and sum, and the
    padding counter, summed over replicas."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ttball_batch_size_bucket":
                key = f"le_{sample.labels['le']}"
            elif sample.name in ("ttball_batch_size_count", "ttball_batch_size_sum",
                                 "ttball_batch_padding_total"):
                key = sample.name.removeprefix("ttball_")
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value
    return out


def bench_times(text: str, variant: str) -> dict[int, float]:
    """``{batch: median ms}`` of ``variant`` in a ``ttball bench`` report's table."""
    times = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[0] == variant and cells[1].isdigit():
            times[int(cells[1])] = float(cells[2])
    return times


def calls_by_size(delta: dict[str, float], sizes: list[int]) -> dict[int, float]:
    """Calls per padded size, from the histogram's buckets; a bucket that spans two warmed
    sizes cannot be split and is refused."""
    edges = sorted((float(k[3:]), v) for k, v in delta.items()
                   if k.startswith("le_") and k != "le_+Inf")
    out: dict[int, float] = {}
    low, below = 0.0, 0.0
    for edge, cumulative in edges:
        calls = cumulative - below
        if calls > 0.5:
            if edge > sizes[-1]:
                raise ValueError(f"calls of up to {edge:g} windows: more than the largest size")
            first = bisect.bisect_left(sizes, math.floor(low) + 1)
            last = bisect.bisect_left(sizes, edge)
            if first != last:
                raise ValueError(f"the bucket ({low:g}, {edge:g}] spans the sizes "
                                 f"{sizes[first]} and {sizes[last]}")
            out[sizes[last]] = out.get(sizes[last], 0.0) + calls
        low, below = edge, cumulative
    return out


def report(after: str, before: str | None, bench: str, variant: str) -> list[str]:
    now = counts(after)
    was = counts(before) if before is not None else {}
    delta = {k: v - was.get(k, 0.0) for k, v in now.items()}
    times = bench_times(bench, variant)
    if not times:
        raise ValueError(f"no rows of {variant!r} in the bench report")
    sizes = sorted(times)
    per_size = calls_by_size(delta, sizes)
    windows, calls = delta.get("batch_size_sum", 0.0), delta.get("batch_size_count", 0.0)
    if not calls:
        raise ValueError("no network calls between the snapshots")
    rows = sum(n * size for size, n in per_size.items())
    network_ms = sum(n * times[size] for size, n in per_size.items())
    full = times[sizes[-1]] / sizes[-1]
    lines = [f"{'size':>6} {'calls':>8} {'ms alone':>9}"]
    lines += [f"{size:>6} {per_size.get(size, 0.0):>8.0f} {times[size]:>9.3f}" for size in sizes]
    lines.append(f"calls {calls:.0f}, windows {windows:.0f} ({windows / calls:.2f} a call), rows "
                 f"run {rows:.0f} (padding {rows - windows:.0f}: {100 * (rows - windows) / windows:.1f} "
                 f"% of the windows; the counter says {delta.get('batch_padding_total', math.nan):.0f})")
    lines.append(f"network alone: {network_ms / 1e3:.3f} s, {1e3 * network_ms / windows:.1f} us a "
                 f"window; in full calls of {sizes[-1]}: {1e3 * full:.1f} us a window "
                 f"({100 * (network_ms / windows / full - 1):+.1f} % for these calls)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("after", type=Path, help="/metrics snapshot after the run")
    parser.add_argument("before", type=Path, nargs="?", help="one before it (default: zero)")
    parser.add_argument("--bench", type=Path, required=True, help="a ttball bench report (.md)")
    parser.add_argument("--variant", default="triton-fp16-direct")
    args = parser.parse_args(argv)
    try:
        lines = report(read_text(args.after), read_text(args.before) if args.before else None,
                       args.bench.read_text(), args.variant)
    except (OSError, ValueError) as exc:
        print(f"call_sizes: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The host's CPU time over a run, from Linux's ``/proc/stat``: how busy it was and how much of
it the hypervisor stole (a virtual machine's CPUs given to its neighbours). A run on a host
whose CPU is being stolen has a longer latency tail for reasons of its own: on one H200 host
~8 % stolen doubled the worker's p99 (``docs/benchmarks/h200-2026-12-06/``), so a latency
figure is read beside it."""

from __future__ import annotations

from pathlib import Path

STAT = Path("/proc/stat")


def cpu_ticks(line: str | None = None) -> list[int] | None:
    """The "cpu" line's first eight fields (user, nice, system, idle, iowait, irq, softirq,
    steal; guest and guest_nice are in user and nice already), from ``line`` or the host's
    ``/proc/stat`` now; None where there is none (not Linux) or it can't be read."""
    try:
        text = line if line is not None else STAT.read_text().splitlines()[0]
        fields = text.split()
        return [int(x) for x in fields[1:9]] if fields and fields[0] == "cpu" else None
    except (OSError, IndexError, ValueError):
        return None


def cpu_shares(before: list[int] | None, after: list[int] | None
               ) -> dict[str, float | None] | None:
    """% of the CPU time between two :func:`cpu_ticks` readings that was busy (not idle or
    waiting for I/O; stolen time counts as busy) and that was stolen (None without a steal
    field); None when either reading is missing or no time passed."""
    if before is None or after is None:
        return None
    ticks = [b - a for a, b in zip(before, after)]
    total = sum(ticks)
    if total <= 0:
        return None
    return {"busy_pct": round(100 * (1 - (ticks[3] + ticks[4]) / total), 1),
            "steal_pct": round(100 * ticks[7] / total, 1) if len(ticks) >= 8 else None}

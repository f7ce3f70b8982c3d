"""The host's CPU time over a run, from Linux's ``/proc/stat``: how busy it was and how much of
it the hypervisor stole (a virtual machine's CPUs given to its neighbours). A run on a host
whose CPU is being stolen has a longer latency tail for reasons of its own: on one H200 host
~8 % stolen doubled the worker's p99 (``docs/benchmarks/h200-2026-12-06/``), so a latency
figure is read beside it. The share stolen since the host booted tells a noisy host even when
the run itself was spared: on one H100 host 0.9 % since boot (0.0-0.1 % in its runs) went with a
p99 at 64 sessions of 61-121 ms, where another host's 0.002 % went with 48-50 (eight runs of
ten; 57 and 82 the others; ``docs/benchmarks/h100-2026-12-06b/``)."""

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


def _stolen(ticks: list[int], digits: int) -> float | None:
    """% of ``ticks`` stolen (None without a steal field or without time)."""
    total = sum(ticks)
    return round(100 * ticks[7] / total, digits) if len(ticks) >= 8 and total > 0 else None


def cpu_shares(before: list[int] | None, after: list[int] | None
               ) -> dict[str, float | None] | None:
    """% of the CPU time between two :func:`cpu_ticks` readings that was busy (not idle or
    waiting for I/O; stolen time counts as busy) and that was stolen (None without a steal
    field), and ``steal_boot_pct``: % stolen from the host's boot to ``before`` (two
    decimals: a quiet host's is ~0.00); None when either reading is missing or no time
    passed."""
    if before is None or after is None:
        return None
    ticks = [b - a for a, b in zip(before, after)]
    total = sum(ticks)
    if total <= 0:
        return None
    return {"busy_pct": round(100 * (1 - (ticks[3] + ticks[4]) / total), 1),
            "steal_pct": _stolen(ticks, 1), "steal_boot_pct": _stolen(before, 2)}

"""The host's memory, as the checks before a long job read it (``synth``'s rendering,
``train``'s batches): what the kernel says can still be allocated, and byte counts for their
one-line errors."""

from __future__ import annotations

from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping; None where it doesn't say."""
    try:
        with MEMINFO.open() as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return None


def format_bytes(n: float) -> str:
    """``n`` bytes in B, KiB, MiB, GiB or TiB, one decimal: ``format_bytes(1536) == '1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"

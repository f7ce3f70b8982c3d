"""Peak memory of the timed calls.

CUDA: ``torch.cuda.max_memory_allocated`` after a reset, so weights, inputs, CUDA-graph pools
and workspaces allocated through PyTorch are included (TensorRT's own allocations are not).
CPU: the rise of the process's peak resident set (``VmHWM``, reset through
``/proc/self/clear_refs``) above the resident set before the calls, after ``malloc_trim(0)``
has handed freed heap pages back to the system: roughly the calls' activations and workspace
(weights excluded, unlike CUDA). Where ``clear_refs`` can't be written, nothing is reported.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _trim_heap() -> None:
    """Return freed malloc memory to the OS (glibc), so resident memory is live memory."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak_rss() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


@contextmanager
def peak_memory(device: torch.device) -> Iterator[dict[str, object]]:
    """Fills ``peak_mem_mb`` and ``mem_method`` in the yielded dict when the block ends."""
    result: dict[str, object] = {"peak_mem_mb": None, "mem_method": "unavailable"}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        yield result
        torch.cuda.synchronize(device)
        result["peak_mem_mb"] = torch.cuda.max_memory_allocated(device) / 1e6
        result["mem_method"] = "cuda max_memory_allocated (weights and buffers included)"
        return
    _trim_heap()
    before = _status_kib("VmRSS")
    usable = before is not None and _reset_peak_rss()
    yield result
    peak = _status_kib("VmHWM")
    if usable and peak is not None and before is not None:
        result["peak_mem_mb"] = max(peak - before, 0) * 1024 / 1e6
        result["mem_method"] = (
            "cpu peak RSS rise over the calls after malloc_trim (weights excluded)"
        )


def measure_peak(
    fn: Callable[[], object], device: torch.device, calls: int = 1
) -> dict[str, object]:
    with peak_memory(device) as result:
        for _ in range(calls):
            fn()
    return result

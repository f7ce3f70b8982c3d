"""Milliseconds per call: warm-up, then ``repeats`` samples each lasting ``min_sample_s``.

The timing covers the calls alone: inputs are made (on CUDA, already on the device) before it
starts; CUDA work is timed with events between synchronizations.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

# A sample lasts at least 50 ms, so that the timer's resolution and a one-off 1 ms stall
# (a scheduler tick) stay under 2% of it.
MIN_SAMPLE_S = 0.05
WARMUP_CALLS = 2


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: median, min and max over ``repeats`` samples."""

    median_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    calls_per_sample: int


def measure(
    fn: Callable[[], object], device: torch.device, repeats: int, min_sample_s: float = MIN_SAMPLE_S
) -> Timing:
    """Time ``fn()`` after ``WARMUP_CALLS`` calls; one more call sizes the samples."""
    for _ in range(WARMUP_CALLS):
        fn()
    once = _seconds(fn, 1, device)
    number = max(1, min(100_000, math.ceil(min_sample_s / max(once, 1e-7))))
    samples = sorted(_seconds(fn, number, device) / number * 1e3 for _ in range(repeats))
    return Timing(statistics.median(samples), samples[0], samples[-1], repeats, number)


Timer = Callable[[Callable[[], object]], Timing]


def timer(device: torch.device, repeats: int, min_sample_s: float = MIN_SAMPLE_S) -> Timer:
    """:func:`measure` with its settings bound: ``timer(...)(fn)``."""
    return lambda fn: measure(fn, device, repeats, min_sample_s)


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _seconds(fn: Callable[[], object], number: int, device: torch.device) -> float:
    if device.type == "cuda":
        return _cuda_seconds(fn, number)
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - start


def _cuda_seconds(fn: Callable[[], object], number: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(number):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3

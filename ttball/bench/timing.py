"""Latency the seed's way: warm-up calls, then groups of calls; the median of the group means.

On CUDA each group is timed with a pair of CUDA events around its calls (one synchronisation per
group, so launches pipeline as in a worker loop); on CPU with ``time.perf_counter``. The timed
callable is the backend call on a batch already on the device: host→device copies of frames are
excluded; the backend's input cast and FP32 output conversion are included.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

from ttball.backends.base import synchronize

T = TypeVar("T")


@dataclass(frozen=True)
class TimingPlan:
    """How many calls: ``warmup`` untimed, then ``groups`` groups of ``calls`` each."""

    warmup: int = 20
    groups: int = 5
    calls: int = 50


FULL = TimingPlan()  # the seed's section-5 method
QUICK = TimingPlan(warmup=2, groups=3, calls=2)  # CI-sized: shape and plumbing, not numbers


def first_call(fn: Callable[[], T], device: torch.device) -> tuple[float, T]:
    """Wall time of one call including any compile it triggers (synchronised), and its result."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return time.perf_counter() - start, result


def _event_ms(fn: Callable[[], object], calls: int) -> float:
    """Mean ms of ``calls`` back-to-back calls between two CUDA events on the current stream."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def group_ms(fn: Callable[[], object], device: torch.device, calls: int) -> float:
    """Mean ms of ``calls`` back-to-back calls: CUDA events on a GPU, the wall clock otherwise."""
    if device.type == "cuda":
        return _event_ms(fn, calls)
    begin = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - begin) * 1e3 / calls


_SLEEP_CYCLES_PER_MS: dict[int, float] = {}


def cycles_per_ms(device: torch.device) -> float:
    """How many ``torch.cuda._sleep`` cycles last a millisecond on ``device`` (measured once)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SLEEP_CYCLES_PER_MS:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # first call: loads the kernel
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
        _SLEEP_CYCLES_PER_MS[index] = 10_000_000 / max(start.elapsed_time(end), 1e-3)
    return _SLEEP_CYCLES_PER_MS[index]


def device_ms(fn: Callable[[], object], device: torch.device, calls: int) -> float:
    """Mean ms of the device work of ``calls`` back-to-back calls, without the host's launch
    time: the calls are queued behind a spinning kernel long enough to cover their launches,
    so the events around them see the kernels run back to back, as in a CUDA graph. (Plain
    :func:`group_ms` of a 5 µs kernel measures its ~30 µs Python launch instead.) On CPU, the
    wall clock as :func:`group_ms`, as on a torch without ``torch.cuda._sleep`` (a private
    function, so not promised to stay)."""
    if device.type != "cuda" or not hasattr(torch.cuda, "_sleep"):
        return group_ms(fn, device, calls)
    synchronize(device)
    begin = time.perf_counter()
    fn()
    launch_s = time.perf_counter() - begin  # host time of one launch, plus its device time
    synchronize(device)
    spin_ms = 2e3 * launch_s * calls + 0.2  # twice the launches' host time, and a margin
    torch.cuda._sleep(int(spin_ms * cycles_per_ms(device)))
    return _event_ms(fn, calls)


def time_calls(
    fn: Callable[[], object], device: torch.device, plan: TimingPlan
) -> dict[str, float]:
    """``median_ms`` of the group means with their ``min_ms`` and ``max_ms``."""
    for _ in range(plan.warmup):
        fn()
    synchronize(device)
    means = [group_ms(fn, device, plan.calls) for _ in range(plan.groups)]
    return {"median_ms": statistics.median(means), "min_ms": min(means), "max_ms": max(means)}

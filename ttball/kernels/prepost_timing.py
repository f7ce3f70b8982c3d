"""Instruments of :class:`~ttball.kernels.prepost.GpuPipeline`'s push: :class:`StageTimer`
(seconds a stage, wall and CPU), :func:`gpu_split` (a call's GPU time by stage and step, from
its timing events: :data:`GPU_STAGES`, :data:`GPU_STEPS`) and :class:`PadKernels` (GPU work
added to every call on purpose, ``TTBALL_PAD_KERNELS`` / ``TTBALL_PAD_MATMULS``: measurement
only, docs/benchmarks/e2e.md)."""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from ttball.backends.base import capture_graph, synchronize


class StageTimer:
    """Seconds per stage: ``seconds`` on the wall clock, ``cpu_seconds`` on the calling thread's
    CPU clock (what a stage's wall time holds beyond its CPU time, the thread spent off the CPU:
    waiting for the device, a child process, or the interpreter lock). ``sync=True`` waits for
    the device at each stage's end, so the time lands on the stage that spent it (costs the
    overlap; for measurement only)."""

    def __init__(self, device: torch.device, sync: bool = False) -> None:
        self.device, self.sync = device, sync
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu_seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            if self.sync:
                synchronize(self.device)
            self.seconds[name] += time.perf_counter() - start
            self.cpu_seconds[name] += time.thread_time() - cpu


#: ``TTBALL_PAD_KERNELS=N`` (measurement only): each backend call adds N empty kernels on its
#: stream after its statistics, from one CUDA graph (one launch on the host, ~N µs of GPU
#: time). Whether the worker's pace follows the number of GPU operations its clients send
#: rather than their GPU time (docs/benchmarks/e2e.md: it does not, thirty-eighth session).
PAD_KERNELS_ENV = "TTBALL_PAD_KERNELS"
#: ``TTBALL_PAD_MATMULS=M`` (measurement only): M half-precision 4096 × 4096 matrix products
#: with each call, from a CUDA graph on a stream of their own (~0.14 TFLOP each, ~0.19 ms of a
#: whole H200 alone): GPU time with few operations and outside the lane's chain of work, the
#: converse of ``TTBALL_PAD_KERNELS`` -- whether the worker's pace follows the GPU time its
#: clients share.
PAD_MATMULS_ENV = "TTBALL_PAD_MATMULS"
PAD_MATMUL_SIDE = 4096


def _pad_count(name: str) -> int:
    value = os.environ.get(name, "")
    if not value:
        return 0
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name} must be a positive count, got {value!r}")
    return int(value)


class PadKernels:
    """``count`` one-element adds captured in one CUDA graph, replayed on the current stream,
    and ``matmuls`` matrix products (``side`` × ``side``, float16) in another, replayed on a
    stream of their own that waits for nothing; calling it replays both."""

    def __init__(self, count: int, device: torch.device, matmuls: int = 0,
                 side: int = PAD_MATMUL_SIDE) -> None:
        if count < 0 or matmuls < 0 or count + matmuls < 1:
            raise ValueError(f"{PAD_KERNELS_ENV} and {PAD_MATMULS_ENV} must be counts, not both "
                             f"0, got {count} and {matmuls}")
        self.count, self.matmuls = count, matmuls
        self._kernels = self._products = None
        self._x = torch.zeros(1, device=device)
        self._mats = torch.randn(3, side, side, device=device).half() if matmuls else None
        if count:
            self._kernels = capture_graph(self._adds, device,
                                          capture_error_mode="thread_local")[0]
        if matmuls:
            self._products = capture_graph(self._matmuls, device,
                                           capture_error_mode="thread_local")[0]
            self._stream = torch.cuda.Stream(device)

    def _adds(self) -> None:
        for _ in range(self.count):
            self._x.add_(0)

    def _matmuls(self) -> None:
        assert self._mats is not None  # made when matmuls > 0, the only case this is captured
        a, b, out = self._mats
        for _ in range(self.matmuls):
            torch.mm(a, b, out=out)

    @classmethod
    def from_env(cls, device: torch.device) -> PadKernels | None:
        """The environment's padding (None when unset or not on CUDA)."""
        count, matmuls = _pad_count(PAD_KERNELS_ENV), _pad_count(PAD_MATMULS_ENV)
        if not count and not matmuls:
            return None
        return cls(count, device, matmuls) if device.type == "cuda" else None

    def __call__(self) -> None:
        if self._kernels is not None:
            self._kernels.replay()
        if self._products is not None:
            with torch.cuda.stream(self._stream):
                self._products.replay()


# With overlap on CUDA, each call's time on its stream (``StageTimer`` stages, seconds): the
# stream idle or waiting since the previous call's end (for the side stream's decode and resize,
# or with nothing queued), the windows' stacking and normalisation, the network, and the
# statistics with their copy to the host. Read once the call is back, so a push's figures are
# its previous push's calls'.
GPU_STAGES = ("gpu_between", "gpu_normalize", "gpu_network", "gpu_stats")
# Their parts: the network's copy into a CUDA-graph backend's input, its graph and the copy of
# its output (with a backend that marks them: GraphedBackend.set_marker), and the statistics'
# thresholds' upload, graph, the logits' private copy and the copy to the host.
GPU_STEPS = ("gpu_net_copy_in", "gpu_net_graph", "gpu_net_copy_out", "gpu_stats_upload",
             "gpu_stats_graph", "gpu_stats_clone", "gpu_stats_to_host")


def gpu_split(marks: Sequence[tuple[str, Any]], end: Any,
              previous_end: Any | None) -> dict[str, float]:
    """Seconds of :data:`GPU_STAGES` and :data:`GPU_STEPS` from a call's timing events.

    ``marks``: ``(name, event)`` in the order queued, each event closing the step it names:
    ``start`` (before the normalisation), ``normalize``, the backend's ``net_copy_in`` and
    ``net_graph`` if it marks them, ``network`` (the backend call's end), then
    ``stats_upload``, ``stats_graph``, ``stats_clone``; ``end``: after the copy to the host
    (closes ``stats_to_host``); ``previous_end``: the previous call's ``end`` on the same stream
    (None: the first call, no ``gpu_between``). Events complete: ``elapsed_time`` is in ms."""
    named = dict(marks)

    def seconds(before: Any, after: Any) -> float:
        return before.elapsed_time(after) / 1e3

    out = {"gpu_normalize": seconds(named["start"], named["normalize"]),
           "gpu_network": seconds(named["normalize"], named["network"]),
           "gpu_stats": seconds(named["network"], end)}
    steps = [*marks, ("stats_to_host", end)]
    for (_, before), (name, after) in itertools.pairwise(steps):
        if name == "network":
            name = "net_copy_out" if "net_graph" in named else ""
        if name and name != "normalize":
            out[f"gpu_{name}"] = seconds(before, after)
    if previous_end is not None:
        out["gpu_between"] = seconds(previous_end, named["start"])
    return out

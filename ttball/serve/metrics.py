"""Prometheus metrics of one app, in the app's own :class:`CollectorRegistry`.

Where a window's time goes: ``ttball_stage_seconds{stage=...}``

- ``decode``: JPEG/PNG decode, resize and windowing of one frame (thread pool)
- ``queue``: a window waiting in the batcher (until its batch starts)
- ``gather``: a batch started on a free lane waiting for company (``--max-delay-ms``), per batch
- ``idle``: a lane's idle work (the device pipeline's flush with overlap), per call
- ``batch``: one batch as its lane's event-loop side sees it, handed to the thread → results
  back (the hand-offs included; with ``--flush-after-push`` the flush after it too)
- ``thread``: one batch on its lane's thread (with ``--flush-after-push`` the flush after it
  too): ``batch`` less ``thread`` is what the hand-offs to the thread and back cost
- ``network``: one batch on the backend, input copy and sigmoid included (backend thread)
- ``post``: post-processing and tracking of one window's three heatmaps (thread pool)

``ttball_window_seconds`` is a window's whole stay, queued → result.
``ttball_event_loop_lag_seconds`` is how late the event loop (which reads and answers every
session's messages) runs a callback due every :data:`LOOP_LAG_INTERVAL_S`: near zero while
the loop keeps up, and the time other work held it (or the interpreter lock) when it does not.
With ``--device-pipeline`` (:meth:`Metrics.watch_device`) ``ttball_push_seconds{stage=...}``
splits each GpuPipeline push (``decode``, ``preprocess``, ``network``, ``postprocess``,
``track``, ``total``). The full list with meanings is in docs/serve.md.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

if TYPE_CHECKING:
    import torch

# Latency buckets from 0.5 ms to 10 s: GPU windows take 4-15 ms (seed, section 5), CPU ~0.5 s;
# finer from 2 to 50 ms, where a GPU worker's pushes and waits lie (a p99 read off them is
# the upper edge of its bucket: scripts/serve_push_costs.py --quantiles).
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03,
    0.04, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0
)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
RATE_WINDOW_S = 10.0
# torch.cuda.memory_stats' counters that ttball_cuda_allocator_events exports
ALLOCATOR_EVENTS = ("num_device_alloc", "num_device_free", "num_alloc_retries",
                    "num_sync_all_streams")
LOOP_LAG_INTERVAL_S = 0.01  # the event loop's lag is measured this often (100 callbacks a second)
LOOP_LAG_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25,
                    0.5, 1.0)


class RateMeter:
    """Events per second over the last ``window_s`` seconds (thread-safe)."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def add(self, n: int = 1) -> None:
        with self._lock:
            self._events.append((time.monotonic(), n))

    def rate(self) -> float:
        now = time.monotonic()
        with self._lock:
            while self._events and self._events[0][0] < now - self.window_s:
                self._events.popleft()
            return sum(n for _, n in self._events) / self.window_s


class Metrics:
    """Every metric the worker exports. ``render()`` is the /metrics body."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("ttball_requests", "HTTP requests answered",
                                ["route", "method", "status"], registry=r)
        self.request_seconds = Histogram("ttball_request_seconds", "HTTP request latency",
                                         ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.window_seconds = Histogram("ttball_window_seconds",
                                        "A window's latency, queued until its result",
                                        buckets=LATENCY_BUCKETS, registry=r)
        # by the batcher's lane (--pipeline-lanes): each lane's share of the sessions shows in
        # its batches and its tail (fifty-sixth session: an 11-session replica's stay 1.0 ms
        # longer than a 10-session one's, its two lanes 5 + 6 sessions against 5 + 5)
        self.lane_stay_seconds = Histogram("ttball_lane_stay_seconds",
                                           "A job's stay, queued until its result, by lane",
                                           ["lane"], buckets=LATENCY_BUCKETS, registry=r)
        self.lane_batch_jobs = Histogram("ttball_lane_batch_jobs",
                                         "Jobs a batch, by lane (the device pipeline: uploads "
                                         "a push)", ["lane"], buckets=BATCH_BUCKETS, registry=r)
        self.stage_seconds = Histogram("ttball_stage_seconds",
                                       "Time per stage: decode, queue, gather, idle, network (per batch), post",
                                       ["stage"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("ttball_batch_size", "Windows per network call (unpadded)",
                                    buckets=BATCH_BUCKETS, registry=r)
        self.batch_padding = Counter("ttball_batch_padding",
                                     "Padding slots added to reach a warmed batch size",
                                     registry=r)
        self.queue_depth = Gauge("ttball_queue_depth", "Windows waiting for the network",
                                 registry=r)
        self.frames = Counter("ttball_frames", "Frames accepted", registry=r)
        self.windows = Counter("ttball_windows", "Windows run through the network", registry=r)
        self._frame_rate = RateMeter()
        Gauge("ttball_frames_per_second", f"Frames accepted per second, last {RATE_WINDOW_S:g} s",
              registry=r).set_function(self._frame_rate.rate)
        self.sessions = Gauge("ttball_sessions", "Open sessions", registry=r)
        self.session_events = Counter("ttball_session_events",
                                      "Sessions created, finished, deleted, expired, disconnected",
                                      ["event"], registry=r)
        self.errors = Counter("ttball_errors", "Errors answered, by code", ["kind"], registry=r)
        self.ready = Gauge("ttball_ready", "1 once warm-up (and verification) succeeded",
                           registry=r)
        self.startup_seconds = Gauge(
            "ttball_startup_seconds", "Start-up time per phase: load, choose, build, warmup (the "
            "network's), pipeline (the device pipeline's decoder waited for, its set-up), "
            "pipeline_warmup, verify, total",
            ["phase"], registry=r)
        self.warmup_seconds = Gauge("ttball_warmup_seconds",
                                    "Warm-up (compile) time per batch size", ["batch"], registry=r)
        self.loop_lag = Histogram("ttball_event_loop_lag_seconds",
                                  "How late the event loop ran a callback due every "
                                  f"{LOOP_LAG_INTERVAL_S * 1e3:g} ms", buckets=LOOP_LAG_BUCKETS,
                                  registry=r)
        self.info = Info("ttball_worker", "Backend, device and weights of this worker",
                         registry=r)
        self._gpu: list[Gauge] = []
        self.push_seconds: Histogram | None = None
        self.push_cpu_seconds: Counter | None = None
        self.push_frames: Histogram | None = None
        self.heatmaps: Counter | None = None
        self.decode_ahead: Counter | None = None
        self.arrival_frames: Counter | None = None
        self.arrival_batch_seconds: Histogram | None = None
        self.arrival_batch_frames: Histogram | None = None
        self.windows_carried: Counter | None = None
        self.flush_seconds: Counter | None = None

    def note_arrival_batch(self, frames: int, seconds: float) -> None:
        """``--decode-on-arrival``: one decode batch of the arrival decoder (its thread)."""
        assert self.arrival_batch_seconds is not None and self.arrival_batch_frames is not None
        self.arrival_batch_seconds.observe(seconds)
        self.arrival_batch_frames.observe(frames)

    def note_batch(self, n: int, size: int, seconds: float | None = None) -> None:
        """One network call of ``n`` windows padded to ``size`` (``seconds``: its time)."""
        if seconds is not None:
            self.stage_seconds.labels("network").observe(seconds)
        self.batch_size.observe(n)
        self.batch_padding.inc(size - n)
        self.windows.inc(n)

    def frame_accepted(self, n: int = 1) -> None:
        self.frames.inc(n)
        self._frame_rate.add(n)

    async def watch_loop(self, interval_s: float = LOOP_LAG_INTERVAL_S) -> None:
        """Until cancelled: sleep ``interval_s`` on the running loop and observe how much later
        than due it woke (``ttball_event_loop_lag_seconds``)."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + interval_s
            await asyncio.sleep(interval_s)
            self.loop_lag.observe(max(0.0, loop.time() - due))

    def watch_cuda(self, device: torch.device) -> None:
        """Export the CUDA caching allocator's memory (read at scrape time)."""
        import torch

        if self._gpu or not torch.cuda.is_available():
            return
        gauge = Gauge("ttball_gpu_memory_bytes", "CUDA memory of this process", ["kind"],
                      registry=self.registry)
        readers = {
            "allocated": torch.cuda.memory_allocated,
            "reserved": torch.cuda.memory_reserved,
            "max_allocated": torch.cuda.max_memory_allocated,
        }
        for kind, read in readers.items():
            gauge.labels(kind).set_function(functools.partial(_reading, read, device))
        self._gpu.append(gauge)
        events = Gauge("ttball_cuda_allocator_events", "The CUDA caching allocator's events "
                       "so far: cudaMalloc and cudaFree calls (a cudaFree waits for the "
                       "device), retries after a failed allocation (each frees the cache), "
                       "synchronizations of every stream", ["event"], registry=self.registry)
        for event in ALLOCATOR_EVENTS:
            events.labels(event).set_function(functools.partial(_allocator_event, device, event))
        self._gpu.append(events)

    def watch_device(self) -> None:
        """The device pipeline's metrics (``--device-pipeline`` only)."""
        if self.push_seconds is not None:
            return
        r = self.registry
        self.push_seconds = Histogram(
            "ttball_push_seconds", "Device pipeline: seconds per push, by stage (GPU work is "
            "asynchronous: it lands on the stage that waits for it)", ["stage"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.push_cpu_seconds = Counter(
            "ttball_push_cpu_seconds", "Device pipeline: the lane thread's CPU seconds in "
            "pushes, by stage (against ttball_push_seconds' sums: the rest of a stage's wall "
            "time the thread spent off the CPU, waiting for the device, a decode child or the "
            "interpreter lock)", ["stage"], registry=r)
        self.push_frames = Histogram("ttball_push_frames", "Device pipeline: frames per push",
                                     buckets=(1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 384, 512),
                                     registry=r)
        self.heatmaps = Counter("ttball_heatmaps", "Device pipeline: heatmaps post-processed on "
                                "the device, or on the host (the exact fallback)", ["where"],
                                registry=r)
        self.decode_ahead = Counter("ttball_decode_ahead", "Device pipeline, --decode-ahead: "
                                    "decodes started a push ahead, taken by the next push (hit) "
                                    "or dropped (miss)", ["result"], registry=r)
        self.arrival_frames = Counter("ttball_arrival_frames", "Device pipeline, "
                                      "--decode-on-arrival: pushed frames by where they were "
                                      "decoded: on arrival, or by their push (queued while it "
                                      "was off, or a frame of their upload did not decode)",
                                      ["where"], registry=r)
        self.arrival_batch_seconds = Histogram(
            "ttball_arrival_batch_seconds", "Device pipeline, --decode-on-arrival: a decode "
            "batch of the arrival decoder, from its call to its decode's end on the GPU",
            buckets=LATENCY_BUCKETS, registry=r)
        self.arrival_batch_frames = Histogram(
            "ttball_arrival_batch_frames", "Device pipeline, --decode-on-arrival: frames a "
            "decode batch of the arrival decoder", buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64),
            registry=r)
        self.windows_carried = Counter("ttball_windows_carried", "Device pipeline, "
                                       "--carry-windows (default): windows a push whose calls "
                                       "were full left to the next push's calls", registry=r)
        self.flush_seconds = Counter(
            "ttball_flush_seconds", "Device pipeline, --pipeline-overlap: the flushes' seconds "
            "by stage (FLUSH_STAGES: wait, the GPU wait outside the pipeline's lock with "
            "--flush-thread; post_wait, the GPU wait in the read-back; post_read; track; "
            "gpu_*, the GPU time of the calls read back, from their events on CUDA; call, the "
            "whole flush on its thread, lock waits included; call_cpu, that thread's CPU "
            "time in it)",
            ["stage"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _reading(read: Callable[[torch.device], int], device: torch.device) -> float:
    return float(read(device))


def _allocator_event(device: torch.device, event: str) -> float:
    import torch

    return float(torch.cuda.memory_stats(device).get(event, 0))

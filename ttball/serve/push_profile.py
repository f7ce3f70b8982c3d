"""A few of one lane's pushes under :mod:`torch.profiler`, in a running worker (measurement).

``TTBALL_PROFILE_PUSHES=FIRST:COUNT:DIR`` in a worker's environment (under ``serve --ray``
every replica inherits it): the first lane, of any process, to reach its ``FIRST``-th push
claims ``DIR`` (one profile a folder however many replicas and lanes share it), runs its next
``COUNT`` pushes under the profiler (CPU and, on a GPU, CUDA activity: the process's own
kernels and copies; another MPS client's are not seen) and writes ``DIR/trace.json.gz`` (a
Chrome trace) and ``DIR/summary.json`` (:func:`summarize`). The other lanes run as before.
Unset, nothing changes and nothing is imported. With ``TTBALL_PROFILE_STACK=1`` as well the
profiler also records every Python call (``with_stack``: ``python_function`` events in the
trace, the lane's Python time by function in ``scripts/push_profile_report.py --python``). It
records every thread of the process, not only the lane's, so it slows the whole worker: on a
replica serving 16 of a load test's 64 sessions, 30 pushes with stacks made a 180 MB trace
and the replica fell behind (``docs/benchmarks/h100-2026-12-05d/``); profile a few pushes
with it.

The files are written under temporary names and renamed when complete
(:func:`ttball.results.atomic_write`): a worker stopped while writing leaves no cut
``trace.json.gz``.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ttball.results import atomic_write

ENV = "TTBALL_PROFILE_PUSHES"
STACK_ENV = "TTBALL_PROFILE_STACK"
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")

__all__ = ["ENV", "STACK_ENV", "PushProfiler", "chrome_trace", "gpu_operations", "summarize"]


def chrome_trace(profile: Any) -> dict[str, Any]:
    """A finished ``torch.profiler.profile``'s events as a Chrome trace (its JSON, read back
    from a temporary file: the profiler only exports to a path)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        profile.export_chrome_trace(str(raw))
        return json.loads(raw.read_text())


def gpu_operations(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """A Chrome trace's GPU operations: its kernels, copies and memsets (:data:`GPU_CATEGORIES`)."""
    return [e for e in trace.get("traceEvents", [])
            if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]


class PushProfiler:
    """Counts a lane's pushes; profiles ``count`` of them from the ``first``-th if it claims
    ``folder`` first."""

    def __init__(self, first: int, count: int, folder: Path, stack: bool = False) -> None:
        if first < 1 or count < 1:
            raise ValueError(f"{ENV}: FIRST and COUNT must be >= 1, got {first}:{count}")
        self.first, self.count, self.folder, self.stack = first, count, folder, stack
        self.pushes = 0
        self._profile: Any = None
        self.written: Path | None = None

    @classmethod
    def from_env(cls) -> PushProfiler | None:
        """The environment's profiler (None when ``TTBALL_PROFILE_PUSHES`` is unset)."""
        value = os.environ.get(ENV, "")
        if not value:
            return None
        try:
            first, count, folder = value.split(":", 2)
            return cls(int(first), int(count), Path(folder),
                       stack=os.environ.get(STACK_ENV, "") == "1")
        except ValueError as exc:
            raise ValueError(f"{ENV} must be FIRST:COUNT:DIR, got {value!r} ({exc})") from None

    def _claim(self) -> bool:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.folder / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True

    @contextmanager
    def push(self) -> Iterator[None]:
        """Around one push of the lane."""
        self.pushes += 1
        if self.pushes == self.first and self._claim():
            import torch

            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profile = torch.profiler.profile(activities=activities, with_stack=self.stack)
            self._profile.__enter__()
        try:
            yield
        finally:
            if self._profile is not None and self.pushes == self.first + self.count - 1:
                self._finish()

    def _finish(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        profile, self._profile = self._profile, None
        profile.__exit__(None, None, None)
        trace = chrome_trace(profile)
        with atomic_write(self.folder / "trace.json.gz", "wb") as raw, \
                gzip.open(raw, "wt") as f:
            json.dump(trace, f)
        summary = summarize(trace)
        summary["pushes"] = self.count
        with atomic_write(self.folder / "summary.json") as f:
            f.write(json.dumps(summary, indent=1))
        self.written = self.folder


def summarize(trace: dict[str, Any], top: int = 25) -> dict[str, Any]:
    """A Chrome trace's GPU work: per CUDA stream, its operations, the µs they ran (``busy``),
    the µs from the first one's start to the last one's end (``span``) and the largest gap
    between two of them; the ``top`` operation names by total µs (count, total, mean, and the
    stream they ran on)."""
    ops = gpu_operations(trace)
    by_stream: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for op in ops:
        by_stream[op.get("args", {}).get("stream")].append(op)
    streams = {}
    for stream, events in by_stream.items():
        events.sort(key=lambda e: e["ts"])
        ends = [e["ts"] + e["dur"] for e in events]
        gaps = [b["ts"] - a_end for a_end, b in zip(ends, events[1:])]
        streams[str(stream)] = {"ops": len(events), "busy_us": round(sum(e["dur"] for e in events), 1),
                                "span_us": round(max(ends) - events[0]["ts"], 1),
                                "largest_gap_us": round(max(gaps, default=0.0), 1)}
    names: dict[str, dict[str, Any]] = {}
    for op in ops:
        entry = names.setdefault(op["name"], {"count": 0, "total_us": 0.0,
                                              "stream": op.get("args", {}).get("stream")})
        entry["count"] += 1
        entry["total_us"] += op["dur"]
    ranked = sorted(names.items(), key=lambda kv: -kv[1]["total_us"])[:top]
    return {"streams": streams,
            "top": [{"name": name[:120], **v, "total_us": round(v["total_us"], 1),
                     "mean_us": round(v["total_us"] / v["count"], 2)} for name, v in ranked]}

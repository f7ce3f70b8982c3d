"""Whole videos: decode → windows → backend (batched) → post-processing → tracker → rows.

:func:`infer_windows` is the one place where windows meet a backend; the server's batcher
calls it too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from ttball.backends import Backend, config_of, create, resolve_device
from ttball.backends.base import cache_options
from ttball.errors import UserError, VideoError
from ttball.frames import FrameSource, SourceInfo, normalize
from ttball.model import BlurBall, load_model
from ttball.model.config import WeightsConfig
from ttball.results import FrameResult
from ttball.stream import FrameStream, StreamOptions, Window

MIN_FRAMES = 3


def infer_windows(backend: Backend, windows: Sequence[Window], config: WeightsConfig) -> np.ndarray:
    """Run windows through ``backend``: probabilities ``(B, 3, h, w)`` float32 on the CPU."""
    stacked = torch.from_numpy(np.stack([w.pixels for w in windows]))
    device = backend.device
    if device.type == "cuda":
        stacked = stacked.pin_memory().to(device, non_blocking=True)
    logits = backend(normalize(stacked, config))
    return torch.sigmoid(logits).float().cpu().numpy()


@dataclass
class TrackResult:
    """What :func:`track` returns: one row per decoded frame, and how the run went."""

    rows: list[FrameResult]
    source: SourceInfo
    weights: WeightsConfig
    settings: dict[str, Any]
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def visible_fraction(self) -> float:
        return sum(r.visible for r in self.rows) / max(len(self.rows), 1)

    def summary(self) -> dict[str, Any]:
        return {
            "frames": len(self.rows),
            "visible_pct": round(100 * self.visible_fraction, 1),
            "frames_per_s": round(self.timing.get("frames_per_s", 0.0), 1),
            "corrupt_frames": len(self.source.corrupt_frames),
            "other_size_frames": len(self.source.other_size_frames),
            "device": self.settings.get("device"),
            "backend": self.settings.get("backend"),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "source": asdict(self.source),
            "weights": asdict(self.weights),
            "settings": self.settings,
            "timing": self.timing,
            "summary": self.summary(),
        }


def _resolve_backend(
    backend: str | Backend, weights: str | os.PathLike[str] | None, device: str,
    model: BlurBall | None, cache_dir: str | os.PathLike[str] | None = None,
) -> tuple[Backend, WeightsConfig]:
    if model is not None and not isinstance(model, BlurBall):
        raise TypeError(f"model must be a loaded BlurBall (ttball.load_model), got "
                        f"{type(model).__name__}; a checkpoint's path goes in weights=")
    if weights is not None and (model is not None or not isinstance(backend, str)):
        raise UserError("weights= builds the network, so it goes without model= and without a "
                        "ready backend (which bring their own)")
    if not isinstance(backend, str):
        if not callable(backend):
            raise TypeError(f"backend must be a registry name or a ready Backend, got "
                            f"{type(backend).__name__}")
        # the backend's own model's settings (size, threshold, name) unless model= says them
        return backend, model.config if model is not None else config_of(backend)
    dev = resolve_device(device)
    net = model if model is not None else load_model(weights, device="cpu")
    return create(backend, net, dev, **cache_options(backend, cache_dir)), net.config


def track(
    video: str | os.PathLike[str],
    *,
    weights: str | os.PathLike[str] | None = None,
    model: BlurBall | None = None,
    backend: str | Backend = "eager-fp32",
    device: str = "auto",
    step: int = 3,
    threshold: float | None = None,
    batch: int = 1,
    dedup_ssim: float | None = None,
    on_frames: Callable[[int], None] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> TrackResult:
    """Track the ball in a video file or a folder of images; one :class:`FrameResult` per frame.

    ``backend`` is a registry name (built around ``model`` or the weights at ``weights``, or
    the default weights) or a ready :class:`Backend`. ``on_frames(n)`` is called as frames
    finish (for progress bars). ``cache_dir``: where a backend by name that keeps compiled
    kernels or tuning records on disk keeps them (``track --compile-cache``).
    """
    if batch < 1:
        raise UserError(f"batch must be at least 1, got {batch}")
    try:
        options = StreamOptions(step=step, threshold=threshold, dedup_ssim=dedup_ssim)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    source = FrameSource(video)
    runner, config = _resolve_backend(backend, weights, device, model, cache_dir)
    stream = FrameStream(config, options, stream_id=str(video))
    rows: list[FrameResult] = []
    pending: list[Window] = []
    clock = {"decode": 0.0, "network": 0.0, "post": 0.0}

    def flush(windows: list[Window]) -> None:
        start = time.perf_counter()
        probs = infer_windows(runner, windows, config)
        clock["network"] += time.perf_counter() - start
        start = time.perf_counter()
        for window, p in zip(windows, probs):
            done = stream.complete(window, p)
            rows.extend(done)
            if on_frames and done:
                on_frames(len(done))
        clock["post"] += time.perf_counter() - start

    started = time.perf_counter()
    frames = iter(source)
    while True:
        t0 = time.perf_counter()
        frame = next(frames, None)
        if frame is None:
            break
        pending.extend(stream.push(frame))
        clock["decode"] += time.perf_counter() - t0
        if len(pending) >= batch:
            flush(pending[:batch])
            pending = pending[batch:]
    if stream.frames_in < MIN_FRAMES:
        raise VideoError(
            f"{video}: {stream.frames_in} readable frame(s); at least {MIN_FRAMES} are needed"
        )
    pending.extend(stream.finish())
    while pending:
        flush(pending[:batch])
        pending = pending[batch:]
    rows.extend(stream.drain())
    elapsed = time.perf_counter() - started
    settings = {
        "backend": getattr(runner, "name", str(backend)),
        "device": str(runner.device),
        "step": step,
        "threshold": stream.threshold,
        "batch": batch,
        "dedup_ssim": dedup_ssim,
        "max_jump_px": options.max_jump_px,
    }
    timing = {
        "seconds": elapsed,
        "frames_per_s": len(rows) / elapsed if elapsed > 0 else 0.0,
        "windows": stream.windows_out,
        "duplicates": stream.duplicates,
        "decode_s": clock["decode"],
        "network_s": clock["network"],
        "post_s": clock["post"],
    }
    return TrackResult(rows, source.info, config, settings, timing)

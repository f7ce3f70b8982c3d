"""ttball: fast, verified inference for the BlurBall table-tennis ball detector.

The public API (imported lazily, so ``ttball --help`` stays fast)::

    ttball.BlurBall()                       # the network
    ttball.load_model(path=None, device=)   # a checkpoint, or the default weights
    ttball.track(video, ...)                # per-frame results for a video or image folder
    ttball.detect(prob, geometry)           # post-processing of one heatmap
    ttball.OnlineTracker()                  # the tracker
    ttball.FrameStream(config)              # the online frames → windows → results state
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "BlurBall": "ttball.model",
    "WeightsConfig": "ttball.model",
    "load_model": "ttball.model",
    "load_checkpoint": "ttball.model",
    "save_checkpoint": "ttball.model",
    "track": "ttball.pipeline",
    "TrackResult": "ttball.pipeline",
    "infer_windows": "ttball.pipeline",
    "detect": "ttball.postprocess",
    "detect_logits": "ttball.postprocess",
    "Detection": "ttball.postprocess",
    "FrameGeometry": "ttball.postprocess",
    "OnlineTracker": "ttball.tracker",
    "FrameStream": "ttball.stream",
    "StreamOptions": "ttball.stream",
    "FrameResult": "ttball.results",
    "FrameSource": "ttball.frames",
    "preprocess": "ttball.frames",
}

__all__ = [
    "BlurBall",
    "Detection",
    "FrameGeometry",
    "FrameResult",
    "FrameSource",
    "FrameStream",
    "OnlineTracker",
    "StreamOptions",
    "TrackResult",
    "WeightsConfig",
    "__version__",
    "detect",
    "detect_logits",
    "infer_windows",
    "load_checkpoint",
    "load_model",
    "preprocess",
    "save_checkpoint",
    "track",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ttball' has no attribute {name!r}")

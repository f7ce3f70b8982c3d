"""``ttball serve``: the real-time ball worker (FastAPI + uvicorn).

Layout::

    settings.py  ServeSettings, the one dataclass the CLI fills and create_app() reads
    app.py       create_app(settings): routes for /v1 (sessions, track), health, metrics, web page
    sessions.py  frame bodies → decoded frames; a session = one FrameStream; the session store
    batcher.py   dynamic batching of windows from every session onto the one backend
    device.py    --device-pipeline: sessions' JPEG bytes through one GpuPipeline (decode to rows)
    oip.py       the Open Inference Protocol (KServe v2 / Triton HTTP) for the raw network
    metrics.py   Prometheus metrics in a per-app registry

FastAPI and uvicorn are imported only by this package (GPU hosts may lack them); nothing is read
at import. ``from ttball.serve import create_app, ServeSettings`` loads them lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ServeSettings": "ttball.serve.settings",
    "ApiError": "ttball.serve.settings",
    "create_app": "ttball.serve.app",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ttball.serve' has no attribute {name!r}")

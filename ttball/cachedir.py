"""Where ttball keeps what it builds once per machine: ``$TTBALL_CACHE_DIR``, else
``~/.cache/ttball`` (exported ONNX files, ``--backend auto``'s choice, the CUDA kernels'
library)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache's root folder (not created here)."""
    return Path(os.environ.get("TTBALL_CACHE_DIR") or Path.home() / ".cache" / "ttball")

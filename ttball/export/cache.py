"""Exported files cached on disk, keyed by what determines their content.

A backend that runs an exported file (ONNX Runtime, OpenVINO) asks :func:`cached_onnx` for it:
the first call exports (and for INT8, calibrates), later calls with the same weights, size,
precision and calibration data reuse the file. The key holds the weights' sha256 computed from
the tensors themselves, the input size, the precision, the export settings, and the ttball and
torch versions; session options are not part of it (they don't change the file).

The directory is ``cache_dir`` if given, else ``$TTBALL_CACHE_DIR``, else ``~/.cache/ttball``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ttball.cachedir import part_path
from ttball.errors import UserError
from ttball.export.onnx import export_onnx
from ttball.model.config import WeightsConfig
from ttball.model.weights import state_dict_sha256

PRECISIONS = ("fp32", "fp16", "int8")
Clip = str | os.PathLike[str]


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory exported files go to (created if missing)."""
    root = part_path("onnx", cache_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create cache directory {root}: {exc.strerror or exc}") from None
    return root


def _digest(parts: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def calibration_key(clips: Sequence[Clip] = (), windows: Sequence[np.ndarray] = ()) -> str:
    """Identifies calibration data: each clip by path, size and mtime; arrays by their bytes."""
    h = hashlib.sha256()
    for clip in clips:
        st = Path(clip).stat()
        h.update(f"{Path(clip).resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    for w in windows:
        h.update(np.ascontiguousarray(w, np.float32).tobytes())
    return h.hexdigest()


def cached_onnx(
    model: nn.Module,
    *,
    height: int,
    width: int,
    precision: str = "fp32",
    cache_dir: str | os.PathLike[str] | None = None,
    calibrate: Sequence[Clip] = (),
    windows: Sequence[np.ndarray] = (),
    method: str | None = None,
) -> Path:
    """The exported file for ``model`` at ``height``×``width`` (dynamic batch), made if missing.

    ``int8`` is calibrated on ``calibrate`` (video clips) or ``windows`` (preprocessed
    ``(1, 9, H, W)`` arrays); with neither, on :func:`~ttball.export.quantize.synthetic_windows`.
    """
    from ttball import __version__
    from ttball.export.quantize import (
        DEFAULT_METHOD,
        SYNTHETIC_CLIPS,
        calibration_windows,
        quantize_int8,
        synthetic_windows,
    )

    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    root = cache_root(cache_dir)
    base = {"weights": state_dict_sha256(model.state_dict()), "size": [height, width],
            "ttball": __version__, "torch": torch.__version__, "exporter": "dynamo",
            "dynamic_batch": True}
    fp32 = root / f"blurball-fp32-{height}x{width}-{_digest(base)[:16]}.onnx"
    if not fp32.exists():
        export_onnx(model, fp32, dynamic_batch=True, height=height, width=width)
    if precision == "fp32":
        return fp32
    if precision == "fp16":
        path = root / f"blurball-fp16-{height}x{width}-{_digest({**base, 'fp16': True})[:16]}.onnx"
        if not path.exists():
            export_onnx(model, path, fp16=True, fold_bn=True, dynamic_batch=True,
                        height=height, width=width)
        return path
    method = method or DEFAULT_METHOD
    data_key = (calibration_key(calibrate, windows) if calibrate or windows
                else f"synthetic-v1-{SYNTHETIC_CLIPS}")
    key = _digest({**base, "int8": data_key, "method": method})
    path = root / f"blurball-int8-{height}x{width}-{key[:16]}.onnx"
    if not path.exists():
        config = getattr(model, "config", None) or WeightsConfig()
        if windows:
            data = list(windows)
        elif calibrate:
            data = calibration_windows(calibrate, config, height, width)
        else:
            data = synthetic_windows(config, height, width)
        quantize_int8(fp32, path, data, method=method)
    return path

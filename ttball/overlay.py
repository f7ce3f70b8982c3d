"""An MP4 of the source with the ball, its blur streak and a short fading trail drawn on it."""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from ttball.errors import UserError
from ttball.frames import FrameSource
from ttball.results import FrameResult

BALL_BGR = (0, 215, 255)   # amber
BLUR_BGR = (255, 80, 255)  # magenta
TRAIL_BGR = (0, 140, 255)


def draw(bgr: np.ndarray, row: FrameResult | None, trail: Sequence[tuple[float, float]]) -> None:
    """Draw in place on a BGR frame: trail (oldest faintest), blur streak, ball ring."""
    scale = max(bgr.shape[0] / 720.0, 0.5)
    for i, (x, y) in enumerate(trail):
        alpha = (i + 1) / (len(trail) + 1)
        color = tuple(int(c * alpha) for c in TRAIL_BGR)
        cv2.circle(bgr, (round(x), round(y)), max(1, round(3 * scale)), color, -1, cv2.LINE_AA)
    if row is None or not row.visible:
        return
    theta = math.radians(row.blur_angle_deg)
    dx, dy = math.cos(theta) * row.blur_length_px, math.sin(theta) * row.blur_length_px
    p0 = (round(row.x - dx), round(row.y - dy))
    p1 = (round(row.x + dx), round(row.y + dy))
    cv2.line(bgr, p0, p1, BLUR_BGR, max(1, round(2 * scale)), cv2.LINE_AA)
    cv2.circle(bgr, (round(row.x), round(row.y)), max(4, round(9 * scale)), BALL_BGR,
               max(1, round(2 * scale)), cv2.LINE_AA)


def write_overlay(
    source: str | os.PathLike[str], rows: Sequence[FrameResult], out: str | os.PathLike[str],
    trail: int = 12,
) -> Path:
    """Re-read ``source`` and write the annotated video to ``out`` (atomically)."""
    out = Path(out)
    src = FrameSource(source)
    by_frame = {r.frame: r for r in rows}
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    fourcc = cv2.VideoWriter.fourcc(*"mp4v")
    writer = cv2.VideoWriter(str(tmp), fourcc, src.info.fps, (src.info.width, src.info.height))
    if not writer.isOpened():
        raise UserError(f"cannot write video {out}")
    recent: deque[tuple[float, float]] = deque(maxlen=trail)
    try:
        for frame in src:
            bgr = cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2BGR)
            row = by_frame.get(frame.index)
            draw(bgr, row, list(recent))
            if row is not None and row.visible:
                recent.append((row.x, row.y))
            writer.write(bgr)
        writer.release()
        os.replace(tmp, out)
    finally:
        writer.release()
        tmp.unlink(missing_ok=True)
    return out

"""An MP4 of the source with the ball, its blur streak and a short fading trail drawn on it.

Encoded as H.264 (PyAV's libx264, yuv420p, the index at the front) so browsers and phones play
it; where PyAV or its H.264 encoder is missing, or a frame side is odd (4:2:0 needs even
ones), as MPEG-4 Part 2 by OpenCV, which most browsers do not play. On the 2-core
development CPU, the real rally's 117 frames of 1280×720, encoding alone: libx264 at preset
veryfast 123-130 frames/s and 566 KB, OpenCV's mp4v 332-335 frames/s and 1,797 KB
(forty-sixth session, `PYTHONPATH=. python scripts/overlay_encode_rate.py
../shared/data/real_rally_a.mp4`; the overlay follows the tracking, 13-43 frames/s there).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import deque
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol

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


class _Writer(Protocol):
    def write(self, bgr: np.ndarray) -> None: ...

    def close(self) -> None: ...


class _H264Writer:
    """H.264 through PyAV (libx264): ``write`` BGR frames, then ``close`` (flushes)."""

    def __init__(self, path: Path, fps: float, width: int, height: int) -> None:
        import av

        self._av = av
        self._out: Any = av.open(str(path), "w", format="mp4",
                                 options={"movflags": "+faststart"})
        try:
            self._stream: Any = self._out.add_stream(
                "libx264", rate=Fraction(fps).limit_denominator(1001) if fps > 0 else 30)
            self._stream.width, self._stream.height = width, height
            self._stream.pix_fmt = "yuv420p"
            self._stream.options = {"preset": "veryfast", "crf": "20"}
        except BaseException:
            self._out.close()
            raise

    def write(self, bgr: np.ndarray) -> None:
        frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(bgr), format="bgr24")
        for packet in self._stream.encode(frame):
            self._out.mux(packet)

    def close(self) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        try:
            for packet in self._stream.encode():  # the encoder's delayed frames
                out.mux(packet)
        finally:
            out.close()


class _Mpeg4Writer:
    """MPEG-4 Part 2 through OpenCV (``mp4v``), the fallback."""

    def __init__(self, path: Path, fps: float, width: int, height: int) -> None:
        self._writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), fps,
                                       (width, height))
        if not self._writer.isOpened():
            raise OSError(f"OpenCV cannot open {path} for writing")

    def write(self, bgr: np.ndarray) -> None:
        self._writer.write(bgr)

    def close(self) -> None:
        self._writer.release()


def h264_available() -> bool:
    """Whether PyAV and its libx264 encoder are installed."""
    try:
        import av

        av.codec.Codec("libx264", "w")
    except Exception:  # noqa: BLE001  (ImportError, or PyAV built without libx264)
        return False
    return True


def _open(path: Path, fps: float, width: int, height: int, codec: str) -> _Writer:
    """A writer of ``codec`` ("auto": H.264 where it can, else MPEG-4 Part 2)."""
    if codec == "auto":
        codec = "h264" if h264_available() and width % 2 == 0 and height % 2 == 0 else "mpeg4"
    if codec == "h264":
        return _H264Writer(path, fps, width, height)
    return _Mpeg4Writer(path, fps, width, height)


def write_overlay(
    source: str | os.PathLike[str], rows: Sequence[FrameResult], out: str | os.PathLike[str],
    trail: int = 12, codec: str = "auto",
) -> Path:
    """Re-read ``source`` and write the annotated video to ``out`` (atomically). ``codec``:
    ``"h264"`` (PyAV), ``"mpeg4"`` (OpenCV) or ``"auto"`` (H.264 where PyAV has libx264 and
    the frame's sides are even, else MPEG-4 Part 2)."""
    out = Path(out)
    src = FrameSource(source)
    by_frame = {r.frame: r for r in rows}
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    recent: deque[tuple[float, float]] = deque(maxlen=trail)
    writer: _Writer | None = None
    try:
        # PyAV opens the file at its first packet: a folder that is missing or read-only, or a
        # full disk, shows up while writing, as an OSError like OpenCV's at opening
        writer = _open(tmp, src.info.fps, src.info.width, src.info.height, codec)
        for frame in src:
            bgr = cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2BGR)
            row = by_frame.get(frame.index)
            draw(bgr, row, list(recent))
            if row is not None and row.visible:
                recent.append((row.x, row.y))
            writer.write(bgr)
        writer.close()
        os.replace(tmp, out)
    except OSError as exc:
        raise UserError(f"cannot write video {out}: {exc.strerror or exc}") from None
    finally:
        if writer is not None:
            with contextlib.suppress(Exception):  # after a failure: the file is deleted anyway
                writer.close()
        tmp.unlink(missing_ok=True)
    return out

"""The overlay video: H.264 where PyAV has libx264 (browsers play it), MPEG-4 Part 2 otherwise."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import draw_clip

from ttball.errors import UserError
from ttball.overlay import h264_available, write_overlay
from ttball.results import FrameResult


def _codec(path: Path) -> str:
    cap = cv2.VideoCapture(str(path))
    try:
        code = int(cap.get(cv2.CAP_PROP_FOURCC))
        return "".join(chr((code >> 8 * i) & 0xFF) for i in range(4)).lower()
    finally:
        cap.release()


def _frames(path: Path) -> list:
    cap = cv2.VideoCapture(str(path))
    out = []
    while True:
        ok, bgr = cap.read()
        if not ok:
            return out
        out.append(bgr)


def _rows(centres: list[tuple[float, float]]) -> list[FrameResult]:
    return [FrameResult(frame=i, time_s=i / 30, visible=True, x=x, y=y, blur_angle_deg=0.0,
                        blur_length_px=4.0, score=0.9) for i, (x, y) in enumerate(centres)]


@pytest.mark.skipif(not h264_available(), reason="PyAV with libx264 not installed")
def test_it_is_h264_with_every_frame_and_the_ball_drawn(tmp_path: Path) -> None:
    src = tmp_path / "clip.mp4"
    centres = draw_clip(src, frames=10)
    out = write_overlay(src, _rows(centres), tmp_path / "overlay.mp4")
    assert _codec(out) in ("avc1", "h264")
    frames = _frames(out)
    assert len(frames) == 10 and frames[0].shape == (180, 320, 3)
    # the amber ring around the last centre: more amber there than in the source's frame
    x, y = (round(v) for v in centres[-1])
    ring = frames[-1][max(0, y - 12):y + 12, max(0, x - 12):x + 12].astype(int)
    amber = (ring[..., 2] > 180) & (ring[..., 1] > 140) & (ring[..., 0] < 100)
    assert amber.sum() > 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4", "overlay.mp4"]


def test_odd_sides_and_the_fallback_write_mpeg4(tmp_path: Path) -> None:
    """4:2:0 H.264 needs even sides: an odd-sized source (a folder of images) is written by
    OpenCV (mp4v); so is any source with ``codec="mpeg4"``."""
    folder = tmp_path / "odd"
    folder.mkdir()
    for i in range(6):
        cv2.imwrite(str(folder / f"{i:03d}.png"), np.full((91, 161, 3), 40 * i, np.uint8))
    out = write_overlay(folder, [], tmp_path / "odd-overlay.mp4")
    assert _codec(out) in ("mp4v", "fmp4") and len(_frames(out)) == 6
    src = tmp_path / "clip.mp4"
    centres = draw_clip(src, frames=6)
    forced = write_overlay(src, _rows(centres), tmp_path / "forced.mp4", codec="mpeg4")
    assert _codec(forced) in ("mp4v", "fmp4") and len(_frames(forced)) == 6


def test_an_unwritable_place_is_a_user_error_and_leaves_nothing(tmp_path: Path) -> None:
    src = tmp_path / "clip.mp4"
    draw_clip(src, frames=4)
    with pytest.raises(UserError, match="cannot write video"):
        write_overlay(src, [], tmp_path / "missing" / "overlay.mp4")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]

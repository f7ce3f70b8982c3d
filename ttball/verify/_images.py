"""Pictures of the worst frames: reference and candidate side by side, each a crop of the
network-size frame around the ball with that side's heatmap overlaid, and both detections
marked on both (reference: yellow ring, candidate: magenta cross)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from ttball.postprocess import Detection
from ttball.results import atomic_write
from ttball.verify._compare import Keeper

HALF = 40  # crop half-size in heatmap pixels (80×80 of 512×288: a ball and its surroundings)
ZOOM = 4
REF_BGR, CAND_BGR, TEXT_BGR = (0, 255, 255), (255, 60, 255), (255, 255, 255)


def _to_heatmap(d: Detection, k: Keeper) -> tuple[float, float]:
    sx, sy = k.geometry.scale
    return (d.x + 0.5) / sx - 0.5, (d.y + 0.5) / sy - 0.5


def _centre(k: Keeper) -> tuple[float, float]:
    for d in (k.pair.ref, k.pair.cand):
        if d is not None:
            return _to_heatmap(d, k)
    v, u = np.unravel_index(int(np.argmax(k.ref_prob)), k.ref_prob.shape)
    return float(u), float(v)


def _box(k: Keeper) -> tuple[int, int, int, int]:
    h, w = k.ref_prob.shape
    cu, cv = _centre(k)
    left = int(np.clip(round(cu) - HALF, 0, max(w - 2 * HALF, 0)))
    top = int(np.clip(round(cv) - HALF, 0, max(h - 2 * HALF, 0)))
    return left, top, min(left + 2 * HALF, w), min(top + 2 * HALF, h)


def _panel(k: Keeper, prob: np.ndarray, title: str, box: tuple[int, int, int, int]) -> np.ndarray:
    left, top, right, bottom = box
    rgb = k.rgb[:, top:bottom, left:right].transpose(1, 2, 0)
    base = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR).astype(np.float32)
    p = np.nan_to_num(prob[top:bottom, left:right].astype(np.float32)).clip(0, 1)
    heat = cv2.applyColorMap((p * 255).astype(np.uint8), cv2.COLORMAP_JET).astype(np.float32)
    alpha = 0.7 * p[..., None]
    img: np.ndarray = (base * (1 - alpha) + heat * alpha).astype(np.uint8)
    img = cv2.resize(img, None, fx=ZOOM, fy=ZOOM, interpolation=cv2.INTER_NEAREST)
    for d, colour, ring in ((k.pair.ref, REF_BGR, True), (k.pair.cand, CAND_BGR, False)):
        if d is None:
            continue
        u, v = _to_heatmap(d, k)
        at = (round((u - left + 0.5) * ZOOM), round((v - top + 0.5) * ZOOM))
        if ring:
            cv2.circle(img, at, 3 * ZOOM, colour, 1, cv2.LINE_AA)
        else:
            cv2.drawMarker(img, at, colour, cv2.MARKER_TILTED_CROSS, 3 * ZOOM, 1, cv2.LINE_AA)
    strip = np.zeros((18, img.shape[1], 3), np.uint8)
    cv2.putText(strip, title, (4, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.4, TEXT_BGR, 1, cv2.LINE_AA)
    return np.vstack([strip, img])


def render(k: Keeper, reference: str, candidate: str) -> np.ndarray:
    """The side-by-side picture of one kept heatmap, BGR uint8."""
    box = _box(k)
    left = _panel(k, k.ref_prob, f"reference {reference}", box)
    right = _panel(k, k.cand_prob, f"candidate {candidate}", box)
    gap = np.full((left.shape[0], 4, 3), 40, np.uint8)
    pair = k.pair
    what = "visibility flip" if pair.flip else f"moved {pair.distance:.2f} px"
    caption = np.zeros((18, left.shape[1] * 2 + 4, 3), np.uint8)
    cv2.putText(
        caption,
        f"{pair.clip} frame {pair.frame} (window {pair.window}): {what}",
        (4, 13),
        cv2.FONT_HERSHEY_SIMPLEX,
        0.4,
        TEXT_BGR,
        1,
        cv2.LINE_AA,
    )
    return np.vstack([np.hstack([left, gap, right]), caption])


def image_name(k: Keeper) -> str:
    p = k.pair
    return f"{p.clip}_f{p.frame:06d}_w{p.window:05d}_p{p.position}.png"


def write_image(path: Path, image: np.ndarray) -> None:
    ok, buf = cv2.imencode(".png", image)
    if not ok:
        raise RuntimeError(f"OpenCV could not encode {path.name}")
    with atomic_write(path, "wb") as f:
        f.write(buf.tobytes())

"""Heatmap → ball candidates (``shared/spec/blurball.md``, "Post-processing").

Per heatmap: sigmoid; nothing if the maximum is not above the threshold; else a binary mask,
8-connected components, and per component: score (sum of heatmap values), heatmap-weighted
centroid, blur angle ½·atan2(2·μ11, μ20 − μ02) of the mask's central moments, and blur length
= half the extent of the component's pixels along their principal axis. Positions and lengths
are mapped back to the original frame (the inverse of the straight bilinear resize).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

DEFAULT_THRESHOLD = 0.5


def check_threshold(value: float, name: str = "threshold") -> None:
    """``ValueError`` naming ``name`` (a field or a CLI flag) unless ``value`` is a score
    threshold strictly between 0 and 1: 0 marks every pixel, 1 none, NaN compares false."""
    if not 0.0 < value < 1.0:  # also NaN
        raise ValueError(f"{name} must be between 0 and 1, got {value}")


@dataclass(frozen=True)
class Detection:
    """One candidate in original-frame pixels; angle in (-90, 90] degrees, y down."""

    x: float
    y: float
    score: float
    blur_angle_deg: float = 0.0
    blur_length_px: float = 0.0


@dataclass(frozen=True)
class FrameGeometry:
    """How a heatmap maps onto the original frame: ``(width, height)`` of each."""

    source_width: int
    source_height: int
    heatmap_width: int
    heatmap_height: int

    def __post_init__(self) -> None:
        sizes = (self.source_width, self.source_height, self.heatmap_width, self.heatmap_height)
        if not all(isinstance(n, (int, np.integer)) and n > 0 for n in sizes):
            raise ValueError(f"FrameGeometry sizes must be positive integers, got {self}")

    @property
    def scale(self) -> tuple[float, float]:
        return (
            self.source_width / self.heatmap_width,
            self.source_height / self.heatmap_height,
        )

    def to_source(self, u: float, v: float) -> tuple[float, float]:
        """Heatmap pixel centre (u, v) → source pixel coordinates (half-pixel-centre resize)."""
        sx, sy = self.scale
        return (u + 0.5) * sx - 0.5, (v + 0.5) * sy - 0.5


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))


def fold_angle(deg: float) -> float:
    """Fold an undirected angle into (-90, 90]."""
    deg = math.fmod(deg, 180.0)
    if deg <= -90.0:
        deg += 180.0
    elif deg > 90.0:
        deg -= 180.0
    return deg


def _blob_geometry(
    us: np.ndarray, vs: np.ndarray, geom: FrameGeometry
) -> tuple[float, float]:
    """Blur angle (degrees, source frame) and length (source px) of one component's pixels."""
    if us.size < 2:
        return 0.0, 0.0
    du, dv = us - us.mean(), vs - vs.mean()
    mu20, mu02, mu11 = float((du * du).mean()), float((dv * dv).mean()), float((du * dv).mean())
    theta = 0.5 * math.atan2(2.0 * mu11, mu20 - mu02)
    proj = du * math.cos(theta) + dv * math.sin(theta)
    half_extent = 0.5 * float(proj.max() - proj.min())
    sx, sy = geom.scale
    ax, ay = math.cos(theta) * sx, math.sin(theta) * sy
    return fold_angle(math.degrees(math.atan2(ay, ax))), half_extent * math.hypot(ax, ay)


def detect(
    prob: np.ndarray, geom: FrameGeometry, threshold: float = DEFAULT_THRESHOLD
) -> list[Detection]:
    """Candidates in one probability map ``prob (H, W)`` float in [0, 1], best score first.

    ``(H, W)`` must be ``geom``'s heatmap size (positions are scaled by it) and ``threshold``
    strictly between 0 and 1; a ``ValueError`` says which is not."""
    prob = np.asarray(prob)
    check_heatmap(prob, geom, threshold)
    if float(prob.max()) <= threshold:
        return []
    mask = (prob > threshold).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    found = []
    for label in range(1, count):
        left, top, width, height = (int(v) for v in stats[label, :4])
        box = np.s_[top : top + height, left : left + width]
        vs, us = np.nonzero(labels[box] == label)
        weights = prob[box][vs, us].astype(np.float64)
        us, vs = us + left, vs + top
        total = float(weights.sum())
        u = float((us * weights).sum() / total)
        v = float((vs * weights).sum() / total)
        x, y = geom.to_source(u, v)
        angle, length = _blob_geometry(us.astype(np.float64), vs.astype(np.float64), geom)
        found.append(Detection(x, y, total, angle, length))
    found.sort(key=lambda d: d.score, reverse=True)
    return found


def check_heatmap(prob: np.ndarray, geom: FrameGeometry, threshold: float) -> None:
    """``ValueError`` unless ``prob`` is one ``geom``-sized map and ``threshold`` in (0, 1): a
    map of another size gave positions scaled wrongly, and no error."""
    expected = (geom.heatmap_height, geom.heatmap_width)
    if prob.shape != expected:
        raise ValueError(f"a heatmap must be one (H, W) = {expected} map, as its FrameGeometry "
                         f"says; got shape {prob.shape}")
    check_threshold(threshold)


def detect_logits(
    logits: np.ndarray, geom: FrameGeometry, threshold: float = DEFAULT_THRESHOLD
) -> list[Detection]:
    """Like :func:`detect`, from logits (before sigmoid)."""
    return detect(sigmoid(np.asarray(logits, dtype=np.float32)), geom, threshold)

"""Training targets: a Gaussian "capsule" along each frame's blur streak.

The capsule's 0.5 contour has the streak's half-length, so post-processing reads the
ground-truth blur length and angle back from a perfect prediction. A frame's target is fixed by
ten numbers (``target_params``); data workers ship those numbers, not maps, and the maps are
drawn where they are used (``build_targets``, on the training device). ``draw_target`` draws the
same maps with NumPy (the reference, and what the workers use to pick crops around the ball).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ttball.results import FrameResult

TARGET_SIGMA = 1.5  # heatmap px; the 0.5 contour sits at sigma * sqrt(2 ln 2) = 1.77 px
# Columns of a target's parameters, in network-input pixels of the whole (uncropped) frame:
# visible (0/1); capsule centre u, v; unit direction dx, dy; half-length of its core; the box
# [x0, x1) x [y0, y1) outside which the target is 0 (the Gaussian there is below 7e-7).
PARAMS = ("visible", "u", "v", "dx", "dy", "half", "x0", "x1", "y0", "y1")
N_PARAMS = len(PARAMS)


def target_params(
    rows: list[FrameResult], src_size: tuple[int, int], net_size: tuple[int, int]
) -> np.ndarray:
    """``(N, 10)`` float32 (columns ``PARAMS``) for rows of one clip; sizes are (width, height).

    float32 loses nothing: the maps are computed in float32 from these values.
    """
    sw, sh = src_size
    w, h = net_size
    sx, sy = w / sw, h / sh
    out = np.zeros((len(rows), N_PARAMS), np.float32)
    core = TARGET_SIGMA * math.sqrt(2 * math.log(2))
    for i, r in enumerate(rows):
        if not r.visible:
            continue
        u, v = (r.x + 0.5) * sx - 0.5, (r.y + 0.5) * sy - 0.5
        t = math.radians(r.blur_angle_deg)
        dx, dy = math.cos(t) * sx, math.sin(t) * sy
        norm = math.hypot(dx, dy)
        dx, dy = dx / norm, dy / norm
        half = max(r.blur_length_px * norm - core, 0.0)
        x0, x1 = int(max(u - half - 8, 0)), int(min(u + half + 9, w))
        y0, y1 = int(max(v - half - 8, 0)), int(min(v + half + 9, h))
        if x0 < x1 and y0 < y1:
            out[i] = (1.0, u, v, dx, dy, half, x0, x1, y0, y1)
    return out


def capsule(p: np.ndarray) -> np.ndarray:
    """The target inside one frame's box ``(y1 - y0, x1 - x0)`` float32 from its ``PARAMS``."""
    _, u, v, dx, dy, half, x0, x1, y0, y1 = (p[k] for k in range(N_PARAMS))
    px = np.arange(int(x0), int(x1), dtype=np.float32)[None, :] - u
    py = np.arange(int(y0), int(y1), dtype=np.float32)[:, None] - v
    along = np.clip(px * dx + py * dy, -half, half)
    d2 = (px - along * dx) ** 2 + (py - along * dy) ** 2
    return np.exp(-d2 / np.float32(2 * TARGET_SIGMA**2))


def draw_target(
    rows: list[FrameResult], src_size: tuple[int, int], net_size: tuple[int, int]
) -> np.ndarray:
    """Target heatmaps ``(N, h, w)`` float32 in [0, 1] for rows of one clip.

    ``src_size`` and ``net_size`` are (width, height).
    """
    w, h = net_size
    params = target_params(rows, src_size, net_size)
    out = np.zeros((len(rows), h, w), np.float32)
    for i, p in enumerate(params):
        if p[0]:
            out[i, int(p[8]) : int(p[9]), int(p[6]) : int(p[7])] = capsule(p)
    return out


def peak_pixels(p: np.ndarray, width: int, flip: bool) -> np.ndarray:
    """``(K, 2)`` (row, column) where one frame's target exceeds 0.5, in row-major order, in the
    frame of width ``width`` mirrored left-right when ``flip`` (like ``np.argwhere``)."""
    if not p[0]:
        return np.zeros((0, 2), np.int64)
    mask = capsule(p) > 0.5
    x0, x1, y0 = int(p[6]), int(p[7]), int(p[8])
    if flip:
        return np.argwhere(mask[:, ::-1]) + (y0, width - x1)
    return np.argwhere(mask) + (y0, x0)


def build_targets(params: Tensor, where: Tensor, size: tuple[int, int], width: int) -> Tensor:
    """Targets ``(B, T, h, w)`` float32 on ``params``' device, as ``draw_target`` would draw
    them and a window would cut them.

    ``params`` ``(B, T, 10)`` float32: ``PARAMS`` per frame of each window, in the whole
    frame; ``where`` ``(B, 3)``: (top, left, flip) of each window's crop of size ``size``
    (h, w) out of frames of width ``width``, the crop taken after the left-right flip.
    """
    h, w = size
    dev = params.device
    p = params[..., None, None]  # (B, T, 10, 1, 1)
    top, left, flip = (where[:, k].to(dev).float().view(-1, 1, 1, 1) for k in range(3))
    row = top + torch.arange(h, device=dev, dtype=torch.float32).view(1, 1, h, 1)
    col = left + torch.arange(w, device=dev, dtype=torch.float32).view(1, 1, 1, w)
    col = torch.where(flip > 0, width - 1 - col, col)  # column in the unflipped frame
    visible, u, v, dx, dy, half, x0, x1, y0, y1 = p.unbind(2)
    px, py = col - u, row - v
    along = torch.minimum(torch.maximum(px * dx + py * dy, -half), half)
    d2 = (px - along * dx) ** 2 + (py - along * dy) ** 2
    value = torch.exp(-d2 / (2 * TARGET_SIGMA**2))
    inside = (visible > 0) & (col >= x0) & (col < x1) & (row >= y0) & (row < y1)
    return torch.where(inside, value, torch.zeros((), device=dev))

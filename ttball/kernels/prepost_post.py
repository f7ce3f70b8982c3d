"""Post-processing on the device: probability maps → a few numbers per heatmap.

The same candidates as :func:`ttball.postprocess.detect` (``shared/spec/blurball.md``,
"Post-processing"), computed with fixed-shape torch ops (no host sync, CUDA-graph capturable):

1. Seeds: the ``max_blobs`` highest local maxima (3×3) above the threshold. Every 8-connected
   component above the threshold holds at least one (its own maximum).
2. Per seed, a ``crop × crop`` window centred on it (the map zero-padded, so windows at the
   border are fine) and an 8-connected flood fill of the above-threshold pixels from the
   centre (``3×3`` max-pool steps).
3. Per component: pixel count, score (sum of probabilities), weighted centroid, the blur angle
   from the mask's central moments (in exact ``int64`` sums) and the half extent along it.
   Two seeds in one component are merged (same smallest pixel index).

The window is exact when a heatmap's components each fit their window: the flood fill
converged, touched no window edge, and the components found hold every above-threshold pixel
of the map. A heatmap that fails any of the three (more than ``max_blobs`` components, a
streak longer than the window, a snake-shaped blob) is flagged ``fallback``; the caller runs
:func:`ttball.postprocess.detect` on that one map on the host. So the results always equal the
CPU path; the window only decides how often the fallback runs.

What leaves the device per heatmap: ``max_blobs × 8`` float64 plus the flag, packed by
:func:`packed_stats` (264 bytes at ``max_blobs=4``), instead of the ``h × w`` float32 map
(590 KB at 512×288).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ttball.backends.base import capture_graph
from ttball.postprocess import Detection, FrameGeometry, fold_angle

# Columns of the per-blob statistics.
KEEP, COUNT, SCORE, U, V, THETA, HALF, FIRST = range(8)
STATS = 8


@dataclass(frozen=True)
class PostOptions:
    """``max_blobs`` seeds per heatmap; ``crop`` (odd) is the window side in heatmap pixels.

    31×31 holds a ball streak up to 30 px long at the network's 512×288 (the synthetic clips'
    fastest streaks are under 20 px there); ``flood_steps`` = crop reaches every pixel of a
    convex blob in the window.
    """

    max_blobs: int = 4
    crop: int = 31
    flood_steps: int = 31

    def __post_init__(self) -> None:
        if self.crop % 2 == 0 or self.crop < 3:
            raise ValueError(f"crop must be odd and >= 3, got {self.crop}")
        if self.max_blobs < 1 or self.flood_steps < 1:
            raise ValueError("max_blobs and flood_steps must be >= 1")


def _fused(t: Tensor) -> bool:
    """Whether :func:`blob_stats` runs its peak search and flood as the Triton kernels of
    :mod:`ttball.kernels.prepost_fused` (on CUDA, where triton imports) or as PyTorch ops."""
    if not t.is_cuda:
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


#: ``TTBALL_FUSED_WINDOWS``: on CUDA, ``2`` (the default) computes the crops' gather, flood and
#: window statistics as two Triton kernels (:func:`ttball.kernels.prepost_fused.windows`; the
#: statistics' CUDA graph 156 GPU operations a call → 39, scripts/stats_kernels.py on an H200);
#: ``1`` the window statistics after the flood only (:func:`ttball.kernels.prepost_fused.window_stats`;
#: → 69); ``0`` the PyTorch ops. Level 2 served 5.6 % more frames a second than 0 in eight
#: replicas of one lane (6,954 and 6,863 against 6,452, 6,651 and 6,524 in the same calls;
#: docs/benchmarks/LOG.md, thirty-eighth session); equal to the PyTorch ops on GPU and in
#: Triton's interpreter (tests/kernels/test_prepost_fused.py).
FUSED_WINDOWS_ENV = "TTBALL_FUSED_WINDOWS"


def fused_windows_level(t: Tensor) -> int:
    """The ``TTBALL_FUSED_WINDOWS`` level :func:`blob_stats` runs for maps on ``t``'s device
    (0 where there is no Triton path: off CUDA or without triton). A bad value: ValueError."""
    level = os.environ.get(FUSED_WINDOWS_ENV, "") or "2"
    if level not in ("0", "1", "2"):
        raise ValueError(f"{FUSED_WINDOWS_ENV} must be 0, 1 or 2, got {level!r}")
    return int(level) if _fused(t) else 0


def blob_stats(probs: Tensor, thresholds: Tensor, options: PostOptions = PostOptions()
               ) -> tuple[Tensor, Tensor]:
    """Blobs of ``probs (N, h, w)`` float32 above ``thresholds (N,)``.

    Returns ``stats (N, max_blobs, 8)`` float64 (columns ``KEEP, COUNT, SCORE, U, V, THETA,
    HALF, FIRST``: a kept blob, its pixel count, score, centroid in heatmap pixels,
    principal-axis angle in radians, half extent along it in heatmap pixels, and the raster
    index of its first pixel) and ``fallback (N,)`` bool.
    """
    n, h, w = probs.shape
    k, s, r = options.max_blobs, options.crop, options.crop // 2
    thr = thresholds.to(probs.dtype).view(n, 1, 1)
    above = probs > thr
    count_above = above.flatten(1).sum(1)
    if _fused(probs):
        from ttball.kernels.prepost_fused import peak_values

        candidates = peak_values(probs, thr.view(n))
    else:
        peaks = above & (probs == F.max_pool2d(probs[:, None], 3, 1, 1)[:, 0])
        candidates = torch.where(peaks, probs, -1.0).flatten(1)
    values, index = candidates.topk(min(k, h * w), dim=1)
    if values.shape[1] < k:  # a map smaller than max_blobs pixels
        pad = k - values.shape[1]
        values, index = F.pad(values, (0, pad), value=-1.0), F.pad(index, (0, pad))
    fused_windows = fused_windows_level(probs)
    if fused_windows == 2:  # the rest in two kernels and the angle's four ops
        from ttball.kernels.prepost_fused import windows

        return windows(probs, thr.view(n), values, index, count_above, s, options.flood_steps)
    valid = values > thr.view(n, 1)
    py, px = index // w, index % w

    offs = torch.arange(s, device=probs.device)
    rows, cols = py[..., None] + offs, px[..., None] + offs  # (N, K, S) in padded coordinates
    padded = F.pad(probs, (r, r, r, r))
    crop = padded[torch.arange(n, device=probs.device).view(n, 1, 1, 1),
                  rows[..., :, None], cols[..., None, :]]  # (N, K, S, S)
    comp, clean = _flood(crop > thr.view(n, 1, 1, 1), valid, options)

    us, vs = cols - r, rows - r  # image coordinates of the window's columns and rows
    if fused_windows == 1:  # ~100 kernels fewer
        from ttball.kernels.prepost_fused import window_stats

        return window_stats(crop, comp, us, vs, valid, clean, count_above, h, w)
    ident = torch.where(comp, vs[..., :, None] * w + us[..., None, :], h * w).flatten(2).amin(2)
    same = (ident[:, :, None] == ident[:, None, :]) & valid[:, None, :] & valid[:, :, None]
    keep = valid & ~torch.tril(same, diagonal=-1).any(2)
    count = comp.flatten(2).sum(2)
    found = (count * keep).sum(1)
    fallback = (found != count_above) | (valid & ~clean).any(1)

    stats = _moments(crop, comp, us, vs)
    stats[..., KEEP] = keep.to(stats.dtype)
    stats[..., COUNT] = count.to(stats.dtype)
    stats[..., FIRST] = ident.to(stats.dtype)
    return stats, fallback


def _flood(mask: Tensor, valid: Tensor, options: PostOptions) -> tuple[Tensor, Tensor]:
    """8-connected component of each window's centre pixel: ``comp (N, K, S, S)`` bool, and
    ``clean (N, K)``: the fill converged and stayed off the window's edge."""
    n, k, s, _ = mask.shape
    if _fused(mask):
        from ttball.kernels.prepost_fused import flood_crops

        comp, converged = flood_crops(mask, valid, options.flood_steps)
    else:
        r = s // 2
        m = mask.to(torch.float32).reshape(n * k, 1, s, s)
        reach = torch.zeros_like(m)
        reach[:, 0, r, r] = valid.to(torch.float32).flatten()
        for _ in range(options.flood_steps):
            reach = F.max_pool2d(reach, 3, 1, 1) * m
        converged = (F.max_pool2d(reach, 3, 1, 1) * m == reach).flatten(1).all(1)
        comp = (reach > 0).view(n, k, s, s)
    edge = comp[..., 0, :].any(-1) | comp[..., -1, :].any(-1)
    edge |= comp[..., :, 0].any(-1) | comp[..., :, -1].any(-1)
    return comp, converged.view(n, k) & ~edge


def _moments(crop: Tensor, comp: Tensor, us: Tensor, vs: Tensor) -> Tensor:
    """Score, weighted centroid, principal angle and half extent of each window's component.

    The angle comes from exact integer sums: ``atan2(2·(n·Σuv − Σu·Σv),
    (n·Σu² − (Σu)²) − (n·Σv² − (Σv)²))`` is ½·atan2(2μ11, μ20 − μ02) scaled by n² > 0.
    """
    f64 = torch.float64
    ui, vi = us[..., None, :], vs[..., :, None]  # (N, K, 1, S), (N, K, S, 1) int64
    c = comp.to(torch.int64)
    cnt = c.sum((-1, -2))
    su, sv = (c * ui).sum((-1, -2)), (c * vi).sum((-1, -2))
    suu, svv = (c * ui * ui).sum((-1, -2)), (c * vi * vi).sum((-1, -2))
    suv = (c * ui * vi).sum((-1, -2))
    a = 2 * (cnt * suv - su * sv)
    b = (cnt * suu - su * su) - (cnt * svv - sv * sv)
    theta = 0.5 * torch.atan2(a.to(f64), b.to(f64))

    weight = torch.where(comp, crop.to(f64), 0.0)
    score = weight.sum((-1, -2))
    safe = torch.where(score > 0, score, 1.0)
    u = (weight * ui.to(f64)).sum((-1, -2)) / safe
    v = (weight * vi.to(f64)).sum((-1, -2)) / safe
    cos, sin = torch.cos(theta)[..., None, None], torch.sin(theta)[..., None, None]
    proj = ui.to(f64) * cos + vi.to(f64) * sin
    span = torch.where(comp, proj, -math.inf).amax((-1, -2))
    span += torch.where(comp, -proj, -math.inf).amax((-1, -2))
    half = torch.where(cnt > 0, 0.5 * span, 0.0)
    zero = torch.zeros_like(score)
    return torch.stack([zero, zero, score, u, v, theta, half, zero], dim=-1)


def packed_stats(logits: Tensor, thresholds: Tensor, options: PostOptions = PostOptions()
                 ) -> Tensor:
    """Logits ``(B, 3, h, w)`` → sigmoid → :func:`blob_stats`, packed for one copy to the host:
    ``(B·3, max_blobs·8 + 1)`` float64, the last column the fallback flag."""
    b, c, h, w = logits.shape
    probs = torch.sigmoid(logits.float()).reshape(b * c, h, w)  # channels_last backends too
    stats, fallback = blob_stats(probs, thresholds, options)
    return torch.cat([stats.flatten(1), fallback[:, None].to(stats.dtype)], dim=1)


class GraphedStats:
    """:func:`packed_stats` replayed from one CUDA graph per input shape (about 100 small
    kernels become one launch). The returned tensor is overwritten by the next call.
    ``frozen``: no new captures, a shape without a graph runs eagerly (counted in
    ``uncaptured``), as :class:`ttball.backends.cudagraph.GraphCache`'s."""

    def __init__(self, options: PostOptions = PostOptions()) -> None:
        self.options = options
        self._graphs: dict[tuple[int, ...], tuple[torch.cuda.CUDAGraph, Tensor, Tensor, Tensor]] = {}
        self._pool: object = None
        self.frozen = False
        self.uncaptured = 0

    def __call__(self, logits: Tensor, thresholds: Tensor) -> Tensor:
        key = tuple(logits.shape)
        if key not in self._graphs:
            if self.frozen:
                self.uncaptured += 1
                return packed_stats(logits, thresholds, self.options)
            self._graphs[key] = self._capture(logits, thresholds)
        graph, static_logits, static_thr, out = self._graphs[key]
        static_logits.copy_(logits)
        static_thr.copy_(thresholds)
        graph.replay()
        return out

    def _capture(self, logits: Tensor, thresholds: Tensor
                 ) -> tuple[torch.cuda.CUDAGraph, Tensor, Tensor, Tensor]:
        static_logits, static_thr = logits.detach().clone(), thresholds.detach().clone()
        graph, out = capture_graph(lambda: packed_stats(static_logits, static_thr, self.options),
                                   logits.device, warmup=2, pool=self._pool)
        self._pool = graph.pool()
        return graph, static_logits, static_thr, out


def detections(stats: np.ndarray, geom: FrameGeometry) -> list[Detection]:
    """One heatmap's ``stats (max_blobs, 8)`` → its candidates, best score first, in source
    pixels (the mapping of :func:`ttball.postprocess.detect` and its ``_blob_geometry``)."""
    found = []
    # Equal scores keep OpenCV's label order (raster order of each component's first pixel),
    # as the tracker takes the first of equal maxima.
    for row in sorted(stats, key=lambda r: float(r[FIRST])):
        if row[KEEP] <= 0:
            continue
        x, y = geom.to_source(float(row[U]), float(row[V]))
        angle, length = 0.0, 0.0
        if row[COUNT] >= 2:
            sx, sy = geom.scale
            ax, ay = math.cos(row[THETA]) * sx, math.sin(row[THETA]) * sy
            angle = fold_angle(math.degrees(math.atan2(ay, ax)))
            length = float(row[HALF]) * math.hypot(ax, ay)
        found.append(Detection(x, y, float(row[SCORE]), angle, length))
    found.sort(key=lambda d: d.score, reverse=True)
    return found

"""Device post-processing (``ttball.kernels.prepost_post``) against ``ttball.postprocess.detect``:
typical and tricky heatmaps, CPU tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ttball.kernels import prepost_post
from ttball.kernels.prepost_post import (
    GraphedStats,
    PostOptions,
    blob_stats,
    detections,
    packed_stats,
)
from ttball.postprocess import Detection, FrameGeometry, detect

H, W = 72, 128
GEOM = FrameGeometry(1280, 720, W, H)  # 10x back to the source frame
CENTROID_PX = 0.05  # source pixels
ANGLE_DEG = 0.5


def blob(prob: np.ndarray, cx: float, cy: float, sx: float, sy: float, angle_deg: float = 0.0,
         peak: float = 0.95) -> np.ndarray:
    """Add an oriented Gaussian (the network's typical output for a blurred ball)."""
    v, u = np.mgrid[0 : prob.shape[0], 0 : prob.shape[1]].astype(np.float64)
    c, s = math.cos(math.radians(angle_deg)), math.sin(math.radians(angle_deg))
    a = ((u - cx) * c + (v - cy) * s) / sx
    b = (-(u - cx) * s + (v - cy) * c) / sy
    return np.maximum(prob, (peak * np.exp(-0.5 * (a * a + b * b))).astype(np.float32))


def background(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 0.2, (H, W)).astype(np.float32)


def device_detect(maps: list[np.ndarray], threshold: float = 0.5,
                  options: PostOptions | None = None) -> tuple[list[list[Detection]], list[bool]]:
    probs = torch.from_numpy(np.stack(maps))
    stats, fallback = blob_stats(probs, torch.full((len(maps),), threshold), options or PostOptions())
    flags = fallback.tolist()
    return [detections(s, GEOM) for s in stats.numpy()], flags


def angle_gap(a: float, b: float) -> float:
    d = abs(a - b) % 180.0
    return min(d, 180.0 - d)


def assert_same(got: list[Detection], want: list[Detection]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert abs(g.x - w.x) < CENTROID_PX and abs(g.y - w.y) < CENTROID_PX, (g, w)
        assert g.score == pytest.approx(w.score, rel=1e-9)
        assert g.blur_length_px == pytest.approx(w.blur_length_px, abs=1e-6)
        assert angle_gap(g.blur_angle_deg, w.blur_angle_deg) < ANGLE_DEG, (g, w)


CASES = {
    "typical": lambda: blob(background(), 60.3, 30.7, 2.0, 2.0),
    "streak": lambda: blob(background(), 40.0, 50.0, 7.0, 1.6, 30.0),
    "steep streak": lambda: blob(background(), 90.0, 20.0, 6.0, 1.5, -80.0),
    "two blobs": lambda: blob(blob(background(), 20.0, 20.0, 2.0, 3.0, 10.0), 100.0, 50.0,
                              3.0, 1.5, 45.0, peak=0.8),
    "two blobs in one window": lambda: blob(blob(background(), 50.0, 30.0, 1.5, 1.5), 58.0, 33.0,
                                            1.5, 1.5, peak=0.7),
    "corner": lambda: blob(background(), 0.0, 0.0, 3.0, 2.0),
    "right border": lambda: blob(background(), 127.4, 40.0, 2.5, 2.0, 20.0),
    "bottom border streak": lambda: blob(background(), 64.0, 71.0, 6.0, 1.5, 5.0),
    "one pixel": lambda: _pixel(background(), 33, 44, 0.6),
    "two pixels": lambda: _pixel(_pixel(background(), 33, 44, 0.6), 34, 45, 0.7),
    "plateau": lambda: _box(background(), 10, 12, 15, 19, 0.8),
    "nothing": lambda: background(),
    "at threshold": lambda: _pixel(background(), 10, 10, 0.5),
}


def _pixel(prob: np.ndarray, v: int, u: int, value: float) -> np.ndarray:
    prob[v, u] = value
    return prob


def _box(prob: np.ndarray, v0: int, u0: int, v1: int, u1: int, value: float) -> np.ndarray:
    prob[v0:v1, u0:u1] = value
    return prob


def test_typical_and_tricky_maps_match_detect_without_fallback() -> None:
    maps = [make() for make in CASES.values()]
    got, fallback = device_detect(maps)
    for name, prob, g, fb in zip(CASES, maps, got, fallback):
        assert not fb, name
        assert_same(g, detect(prob, GEOM, 0.5))
    assert [len(g) for g in got] == [1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0]


def test_isotropic_blob_angle_is_exactly_zero() -> None:
    """A square blob has μ11 = 0 = μ20 − μ02: the integer moments give atan2(0, 0) = 0; the
    float64 moments of detect give rounding noise there (the angle is undefined)."""
    (found,), _ = device_detect([_box(background(), 20, 30, 25, 35, 0.9)])
    assert found[0].blur_angle_deg == 0.0


@pytest.mark.parametrize("threshold", [0.5, 0.7])
def test_more_blobs_than_seeds_falls_back(threshold: float) -> None:
    prob = background()
    for i in range(6):
        prob = blob(prob, 10 + 20 * i, 36, 1.5, 1.5)
    (found,), (fb,) = device_detect([prob], threshold, PostOptions(max_blobs=4))
    assert fb
    (found,), (fb,) = device_detect([prob], threshold, PostOptions(max_blobs=6))
    assert not fb
    assert_same(found, detect(prob, GEOM, threshold))


def test_streak_longer_than_the_window_falls_back() -> None:
    prob = blob(background(), 64, 36, 14.0, 1.5, 0.0)  # about 50 px above 0.5
    (_,), (fb,) = device_detect([prob], 0.5, PostOptions(crop=31))
    assert fb
    (found,), (fb,) = device_detect([prob], 0.5, PostOptions(crop=71, flood_steps=71))
    assert not fb
    assert_same(found, detect(prob, GEOM, 0.5))


def test_snake_that_the_flood_cannot_finish_falls_back() -> None:
    prob = background()
    for row in range(20, 40, 4):  # a zig-zag inside a 21x21 window: long geodesic path
        prob[row, 50:70] = 0.9
        prob[row + 1 : row + 4, 69 if (row // 4) % 2 == 0 else 50] = 0.9
    (_,), (fb,) = device_detect([prob], 0.5, PostOptions(crop=41, flood_steps=8))
    assert fb
    (found,), (fb,) = device_detect([prob], 0.5, PostOptions(crop=41, flood_steps=120))
    assert not fb
    assert_same(found, detect(prob, GEOM, 0.5))


def test_random_maps_match_detect_or_fall_back() -> None:
    """1 to 7 blobs of random shape, size and peak per map: exact, or flagged exactly when the
    map has more local maxima above the threshold than seeds (blobs here fit their windows)."""
    rng = np.random.default_rng(7)
    maps = []
    for i in range(24):
        prob = background(i)
        for _ in range(rng.integers(1, 8)):
            prob = blob(prob, rng.uniform(-2, W + 2), rng.uniform(-2, H + 2), rng.uniform(0.5, 6),
                        rng.uniform(0.5, 2.5), rng.uniform(-90, 90), rng.uniform(0.55, 0.99))
        maps.append(prob)
    got, fallback = device_detect(maps, 0.5)
    for prob, g, fb in zip(maps, got, fallback):
        t = torch.from_numpy(prob)[None]
        peaks = int(((t > 0.5) & (t == torch.nn.functional.max_pool2d(t, 3, 1, 1))).sum())
        assert fb == (peaks > 4)
        if not fb:
            assert_same(g, detect(prob, GEOM, 0.5))
    assert 0 < sum(fallback) < len(maps)


def test_per_map_thresholds() -> None:
    prob = blob(background(), 60, 30, 2.0, 2.0, peak=0.6)
    probs = torch.from_numpy(np.stack([prob, prob]))
    stats, fallback = blob_stats(probs, torch.tensor([0.5, 0.7]))
    assert not fallback.any()
    assert len(detections(stats[0].numpy(), GEOM)) == 1
    assert detections(stats[1].numpy(), GEOM) == []


def test_options_are_checked() -> None:
    with pytest.raises(ValueError):
        PostOptions(crop=30)
    with pytest.raises(ValueError):
        PostOptions(max_blobs=0)


def test_packed_stats_takes_channels_last_logits() -> None:
    """A channels_last backend's logits (``*-cl``, ``triton-fp16``) are not viewable as
    ``(B·3, h, w)``; the H200 worker failed at start-up on exactly that."""
    maps = [CASES[name]() for name in ("typical", "streak", "two blobs", "nothing", "corner", "plateau")]
    probs = torch.from_numpy(np.stack(maps)).clamp(1e-6, 1 - 1e-6)
    logits = torch.logit(probs).view(2, 3, H, W)
    channels_last = logits.contiguous(memory_format=torch.channels_last)
    assert not channels_last.is_contiguous()
    thresholds = torch.full((6,), 0.5)
    assert torch.equal(packed_stats(channels_last, thresholds), packed_stats(logits, thresholds))


def test_frozen_graphed_stats_run_eagerly() -> None:
    """Frozen (lanes pushed from threads: no captures), a shape without a graph runs
    :func:`packed_stats` itself, here on the CPU where nothing could be captured."""
    logits = torch.randn(2, 3, 16, 24)
    thresholds = torch.full((6,), 0.5)
    graphed = GraphedStats()
    graphed.frozen = True
    assert torch.equal(graphed(logits, thresholds), packed_stats(logits, thresholds))
    assert graphed.uncaptured == 1


def test_a_bad_fused_windows_level_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """TTBALL_FUSED_WINDOWS is 0, 1 or 2 (unset or empty: 2); on the CPU (no Triton path) the
    level changes nothing."""
    probs = torch.zeros(2, 20, 30)
    probs[0, 5:8, 5:8] = 0.9
    thresholds = torch.full((2,), 0.5)
    monkeypatch.delenv(prepost_post.FUSED_WINDOWS_ENV, raising=False)
    want = blob_stats(probs, thresholds, PostOptions(crop=7, flood_steps=7))
    for level in ("0", "1", "2", ""):
        monkeypatch.setenv(prepost_post.FUSED_WINDOWS_ENV, level)
        got = blob_stats(probs, thresholds, PostOptions(crop=7, flood_steps=7))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    monkeypatch.setenv(prepost_post.FUSED_WINDOWS_ENV, "yes")
    with pytest.raises(ValueError, match="must be 0, 1 or 2"):
        blob_stats(probs, thresholds)

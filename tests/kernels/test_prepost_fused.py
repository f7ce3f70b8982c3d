"""The fused peak search and flood (``ttball.kernels.prepost_fused``) against the PyTorch ops of
``blob_stats`` they replace on CUDA: equal bit for bit, in Triton's interpreter on CPU (compiled
on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from kernel_env import DEVICE, require_triton

from ttball.kernels import prepost_post
from ttball.kernels.prepost_post import PostOptions, blob_stats

require_triton()
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

# (after require_triton: the module imports triton)
from ttball.kernels import prepost_fused
from ttball.kernels.prepost_fused import flood_crops, peak_values


def plateaus(n: int, h: int, w: int, seed: int) -> torch.Tensor:
    """Probabilities on few levels, so that equal neighbours (plateaus, ties) are common."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 6, (n, h, w), generator=g).float() / 5.0).to(DEVICE)


def test_peak_values_are_max_pool_peaks_above_the_threshold() -> None:
    probs = plateaus(3, 19, 70, seed=1)  # crosses the 16 x 64 blocks' edges
    probs[1, 0, 0] = float("nan")  # a NaN is no peak, nor are its neighbours (max_pool's NaN)
    thresholds = torch.tensor([0.5, 0.3, 0.9], device=DEVICE)
    above = probs > thresholds.view(3, 1, 1)
    peaks = above & (probs == F.max_pool2d(probs[:, None], 3, 1, 1)[:, 0])
    want = torch.where(peaks, probs, -1.0).flatten(1)
    got = peak_values(probs, thresholds)
    assert torch.equal(got, want)
    assert (got > 0).any() and (got == -1).any()


@pytest.mark.parametrize(("size", "steps"), [(31, 31), (7, 2)])
def test_flood_crops_is_the_masked_dilation_loop(monkeypatch: pytest.MonkeyPatch, size: int,
                                                 steps: int) -> None:
    """Against ``_flood``'s PyTorch loop (component and clean flags), converged or not (7 x 7
    in 2 steps mostly is not), with and without a valid seed."""
    g = torch.Generator().manual_seed(size)
    field = F.avg_pool2d(torch.rand(6, 1, size + 4, size + 4, generator=g), 5, 1)[:, 0]
    mask = (field > 0.5).view(2, 3, size, size)
    c = size // 2
    mask[..., c, c] = True
    mask[1, 2] = True  # one crop all mask: the fill reaches the edge
    valid = torch.tensor([[True, True, False], [True, True, True]])
    options = PostOptions(crop=size, flood_steps=steps)
    monkeypatch.setattr(prepost_post, "_fused", lambda t: False)
    want = prepost_post._flood(mask, valid, options)
    monkeypatch.setattr(prepost_post, "_fused", lambda t: True)
    got = prepost_post._flood(mask.to(DEVICE), valid.to(DEVICE), options)
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    comp, converged = flood_crops(mask.to(DEVICE), valid.to(DEVICE), steps)
    assert not comp[0, 2].any()  # no seed, no component
    assert comp[1, 2].all() == (steps >= size // 2)  # all mask: the square, in size // 2 steps
    if steps == 2:
        assert not converged.all()


def test_blob_stats_are_the_same_with_the_fused_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    maps = rng.uniform(0.0, 0.2, (4, 40, 72)).astype(np.float32)
    v, u = np.mgrid[0:40, 0:72]
    for i, (cx, cy, sx, sy) in enumerate([(20, 10, 2, 2), (50, 30, 6, 1.5), (10, 35, 1, 1),
                                          (36, 20, 3, 3)]):
        maps[i] = np.maximum(maps[i], 0.95 * np.exp(-0.5 * (((u - cx) / sx) ** 2
                                                           + ((v - cy) / sy) ** 2)))
    maps[3, 5:8, 5:8] = 0.8  # a plateau: equal maxima
    probs = torch.from_numpy(maps)
    thresholds = torch.full((4,), 0.5)
    options = PostOptions(max_blobs=3, crop=11, flood_steps=11)
    monkeypatch.setattr(prepost_post, "_fused", lambda t: False)
    want = blob_stats(probs, thresholds, options)
    monkeypatch.setattr(prepost_post, "_fused", lambda t: True)
    got = blob_stats(probs.to(DEVICE), thresholds.to(DEVICE), options)
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    assert (want[0][..., 0] > 0).sum() >= 5  # blobs were kept, so the comparison means something


def test_blob_stats_use_the_fused_kernels_on_cuda_only() -> None:
    assert not prepost_post._fused(torch.zeros(1))
    if torch.cuda.is_available():
        assert prepost_post._fused(torch.zeros(1, device="cuda"))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("level", "entry"), [("1", "window_stats"), ("2", "windows")])
def test_window_stats_are_blob_stats_pytorch_ops(monkeypatch: pytest.MonkeyPatch, seed: int,
                                                 level: str, entry: str) -> None:
    """The whole fused blob_stats (peaks, flood, window statistics; at level 2 the crops'
    gather, flood and sums in one kernel) against its PyTorch ops: counts, angles, first
    pixels, kept seeds and fallback flags equal; score, centroid and extent to float64
    rounding. Blobs that merge (two seeds, one component), touch the map's edge, overflow the
    seeds (a fallback) and maps with none."""
    g = torch.Generator().manual_seed(seed)
    field = F.avg_pool2d(torch.rand(5, 1, 40, 72, generator=g), 7, 1, 3)[:, 0]
    probs = (field - field.amin()) / (field.amax() - field.amin())
    probs[3] = 0.0  # a map with no blob
    probs[1:3] = 0.0  # two maps whose blobs fit their windows (no fallback) ...
    yy, xx = torch.meshgrid(torch.arange(40.0), torch.arange(72.0), indexing="ij")
    for m, (y, x) in ((1, (1.0, 2.0)), (1, (20.0, 50.0)), (2, (30.0, 10.0)), (2, (12.0, 40.0))):
        probs[m] = torch.maximum(probs[m], torch.exp(-((yy - y) ** 2 + (xx - x) ** 2) / 6.0))
    # ... one of them at the map's corner (the window zero-padded there)
    probs[4, 10:13, 20:40] = 0.95  # a streak: a plateau, one component, many equal maxima
    thresholds = torch.tensor([0.6, 0.7, 0.5, 0.5, 0.9])
    options = PostOptions(max_blobs=4, crop=15, flood_steps=15)
    monkeypatch.setattr(prepost_post, "_fused", lambda t: False)
    # the PyTorch ops on the same device: the angle's atan2 is then the same function
    want, want_fallback = (t.cpu() for t in blob_stats(probs.to(DEVICE), thresholds.to(DEVICE),
                                                       options))
    monkeypatch.setattr(prepost_post, "_fused", lambda t: True)
    called = []
    fused = getattr(prepost_fused, entry)
    monkeypatch.setattr(prepost_fused, entry, lambda *a: called.append(1) or fused(*a))
    monkeypatch.setenv(prepost_post.FUSED_WINDOWS_ENV, "0")
    blob_stats(probs.to(DEVICE), thresholds.to(DEVICE), options)
    assert not called  # 0: the PyTorch ops
    monkeypatch.delenv(prepost_post.FUSED_WINDOWS_ENV, raising=False)
    blob_stats(probs.to(DEVICE), thresholds.to(DEVICE), options)
    assert bool(called) == (level == "2")  # level 2 unless asked otherwise
    called.clear()
    monkeypatch.setenv(prepost_post.FUSED_WINDOWS_ENV, level)
    got, fallback = blob_stats(probs.to(DEVICE), thresholds.to(DEVICE), options)
    got = got.cpu()
    assert called  # the fused path ran
    assert torch.equal(fallback.cpu(), want_fallback)
    exact = [prepost_post.KEEP, prepost_post.COUNT, prepost_post.THETA, prepost_post.FIRST]
    assert torch.equal(got[..., exact], want[..., exact])
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    keep, first = want[..., prepost_post.KEEP], want[..., prepost_post.FIRST]
    assert want_fallback.tolist() == [True, False, False, False, True]
    assert keep[1:3].sum(1).tolist() == [2, 2] and not keep[3].any()
    assert (first[1] < 72).any()  # the corner blob starts in the map's first row
    # the streak: equal maxima in one component, so later seeds of it are merged away
    assert keep[4].sum() < (want[4, :, prepost_post.COUNT] > 0).sum()

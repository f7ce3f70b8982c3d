"""Two steps of :func:`ttball.kernels.prepost_post.blob_stats` as one Triton kernel each, for
the device pipeline on CUDA (the results are the PyTorch versions', bit for bit):

- :func:`peak_values`: a heatmap's local maxima above its threshold, ``where(p > thr and p ==
  max_pool3x3(p), p, -1)``: one pass over the maps instead of a max-pool, two comparisons and
  a select (four kernels, each reading and writing the whole batch of maps).
- :func:`flood_crops`: each crop's 8-connected component of its centre pixel, grown for
  ``steps`` 3×3 dilations inside the crop's mask, and whether one more dilation changes it
  (converged). One program a crop runs every step, the crop in a scratch buffer with a zero
  border, instead of two kernels (max-pool, multiply) a step: with 31 steps, 64 launches of a
  tiny tensor became one.

The nineteenth session's e2e profile had 71.5 max-pool kernels a push of 96 frames (0.89 ms of
the GPU's 17.6), almost all of them the flood's. With these two kernels the twentieth
session's profile had none, and the path's kernels other than the network's took 0.98 ms
less a push; four processes on one H200 went from 5,172 to 5,467 frames/s
(``docs/benchmarks/e2e.md``). Both kernels run in Triton's interpreter on CPU tensors
(``TRITON_INTERPRET=1``), where the tests check them against the PyTorch versions.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor


@triton.jit
def _peak_kernel(p_ptr, thr_ptr, out_ptr, H, W, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    n = tl.program_id(2)
    rows = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    cols = tl.program_id(0) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    inside = (rows < H) & (cols < W)
    base = p_ptr + n.to(tl.int64) * H * W
    centre = tl.load(base + rows * W + cols, mask=inside, other=0.0)
    best = tl.full((BLOCK_H, BLOCK_W), float("-inf"), tl.float32)
    for dy in tl.static_range(-1, 2):
        for dx in tl.static_range(-1, 2):
            r, c = rows + dy, cols + dx
            ok = inside & (r >= 0) & (r < H) & (c >= 0) & (c < W)
            v = tl.load(base + r * W + c, mask=ok, other=float("-inf"))
            best = tl.maximum(best, v, propagate_nan=tl.PropagateNan.ALL)
    thr = tl.load(thr_ptr + n)
    peak = (centre > thr) & (centre == best)
    out = tl.where(peak, centre, -1.0)
    tl.store(out_ptr + n.to(tl.int64) * H * W + rows * W + cols, out, mask=inside)


def peak_values(probs: Tensor, thresholds: Tensor) -> Tensor:
    """``probs (N, h, w)`` float32 and ``thresholds (N,)`` → ``(N, h·w)``: each local maximum
    (3×3, as ``F.max_pool2d(…, 3, 1, 1)``: the map's edge padded with −inf) that is above its
    map's threshold keeps its probability, every other pixel is −1."""
    n, h, w = probs.shape
    probs = probs.contiguous()
    thr = thresholds.to(probs.dtype).contiguous()
    out = torch.empty(n, h * w, dtype=probs.dtype, device=probs.device)
    block_h, block_w = 16, 64
    grid = (triton.cdiv(w, block_w), triton.cdiv(h, block_h), n)
    _peak_kernel[grid](probs, thr, out, h, w, BLOCK_H=block_h, BLOCK_W=block_w, num_warps=4)
    return out


@triton.jit
def _flood_kernel(mask_ptr, valid_ptr, scratch_ptr, comp_ptr, conv_ptr, S, STEPS,
                  SP: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, SP)[:, None]
    c = tl.arange(0, SP)[None, :]
    inside = (r < S) & (c < S)
    m = tl.load(mask_ptr + i.to(tl.int64) * S * S + r * S + c, mask=inside, other=0).to(tl.float32)
    seed = tl.load(valid_ptr + i).to(tl.float32)
    centre = S // 2
    reach = tl.where((r == centre) & (c == centre), seed, 0.0)
    # the crop at rows, columns 1..SP of a (SP + 2)² buffer whose border stays zero: reach is
    # 0 or 1, so a zero border is max_pool2d's −inf padding for the centre's 3x3 maximum
    pad = SP + 2
    scratch = scratch_ptr + i.to(tl.int64) * pad * pad
    here = scratch + (r + 1) * pad + (c + 1)
    grown = reach
    for step in range(STEPS + 1):  # the last dilation tests convergence
        tl.store(here, reach)
        tl.debug_barrier()
        grown = reach
        for dy in tl.static_range(-1, 2):
            for dx in tl.static_range(-1, 2):
                grown = tl.maximum(grown, tl.load(here + dy * pad + dx))
        grown = grown * m
        tl.debug_barrier()  # every thread has read before the next store
        if step < STEPS:
            reach = grown
    tl.store(comp_ptr + i.to(tl.int64) * S * S + r * S + c, (reach > 0).to(tl.int8), mask=inside)
    same = tl.sum(tl.where(grown == reach, 0, 1).to(tl.int32), axis=1)
    tl.store(conv_ptr + i, (tl.sum(same, axis=0) == 0).to(tl.int8))


def flood_crops(mask: Tensor, valid: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """``mask (N, K, S, S)`` bool, ``valid (N, K)`` bool → ``reach (N, K, S, S)`` bool: the
    pixels of each crop's mask reached from its centre (if valid) in ``steps`` 3×3 dilations,
    each kept inside the mask; and ``converged (N, K)`` bool: one more dilation adds nothing."""
    n, k, s, _ = mask.shape
    sp = triton.next_power_of_2(s)
    flat = mask.reshape(n * k, s, s).to(torch.int8).contiguous()
    seeds = valid.reshape(n * k).to(torch.int8).contiguous()
    scratch = torch.zeros(n * k, sp + 2, sp + 2, dtype=torch.float32, device=mask.device)
    comp = torch.empty(n * k, s, s, dtype=torch.int8, device=mask.device)
    conv = torch.empty(n * k, dtype=torch.int8, device=mask.device)
    _flood_kernel[(n * k,)](flat, seeds, scratch, comp, conv, s, steps, SP=sp,
                            num_warps=4 if sp >= 32 else 1)
    return comp.view(n, k, s, s).bool(), conv.view(n, k).bool()

"""The end of a BasicBlock in one kernel: squeeze-excitation gates, scale, residual, ReLU; and,
for branch 0's last block, the HRNet fuse output and the head (Triton).

Each program handles ``BLOCK_M`` pixels × all C channels of one image. It first recomputes the
image's SE gates from the float32 channel sums that the producing conv accumulated:
``s = sigmoid(fc2 @ relu(fc1 @ (sum / HW)))`` (C ≤ 128, C/16 hidden units: about 4 k
multiply-adds, cheaper than a launch), then ``t = relu(y * s + residual)``. Optionally ``t`` is
stored; optionally ``f = relu(t + bias + sum_k term_k)`` follows, with up to three 1×1 terms read
from coarser NHWC buffers at ``(h >> UP, w >> UP)`` (see :func:`ttball.kernels.conv.accumulate`),
and ``f`` is stored or mapped by the head ``(C → HEAD_N)`` and stored as float32 with any strides
(the network's ``(B, 3, H, W)`` logits). Without terms, ``PROJ`` maps ``t`` by a 1×1
``(C → HEAD_PAD)`` weight (the head's pointers) and stores it to ``f`` at ``t``'s resolution:
a coarse term of a finer branch's fuse output, computed once per coarse pixel
(:func:`ttball.kernels.build_plan`'s ``project_terms``). ``PDL``: see
:mod:`ttball.kernels.gdc` (the SE weights are loaded before the wait for the previous kernel).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ttball.kernels.conv import accumulate_nhwc
from ttball.kernels.gdc import grid_launch_dependents, grid_wait


@triton.jit
def _map_1x1(v, w_ptr, bias_ptr, out_ptr, b, ho, wo, sob, soh, sow, soc, mask, rc,
             HEAD_N: tl.constexpr, HEAD_PAD: tl.constexpr):
    """``v (BLOCK_M, C) @ w (C, HEAD_PAD) + bias``, its first ``HEAD_N`` channels stored at
    pixels ``(ho, wo)`` of image ``b`` of ``out`` with any strides: the head, or a projection."""
    rn = tl.arange(0, HEAD_PAD)
    w = tl.load(w_ptr + rc[:, None] * HEAD_PAD + rn[None, :])
    y = tl.dot(v.to(tl.float16), w) + tl.load(bias_ptr + rn)[None, :]
    out = out_ptr + b.to(tl.int64) * sob + ho[:, None] * soh + wo[:, None] * sow
    out += rn[None, :] * soc
    tl.store(out, y.to(out_ptr.dtype.element_ty), mask=mask & (rn[None, :] < HEAD_N))


@triton.jit
def se_tail_kernel(
    y_ptr, res_ptr, sum_ptr, fc1_ptr, fc2_ptr, t_ptr,
    bias_ptr, x1_ptr, w1_ptr, x2_ptr, w2_ptr, x3_ptr, w3_ptr, f_ptr, hw_ptr, hb_ptr,
    Ho, Wo, inv_hw, sob, soh, sow, soc,
    C: tl.constexpr, HID: tl.constexpr, STORE_T: tl.constexpr, N_TERMS: tl.constexpr,
    C1: tl.constexpr, U1: tl.constexpr, BK1: tl.constexpr,
    C2: tl.constexpr, U2: tl.constexpr, BK2: tl.constexpr,
    C3: tl.constexpr, U3: tl.constexpr, BK3: tl.constexpr,
    HEAD: tl.constexpr, HEAD_N: tl.constexpr, HEAD_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, PDL: tl.constexpr = False, PROJ: tl.constexpr = False,
):
    b = tl.program_id(1)
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = m < Ho * Wo
    rc = tl.arange(0, C)
    rh = tl.arange(0, HID)

    fc1 = tl.load(fc1_ptr + rc[:, None] * HID + rh[None, :])  # (C, HID) = fc1.T
    fc2 = tl.load(fc2_ptr + rh[:, None] * C + rc[None, :])  # (HID, C) = fc2.T
    if PDL:  # above: weights only; below: the previous kernel's outputs (ttball.kernels.gdc)
        grid_wait()
        grid_launch_dependents()
    mean = tl.load(sum_ptr + b * C + rc) * inv_hw
    hidden = tl.maximum(tl.sum(mean[:, None] * fc1, axis=0), 0.0)
    gate = tl.sigmoid(tl.sum(hidden[:, None] * fc2, axis=0))

    offs = b.to(tl.int64) * Ho * Wo * C + m[:, None] * C + rc[None, :]
    mask = m_mask[:, None]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    t = tl.maximum(y * gate[None, :] + r, 0.0)
    if STORE_T:
        tl.store(t_ptr + offs, t.to(t_ptr.dtype.element_ty), mask=mask)
    ho = m // Wo
    wo = m % Wo
    if PROJ:
        _map_1x1(t, hw_ptr, hb_ptr, f_ptr, b, ho, wo, sob, soh, sow, soc, mask, rc, HEAD_N,
                 HEAD_PAD)
    if N_TERMS > 0:
        f = t + tl.load(bias_ptr + rc)[None, :]
        f = accumulate_nhwc(f, x1_ptr, w1_ptr, b, ho, wo, m_mask, Ho, Wo, C1, 1, 1, U1, BK1, C)
        if N_TERMS > 1:
            f = accumulate_nhwc(f, x2_ptr, w2_ptr, b, ho, wo, m_mask, Ho, Wo, C2, 1, 1, U2,
                                BK2, C)
        if N_TERMS > 2:
            f = accumulate_nhwc(f, x3_ptr, w3_ptr, b, ho, wo, m_mask, Ho, Wo, C3, 1, 1, U3,
                                BK3, C)
        f = tl.maximum(f, 0.0)
        if HEAD:
            _map_1x1(f, hw_ptr, hb_ptr, f_ptr, b, ho, wo, sob, soh, sow, soc, mask, rc, HEAD_N,
                     HEAD_PAD)
        else:
            tl.store(f_ptr + offs, f.to(f_ptr.dtype.element_ty), mask=mask)

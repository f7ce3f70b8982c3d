"""Implicit-GEMM convolution over NHWC FP16 activations with a fused epilogue (Triton).

One program computes ``BLOCK_M`` consecutive output pixels of one image × all output channels
(``BLOCK_N`` = Cout padded to a power of two ≥ 16): ``M = H_out * W_out`` per image, ``N = Cout``,
``K = k * k * Cin``. The K loop runs over (tap, channel chunk) pairs in one pipelined loop; each
iteration gathers a ``(BLOCK_M, BLOCK_K)`` activation tile (zero outside the image) and a
``(BLOCK_K, BLOCK_N)`` weight tile and accumulates with ``tl.dot`` in float32.

A step sums up to four *terms* (convolutions of different sources into the same accumulator):
term 0 reads a source with explicit strides (the network's float32 NCHW batch is read in place),
terms 1-3 read contiguous NHWC FP16 buffers. A 1×1 term with ``UP > 0`` reads its source at
``(h >> UP, w >> UP)``: a convolution of a ``2**UP`` coarser map followed by nearest upsampling.

Epilogue: ``+ bias``, ``+ addend`` (an NHWC buffer of Cout channels, optionally ``2**ADD_UP``
coarser), the per-(image, channel) sum of the result before ReLU atomically added to a float32
``(B, Cout)`` buffer (squeeze-excitation's global mean), optional ReLU, store (any strides, any
dtype: the result is cast to the output's element type).

Weights are packed by :func:`pack_weight`: ``(k * k * CIN_PAD, BLOCK_N)`` FP16, row
``(kh * k + kw) * CIN_PAD + c``, zero-padded in both dimensions.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor


def padded(n: int) -> int:
    """Channels padded for ``tl.dot``: a power of two, at least 16."""
    return max(16, triton.next_power_of_2(n))


def pack_weight(weight: Tensor, device: torch.device) -> Tensor:
    """``(Cout, Cin, k, k)`` → ``(k * k * padded(Cin), padded(Cout))`` FP16 on ``device``."""
    cout, cin, kh, kw = weight.shape
    packed = torch.zeros(kh * kw, padded(cin), padded(cout), dtype=torch.float32)
    packed[:, :cin, :cout] = weight.permute(2, 3, 1, 0).reshape(kh * kw, cin, cout)
    return packed.reshape(kh * kw * padded(cin), padded(cout)).to(device, torch.float16)


def block_k(cin: int) -> int:
    """K chunk per loop iteration: all (padded) input channels up to 64."""
    return min(padded(cin), 64)


@triton.jit
def accumulate(
    acc, x_ptr, w_ptr, x_base, ho, wo, m_mask, H_in, W_in, sxh, sxw, sxc,
    CIN: tl.constexpr, CIN_PAD: tl.constexpr, KS: tl.constexpr, STRIDE: tl.constexpr,
    UP: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """``acc (BLOCK_M, BLOCK_N) += conv(x)`` at output pixels ``(ho, wo)``; ``x_base`` is the
    int64 offset of this image in ``x``."""
    rk = tl.arange(0, BLOCK_K)
    rn = tl.arange(0, BLOCK_N)
    chunks = CIN_PAD // BLOCK_K
    for it in range(KS * KS * chunks):
        tap = it // chunks
        c = (it % chunks) * BLOCK_K + rk
        if UP > 0:
            hi = ho >> UP
            wi = wo >> UP
            ok = m_mask
        else:
            hi = ho * STRIDE + tap // KS - KS // 2
            wi = wo * STRIDE + tap % KS - KS // 2
            ok = m_mask & (hi >= 0) & (hi < H_in) & (wi >= 0) & (wi < W_in)
        mask = ok[:, None]
        if CIN != CIN_PAD:
            mask = mask & (c[None, :] < CIN)
        ptrs = x_ptr + x_base + hi[:, None] * sxh + wi[:, None] * sxw + c[None, :] * sxc
        a = tl.load(ptrs, mask=mask, other=0.0).to(tl.float16)
        w = tl.load(w_ptr + (it * BLOCK_K + rk)[:, None] * BLOCK_N + rn[None, :])
        acc = tl.dot(a, w, acc)
    return acc


@triton.jit
def accumulate_nhwc(
    acc, x_ptr, w_ptr, b, ho, wo, m_mask, Ho, Wo,
    CIN: tl.constexpr, KS: tl.constexpr, STRIDE: tl.constexpr, UP: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """:func:`accumulate` for a contiguous NHWC FP16 source whose size follows from the
    output's: ``H_in = (Ho * STRIDE) >> UP`` (inputs have even sizes: H, W multiples of 8)."""
    H_in = (Ho * STRIDE) >> UP
    W_in = (Wo * STRIDE) >> UP
    x_base = b.to(tl.int64) * H_in * W_in * CIN
    return accumulate(
        acc, x_ptr, w_ptr, x_base, ho, wo, m_mask, H_in, W_in, W_in * CIN, CIN, 1,
        CIN, CIN, KS, STRIDE, UP, BLOCK_K, BLOCK_N,
    )


@triton.jit
def conv_kernel(
    out_ptr, bias_ptr, add_ptr, sum_ptr,
    x0_ptr, w0_ptr, x1_ptr, w1_ptr, x2_ptr, w2_ptr, x3_ptr, w3_ptr,
    Ho, Wo, sob, soh, sow, soc,
    H0, W0, sx0b, sx0h, sx0w, sx0c,
    COUT: tl.constexpr, N_TERMS: tl.constexpr,
    C0: tl.constexpr, P0: tl.constexpr, K0: tl.constexpr, S0: tl.constexpr, U0: tl.constexpr,
    BK0: tl.constexpr,
    C1: tl.constexpr, K1: tl.constexpr, S1: tl.constexpr, U1: tl.constexpr, BK1: tl.constexpr,
    C2: tl.constexpr, K2: tl.constexpr, S2: tl.constexpr, U2: tl.constexpr, BK2: tl.constexpr,
    C3: tl.constexpr, K3: tl.constexpr, S3: tl.constexpr, U3: tl.constexpr, BK3: tl.constexpr,
    HAS_ADD: tl.constexpr, ADD_UP: tl.constexpr, HAS_SUM: tl.constexpr, RELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    b = tl.program_id(1)
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = m < Ho * Wo
    ho = m // Wo
    wo = m % Wo
    rn = tl.arange(0, BLOCK_N)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = accumulate(
        acc, x0_ptr, w0_ptr, b.to(tl.int64) * sx0b, ho, wo, m_mask, H0, W0, sx0h, sx0w, sx0c,
        C0, P0, K0, S0, U0, BK0, BLOCK_N,
    )
    if N_TERMS > 1:
        acc = accumulate_nhwc(acc, x1_ptr, w1_ptr, b, ho, wo, m_mask, Ho, Wo, C1, K1, S1, U1,
                              BK1, BLOCK_N)
    if N_TERMS > 2:
        acc = accumulate_nhwc(acc, x2_ptr, w2_ptr, b, ho, wo, m_mask, Ho, Wo, C2, K2, S2, U2,
                              BK2, BLOCK_N)
    if N_TERMS > 3:
        acc = accumulate_nhwc(acc, x3_ptr, w3_ptr, b, ho, wo, m_mask, Ho, Wo, C3, K3, S3, U3,
                              BK3, BLOCK_N)

    n_mask = rn < COUT
    acc += tl.load(bias_ptr + rn)[None, :]
    if HAS_ADD:
        Ha = Ho >> ADD_UP
        Wa = Wo >> ADD_UP
        pa = (ho >> ADD_UP) * Wa + (wo >> ADD_UP)
        add_ptrs = add_ptr + b.to(tl.int64) * Ha * Wa * COUT + pa[:, None] * COUT + rn[None, :]
        acc += tl.load(add_ptrs, mask=m_mask[:, None] & n_mask[None, :], other=0.0).to(tl.float32)
    if HAS_SUM:
        part = tl.sum(tl.where(m_mask[:, None], acc, 0.0), axis=0)
        tl.atomic_add(sum_ptr + b * COUT + rn, part, mask=n_mask, sem="relaxed")
    if RELU:
        acc = tl.maximum(acc, 0.0)
    out_ptrs = out_ptr + b.to(tl.int64) * sob + ho[:, None] * soh + wo[:, None] * sow
    out_ptrs += rn[None, :] * soc
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])

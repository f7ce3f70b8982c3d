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

Epilogue (:func:`epilogue`): ``+ bias``, ``+ addend`` (an NHWC buffer of Cout channels,
optionally ``2**ADD_UP`` coarser), the per-(image, channel) sum of the result before ReLU
atomically added to a float32 ``(B, Cout)`` buffer (squeeze-excitation's global mean), optional
ReLU, store (any strides, any dtype: the result is cast to the output's element type).

Weights are packed by :func:`pack_weight`: ``(k * k * CIN_PAD, BLOCK_N)`` FP16, row
``(kh * k + kw) * CIN_PAD + c``, zero-padded in both dimensions.

Variants (constexprs; the executor's tuner picks per step and shape, see ``Config``):

- ``TILE_W > 0``: a program covers a 2-D tile of ``(BLOCK_M // TILE_W) × TILE_W`` output pixels
  instead of a run of ``BLOCK_M`` consecutive ones, so the 3×3 halo it reads is ~1.4-1.7× its
  pixels instead of ~3×.
- ``L1``: the activation gathers are ``cp.async.ca`` (cached in L1) instead of Triton's default
  ``cp.async.cg`` (L2 only) for 16-byte copies. The first H200 run put every 3×3 step at ~6 TB/s
  of gathered bytes (9 taps × Cin × 2 B per output pixel; ``triton-h200.md``): the L2 serving
  each tap again. With L1 the re-reads of a tile's halo stay in the SM.
- ``T0``-``T3`` (taps per K chunk, :func:`accumulate_taps`): a K chunk holds ``TAPS`` taps ×
  ``BLOCK_K // TAPS`` channels, so a 16-channel 3×3 runs 3 iterations of K = 64 instead of 9 of
  K = 16 (taps past the 9th are masked, their weight rows read as zero).
- ``IM0`` (term 0 only, :func:`accumulate_im2col`): K ordered ``(c, kh, kw)`` and padded once,
  for Cin < 16 (the 9-channel stem: K = 81 → 128 instead of 9 taps × 16), weights packed by
  :func:`pack_weight_im2col`.
- ``TMA`` (term 0 only, a 3×3 stride-1 NHWC FP16 source with a power-of-two Cin ≥ 16, 2-D
  tiles): each (tap, channel chunk) is one tensor-memory-accelerator copy of the tile's
  ``(1, BLOCK_M // TILE_W, TILE_W, BLOCK_K)`` box shifted by the tap, through a
  :class:`~triton.tools.tensor_descriptor.TensorDescriptor` of the source; the copy engine
  zero-fills the box outside the image (negative coordinates included), so none of the
  gathers' address and mask arithmetic is left (about half of a 16-channel step's ~700
  instructions per warp). Measured on an H200 (seventh session, ``triton-h200.md``): faster
  for 32-128 input channels (1.01-1.10× per shape), slower for 16 (4 KB boxes).
- ``PDL``: launched with programmatic dependent launch (:mod:`ttball.kernels.gdc`); the program
  waits for the previous kernel after its index arithmetic, before its first load.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ttball.kernels.gdc import grid_launch_dependents, grid_wait


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


def im2col_k(cin: int, ksize: int) -> int:
    """Padded K of :func:`accumulate_im2col`: ``cin * k * k`` rounded up to a power of two."""
    return max(16, triton.next_power_of_2(cin * ksize * ksize))


def pack_weight_im2col(weight: Tensor, device: torch.device) -> Tensor:
    """``(Cout, Cin, k, k)`` → ``(im2col_k, padded(Cout))`` FP16, row ``c * k * k + kh * k + kw``."""
    cout, cin, kh, kw = weight.shape
    packed = torch.zeros(im2col_k(cin, kh), padded(cout), dtype=torch.float32)
    packed[: cin * kh * kw, :cout] = weight.reshape(cout, cin * kh * kw).T
    return packed.to(device, torch.float16)


def chunk_plan(cin: int, ksize: int, k_chunk: int) -> tuple[int, int]:
    """``(taps per K chunk, BLOCK_K)`` of :func:`accumulate_taps` for a ``k_chunk`` request
    (0: one tap per chunk, :func:`block_k` channels, as in :func:`accumulate`)."""
    if k_chunk == 0 or ksize == 1:
        return 1, block_k(cin)
    p = padded(cin)
    if p >= k_chunk:
        return 1, k_chunk
    taps = min(k_chunk // p, triton.next_power_of_2(ksize * ksize))
    return taps, taps * p


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
def _gather(ptrs, mask, L1: tl.constexpr):
    if L1:
        return tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".ca").to(tl.float16)
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float16)


@triton.jit
def accumulate_taps(
    acc, x_ptr, w_ptr, x_base, ho, wo, m_mask, H_in, W_in, sxh, sxw, sxc,
    CIN: tl.constexpr, CIN_PAD: tl.constexpr, KS: tl.constexpr, STRIDE: tl.constexpr,
    UP: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, TAPS: tl.constexpr,
    L1: tl.constexpr,
):
    """:func:`accumulate` with ``TAPS`` taps × ``BLOCK_K // TAPS`` channels per K chunk and
    optionally L1-cached gathers; same packed weights (row ``tap * CIN_PAD + c``), rows of
    the taps past ``KS * KS`` masked to zero. Offsets split into a per-pixel part (M) and a
    per-column part (K): contiguous runs of ``BLOCK_K // TAPS`` channels stay 16-byte copies.
    Channel chunks are the outer loop: a wide input (128 channels) passes all its taps over
    one chunk's halo (~23 KB for a 128-pixel tile) while that is still in L1."""
    rk = tl.arange(0, BLOCK_K)
    rn = tl.arange(0, BLOCK_N)
    slot = rk // (BLOCK_K // TAPS)
    ck = rk % (BLOCK_K // TAPS)
    chunks = CIN_PAD // (BLOCK_K // TAPS)
    groups = (KS * KS + TAPS - 1) // TAPS
    if UP > 0:
        hp = ho >> UP
        wp = wo >> UP
    else:
        hp = ho * STRIDE - KS // 2
        wp = wo * STRIDE - KS // 2
    pix = hp * sxh + wp * sxw
    base = x_ptr + x_base
    for it in range(groups * chunks):
        tap = (it % groups) * TAPS + slot
        c = (it // groups) * (BLOCK_K // TAPS) + ck
        dh = tap // KS
        dw = tap % KS
        hi = hp[:, None] + dh[None, :]
        wi = wp[:, None] + dw[None, :]
        mask = m_mask[:, None] & (hi >= 0) & (hi < H_in) & (wi >= 0) & (wi < W_in)
        if groups * TAPS != KS * KS:
            mask = mask & (tap < KS * KS)[None, :]
        if CIN != CIN_PAD:
            mask = mask & (c < CIN)[None, :]
        a = _gather(base + pix[:, None] + (dh * sxh + dw * sxw + c * sxc)[None, :], mask, L1)
        rows = tap * CIN_PAD + c
        w_ptrs = w_ptr + rows[:, None] * BLOCK_N + rn[None, :]
        if groups * TAPS != KS * KS:
            w = tl.load(w_ptrs, mask=(tap < KS * KS)[:, None], other=0.0)
        else:
            w = tl.load(w_ptrs)
        acc = tl.dot(a, w, acc)
    return acc


@triton.jit
def accumulate_taps_nhwc(
    acc, x_ptr, w_ptr, b, ho, wo, m_mask, Ho, Wo,
    CIN: tl.constexpr, KS: tl.constexpr, STRIDE: tl.constexpr, UP: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, TAPS: tl.constexpr, L1: tl.constexpr,
):
    """:func:`accumulate_taps` for a contiguous NHWC FP16 source (as :func:`accumulate_nhwc`)."""
    H_in = (Ho * STRIDE) >> UP
    W_in = (Wo * STRIDE) >> UP
    x_base = b.to(tl.int64) * H_in * W_in * CIN
    return accumulate_taps(
        acc, x_ptr, w_ptr, x_base, ho, wo, m_mask, H_in, W_in, W_in * CIN, CIN, 1,
        CIN, CIN, KS, STRIDE, UP, BLOCK_K, BLOCK_N, TAPS, L1,
    )


@triton.jit
def accumulate_im2col(
    acc, x_ptr, w_ptr, x_base, ho, wo, m_mask, H_in, W_in, sxh, sxw, sxc,
    CIN: tl.constexpr, KS: tl.constexpr, STRIDE: tl.constexpr, K_PAD: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, L1: tl.constexpr,
):
    """``acc += conv(x)`` with K ordered ``(c, kh, kw)`` (weights from
    :func:`pack_weight_im2col`): ``CIN * KS * KS`` columns padded to ``K_PAD`` in chunks of
    ``BLOCK_K``. For few input channels (the stem's 9), where tap-major K would pad each tap."""
    rk = tl.arange(0, BLOCK_K)
    rn = tl.arange(0, BLOCK_N)
    hp = ho * STRIDE - KS // 2
    wp = wo * STRIDE - KS // 2
    pix = hp * sxh + wp * sxw
    base = x_ptr + x_base
    for it in range(K_PAD // BLOCK_K):
        k = it * BLOCK_K + rk
        c = k // (KS * KS)
        dh = (k % (KS * KS)) // KS
        dw = k % KS
        hi = hp[:, None] + dh[None, :]
        wi = wp[:, None] + dw[None, :]
        mask = m_mask[:, None] & (hi >= 0) & (hi < H_in) & (wi >= 0) & (wi < W_in)
        mask = mask & (k < CIN * KS * KS)[None, :]
        a = _gather(base + pix[:, None] + (dh * sxh + dw * sxw + c * sxc)[None, :], mask, L1)
        w = tl.load(w_ptr + k[:, None] * BLOCK_N + rn[None, :])
        acc = tl.dot(a, w, acc)
    return acc


@triton.jit
def accumulate_tma(
    acc, x_desc, w_ptr, b, h0, w0,
    CIN: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
    TILE_H: tl.constexpr, TILE_W: tl.constexpr,
):
    """``acc (TILE_H * TILE_W, BLOCK_N) += conv3x3(x)`` for the output tile at ``(h0, w0)`` of
    image ``b``: one descriptor load per (tap, channel chunk), its box shifted by the tap
    (stride 1, padding 1; the copy engine zero-fills outside the image). Weights as
    :func:`pack_weight` (row ``tap * CIN + c``)."""
    rk = tl.arange(0, BLOCK_K)
    rn = tl.arange(0, BLOCK_N)
    chunks = CIN // BLOCK_K
    for it in range(9 * chunks):
        tap = it // chunks
        a = x_desc.load([b, h0 + tap // 3 - 1, w0 + tap % 3 - 1, (it % chunks) * BLOCK_K])
        a = tl.reshape(a, (TILE_H * TILE_W, BLOCK_K))
        w = tl.load(w_ptr + (it * BLOCK_K + rk)[:, None] * BLOCK_N + rn[None, :])
        acc = tl.dot(a, w, acc)
    return acc


@triton.jit
def accumulate_term(
    acc, x_ptr, w_ptr, b, ho, wo, m_mask, Ho, Wo,
    CIN: tl.constexpr, KS: tl.constexpr, STRIDE: tl.constexpr, UP: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, TAPS: tl.constexpr, L1: tl.constexpr,
):
    """Terms 1-3 of :func:`conv_kernel`: the original loop unless a variant is asked for."""
    if TAPS == 1 and not L1:
        return accumulate_nhwc(acc, x_ptr, w_ptr, b, ho, wo, m_mask, Ho, Wo, CIN, KS, STRIDE,
                               UP, BLOCK_K, BLOCK_N)
    return accumulate_taps_nhwc(acc, x_ptr, w_ptr, b, ho, wo, m_mask, Ho, Wo, CIN, KS, STRIDE,
                                UP, BLOCK_K, BLOCK_N, TAPS, L1)


@triton.jit
def conv_kernel(
    out_ptr, bias_ptr, add_ptr, sum_ptr,
    x0_ptr, w0_ptr, x1_ptr, w1_ptr, x2_ptr, w2_ptr, x3_ptr, w3_ptr,
    Ho, Wo, sob, soh, sow, soc,
    H0, W0, sx0b, sx0h, sx0w, sx0c, NB,
    COUT: tl.constexpr, N_TERMS: tl.constexpr,
    C0: tl.constexpr, P0: tl.constexpr, K0: tl.constexpr, S0: tl.constexpr, U0: tl.constexpr,
    BK0: tl.constexpr,
    C1: tl.constexpr, K1: tl.constexpr, S1: tl.constexpr, U1: tl.constexpr, BK1: tl.constexpr,
    C2: tl.constexpr, K2: tl.constexpr, S2: tl.constexpr, U2: tl.constexpr, BK2: tl.constexpr,
    C3: tl.constexpr, K3: tl.constexpr, S3: tl.constexpr, U3: tl.constexpr, BK3: tl.constexpr,
    HAS_ADD: tl.constexpr, ADD_UP: tl.constexpr, HAS_SUM: tl.constexpr, RELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    TILE_W: tl.constexpr = 0, L1: tl.constexpr = False, IM0: tl.constexpr = False,
    T0: tl.constexpr = 1, T1: tl.constexpr = 1, T2: tl.constexpr = 1, T3: tl.constexpr = 1,
    PDL: tl.constexpr = False, TMA: tl.constexpr = False, PROGRAMS: tl.constexpr = 0,
):
    """One output tile per program (grid: tiles × NB images), or, with ``PROGRAMS`` > 0, a
    grid of ``PROGRAMS`` programs that each loop over every ``PROGRAMS``-th tile of all
    images: a step that leaves the rest of the GPU to steps running beside it."""
    if TILE_W > 0:
        tiles = tl.cdiv(Ho, BLOCK_M // TILE_W) * tl.cdiv(Wo, TILE_W)
    else:
        tiles = tl.cdiv(Ho * Wo, BLOCK_M)
    if PDL:  # no memory touched before; after: the previous kernel's outputs (ttball.kernels.gdc)
        grid_wait()
        grid_launch_dependents()
    if PROGRAMS > 0:
        for t in range(tl.program_id(0), tiles * NB, PROGRAMS):
            _conv_tile(
                out_ptr, bias_ptr, add_ptr, sum_ptr,
                x0_ptr, w0_ptr, x1_ptr, w1_ptr, x2_ptr, w2_ptr, x3_ptr, w3_ptr,
                Ho, Wo, sob, soh, sow, soc, H0, W0, sx0b, sx0h, sx0w, sx0c, t // tiles, t % tiles,
                COUT, N_TERMS, C0, P0, K0, S0, U0, BK0, C1, K1, S1, U1, BK1,
                C2, K2, S2, U2, BK2, C3, K3, S3, U3, BK3, HAS_ADD, ADD_UP, HAS_SUM, RELU,
                BLOCK_M, BLOCK_N, TILE_W, L1, IM0, T0, T1, T2, T3, TMA,
            )
    else:
        _conv_tile(
            out_ptr, bias_ptr, add_ptr, sum_ptr,
            x0_ptr, w0_ptr, x1_ptr, w1_ptr, x2_ptr, w2_ptr, x3_ptr, w3_ptr,
            Ho, Wo, sob, soh, sow, soc, H0, W0, sx0b, sx0h, sx0w, sx0c,
            tl.program_id(1), tl.program_id(0),
            COUT, N_TERMS, C0, P0, K0, S0, U0, BK0, C1, K1, S1, U1, BK1,
            C2, K2, S2, U2, BK2, C3, K3, S3, U3, BK3, HAS_ADD, ADD_UP, HAS_SUM, RELU,
            BLOCK_M, BLOCK_N, TILE_W, L1, IM0, T0, T1, T2, T3, TMA,
        )


@triton.jit
def _conv_tile(
    out_ptr, bias_ptr, add_ptr, sum_ptr,
    x0_ptr, w0_ptr, x1_ptr, w1_ptr, x2_ptr, w2_ptr, x3_ptr, w3_ptr,
    Ho, Wo, sob, soh, sow, soc, H0, W0, sx0b, sx0h, sx0w, sx0c, b, tile,
    COUT: tl.constexpr, N_TERMS: tl.constexpr,
    C0: tl.constexpr, P0: tl.constexpr, K0: tl.constexpr, S0: tl.constexpr, U0: tl.constexpr,
    BK0: tl.constexpr,
    C1: tl.constexpr, K1: tl.constexpr, S1: tl.constexpr, U1: tl.constexpr, BK1: tl.constexpr,
    C2: tl.constexpr, K2: tl.constexpr, S2: tl.constexpr, U2: tl.constexpr, BK2: tl.constexpr,
    C3: tl.constexpr, K3: tl.constexpr, S3: tl.constexpr, U3: tl.constexpr, BK3: tl.constexpr,
    HAS_ADD: tl.constexpr, ADD_UP: tl.constexpr, HAS_SUM: tl.constexpr, RELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TILE_W: tl.constexpr, L1: tl.constexpr,
    IM0: tl.constexpr, T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr, T3: tl.constexpr,
    TMA: tl.constexpr,
):
    """Output tile ``tile`` of image ``b``: all terms, bias, addend, SE sums, ReLU, store."""
    if TILE_W > 0:  # a (BLOCK_M // TILE_W) × TILE_W tile of output pixels
        r = tl.arange(0, BLOCK_M)
        tiles_w = tl.cdiv(Wo, TILE_W)
        h0 = (tile // tiles_w) * (BLOCK_M // TILE_W)
        w0 = (tile % tiles_w) * TILE_W
        ho = h0 + r // TILE_W
        wo = w0 + r % TILE_W
        m_mask = (ho < Ho) & (wo < Wo)
    else:  # BLOCK_M consecutive output pixels
        m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        m_mask = m < Ho * Wo
        ho = m // Wo
        wo = m % Wo

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x0_base = b.to(tl.int64) * sx0b
    if TMA:  # x0_ptr is a TensorDescriptor of the NHWC source, box (1, TILE_H, TILE_W, BK0)
        acc = accumulate_tma(acc, x0_ptr, w0_ptr, b, h0, w0, C0, BK0, BLOCK_N,
                             BLOCK_M // TILE_W, TILE_W)
    elif IM0:  # P0 is the padded K here (im2col_k)
        acc = accumulate_im2col(
            acc, x0_ptr, w0_ptr, x0_base, ho, wo, m_mask, H0, W0, sx0h, sx0w, sx0c,
            C0, K0, S0, P0, BK0, BLOCK_N, L1,
        )
    elif T0 == 1 and not L1:
        acc = accumulate(
            acc, x0_ptr, w0_ptr, x0_base, ho, wo, m_mask, H0, W0, sx0h, sx0w, sx0c,
            C0, P0, K0, S0, U0, BK0, BLOCK_N,
        )
    else:
        acc = accumulate_taps(
            acc, x0_ptr, w0_ptr, x0_base, ho, wo, m_mask, H0, W0, sx0h, sx0w, sx0c,
            C0, P0, K0, S0, U0, BK0, BLOCK_N, T0, L1,
        )
    if N_TERMS > 1:
        acc = accumulate_term(acc, x1_ptr, w1_ptr, b, ho, wo, m_mask, Ho, Wo, C1, K1, S1, U1,
                              BK1, BLOCK_N, T1, L1)
    if N_TERMS > 2:
        acc = accumulate_term(acc, x2_ptr, w2_ptr, b, ho, wo, m_mask, Ho, Wo, C2, K2, S2, U2,
                              BK2, BLOCK_N, T2, L1)
    if N_TERMS > 3:
        acc = accumulate_term(acc, x3_ptr, w3_ptr, b, ho, wo, m_mask, Ho, Wo, C3, K3, S3, U3,
                              BK3, BLOCK_N, T3, L1)

    epilogue(acc, out_ptr, bias_ptr, add_ptr, sum_ptr, b, ho, wo, m_mask, Ho, Wo,
             sob, soh, sow, soc, COUT, HAS_ADD, ADD_UP, HAS_SUM, RELU, BLOCK_N)


@triton.jit
def epilogue(
    acc, out_ptr, bias_ptr, add_ptr, sum_ptr, b, ho, wo, m_mask, Ho, Wo, sob, soh, sow, soc,
    COUT: tl.constexpr, HAS_ADD: tl.constexpr, ADD_UP: tl.constexpr, HAS_SUM: tl.constexpr,
    RELU: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """The conv kernel's epilogue on ``acc (BLOCK_M, BLOCK_N)`` float32, the sum of the terms
    at output pixels ``(ho, wo)`` of image ``b`` (``m_mask``: those inside the image): + bias,
    + addend (NHWC FP16, ``2**ADD_UP`` coarser), SE sums (one atomic add per channel), ReLU,
    store through the output's strides cast to its element type. Also the epilogue of
    :mod:`ttball.kernels.pointwise`."""
    rn = tl.arange(0, BLOCK_N)
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

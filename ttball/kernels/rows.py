"""A 3×3 stride-1 convolution of few channels that walks down the image a row at a time and
keeps the input rows it has loaded in registers (Triton): the fifth step of issue 9
(``docs/benchmarks/triton-h200.md``).

Why: the implicit-GEMM kernel (:mod:`ttball.kernels.conv`) gathers each input pixel once per
tap, nine times, and the 16- and 32-channel steps ran at about three times their DRAM floor
whatever the tile, pipeline or cache hint (the third and seventh sessions' explore runs). The
ncu profile of a 16 → 16 step showed the L2 70 % busy serving those re-reads and ~700
instructions per warp of address and mask arithmetic for 32 pixels.

How: a program owns ``BLOCK_W`` columns × ``ROWS`` output rows of one image and all output
channels. Before its loop it loads the nine ``(Cin, Cout)`` weight matrices (4.6 KB for 16 → 16,
18 KB for 32 → 32: registers) and the input rows above and at its first output row; each
iteration loads one new input row, three times shifted by a column (the three column taps; the
second and third loads hit L1), computes one output row with nine small ``tl.dot``, and shifts
its three rows. So each input pixel is read three times per program (two of them from L1)
instead of nine, and a row's addresses are one vector of columns. The epilogue is the conv
kernel's: bias, an optional (coarser) addend, the squeeze-excitation sums (summed over the
program's rows, one atomic add per program), ReLU, any output strides.

Measured on an H200 (seventh session): L2 traffic −40 % and instructions −37 % on a 16 → 16
step, but then bound by L1 and shared memory (90 % busy): Triton stages the ``wgmma`` operands
through shared memory. 1.00–1.15× per 16-channel step at batch 64.

Weights as :func:`ttball.kernels.conv.pack_weight`: row ``(kh * 3 + kw) * CIN + c``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ttball.kernels.gdc import grid_launch_dependents, grid_wait


@triton.jit
def _row(x_img, h, cols, H, W, rc, CIN: tl.constexpr):
    """Input row ``h`` at columns ``cols - 1``, ``cols``, ``cols + 1`` (zero outside)."""
    hv = cols * 0 + h  # as a vector: a scalar mask term does not broadcast in the interpreter
    inside = (hv >= 0) & (hv < H)
    base = x_img + h.to(tl.int64) * W * CIN + rc[None, :]
    left = cols - 1
    right = cols + 1
    a0 = tl.load(base + left[:, None] * CIN, mask=(inside & (left >= 0) & (left < W))[:, None],
                 other=0.0)
    a1 = tl.load(base + cols[:, None] * CIN, mask=(inside & (cols < W))[:, None], other=0.0)
    a2 = tl.load(base + right[:, None] * CIN, mask=(inside & (right < W))[:, None], other=0.0)
    return a0, a1, a2


@triton.jit
def conv3x3_rows_kernel(
    out_ptr, x_ptr, w_ptr, bias_ptr, add_ptr, sum_ptr,
    H, W, sob, soh, sow, soc,
    CIN: tl.constexpr, COUT: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_W: tl.constexpr, ROWS: tl.constexpr,
    HAS_ADD: tl.constexpr, ADD_UP: tl.constexpr, HAS_SUM: tl.constexpr, RELU: tl.constexpr,
    PDL: tl.constexpr = False,
):
    cols = tl.program_id(0) * BLOCK_W + tl.arange(0, BLOCK_W)
    h0 = tl.program_id(1) * ROWS
    b = tl.program_id(2)
    rc = tl.arange(0, CIN)
    rn = tl.arange(0, BLOCK_N)
    n_mask = rn < COUT
    col_mask = cols < W
    w_tap = w_ptr + rc[:, None] * BLOCK_N + rn[None, :]
    w00 = tl.load(w_tap + 0 * CIN * BLOCK_N)
    w01 = tl.load(w_tap + 1 * CIN * BLOCK_N)
    w02 = tl.load(w_tap + 2 * CIN * BLOCK_N)
    w10 = tl.load(w_tap + 3 * CIN * BLOCK_N)
    w11 = tl.load(w_tap + 4 * CIN * BLOCK_N)
    w12 = tl.load(w_tap + 5 * CIN * BLOCK_N)
    w20 = tl.load(w_tap + 6 * CIN * BLOCK_N)
    w21 = tl.load(w_tap + 7 * CIN * BLOCK_N)
    w22 = tl.load(w_tap + 8 * CIN * BLOCK_N)
    bias = tl.load(bias_ptr + rn)
    if PDL:  # above: weights, which no kernel writes; below: activations (ttball.kernels.gdc)
        grid_wait()
        grid_launch_dependents()

    x_img = x_ptr + b.to(tl.int64) * H * W * CIN
    u0, u1, u2 = _row(x_img, h0 - 1, cols, H, W, rc, CIN)  # the row above
    c0, c1, c2 = _row(x_img, h0, cols, H, W, rc, CIN)      # the current row
    part = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for i in range(ROWS):
        h = h0 + i
        d0, d1, d2 = _row(x_img, h + 1, cols, H, W, rc, CIN)  # the row below
        acc = tl.zeros((BLOCK_W, BLOCK_N), dtype=tl.float32)
        acc = tl.dot(u0, w00, acc)
        acc = tl.dot(u1, w01, acc)
        acc = tl.dot(u2, w02, acc)
        acc = tl.dot(c0, w10, acc)
        acc = tl.dot(c1, w11, acc)
        acc = tl.dot(c2, w12, acc)
        acc = tl.dot(d0, w20, acc)
        acc = tl.dot(d1, w21, acc)
        acc = tl.dot(d2, w22, acc)
        acc += bias[None, :]
        m_mask = col_mask & (cols * 0 + h < H)
        if HAS_ADD:
            Ha = H >> ADD_UP
            Wa = W >> ADD_UP
            pa = (h >> ADD_UP) * Wa + (cols >> ADD_UP)
            add_ptrs = add_ptr + b.to(tl.int64) * Ha * Wa * COUT + pa[:, None] * COUT + rn[None, :]
            acc += tl.load(add_ptrs, mask=m_mask[:, None] & n_mask[None, :],
                           other=0.0).to(tl.float32)
        if HAS_SUM:
            part += tl.sum(tl.where(m_mask[:, None], acc, 0.0), axis=0)
        if RELU:
            acc = tl.maximum(acc, 0.0)
        out_ptrs = out_ptr + b.to(tl.int64) * sob + h * soh + cols[:, None] * sow
        out_ptrs += rn[None, :] * soc
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty),
                 mask=m_mask[:, None] & n_mask[None, :])
        u0, u1, u2 = c0, c1, c2
        c0, c1, c2 = d0, d1, d2
    if HAS_SUM:
        tl.atomic_add(sum_ptr + b * COUT + rn, part, mask=n_mask, sem="relaxed")


def rows_grid(height: int, width: int, batch: int, block_w: int, rows: int) -> tuple[int, ...]:
    """Programs of :func:`conv3x3_rows_kernel` for an output of ``height × width``."""
    return (triton.cdiv(width, block_w), triton.cdiv(height, rows), batch)

"""A 3×3 convolution with its K loop split over programs, for steps too small to fill the GPU
(issue 9, batch 1).

At batch 1 the plan's last chain before the head runs at the lowest resolution: four
128 → 128 3×3 steps of 18 × 32 pixels (9 tiles of 64 pixels: 9 of 132 SMs busy), 8-9 µs each
against a byte floor of 0.3 µs, all on the critical path (``scripts/critical_path.py``,
twelfth session). Their time is the serial K loop of one program: 9 taps × 128 channels.
Here program ``(tile, image, s)`` runs only the K iterations ``s, s + SPLITS, …``, adds its
partial tile into an FP32 workspace with atomics, and counts itself done on the tile's
counter; the last program of a tile adds the bias, the SE sums and the ReLU, stores FP16, and
leaves the workspace and the counter zero for the next call (or CUDA graph replay), so one
kernel does it all. The ordering is CUTLASS's semaphore: every thread's workspace atomics,
a barrier, then one release-acquire atomic on the counter; the last program reads the
workspace from L2 (``.cg``), where the atomics were performed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ttball.kernels.plan import INPUT, Conv

SPLIT_TILES = 132  # offered where a step has fewer 64-pixel tiles than an H200 has SMs


def splitk_applies(step: Conv) -> bool:
    """One 3×3 stride-1 term of an NHWC buffer with at least 64 input channels and at most
    128 output channels, no addend."""
    if len(step.terms) != 1 or step.addends:
        return False
    t = step.terms[0]
    return (t.ksize == 3 and t.stride == 1 and t.up == 0 and t.src != INPUT and t.cin >= 64
            and t.cin % 64 == 0 and step.cout <= 128)


def workspace(batch: int, height: int, width: int, block_m: int, block_n: int,
              device: torch.device) -> tuple[Tensor, Tensor]:
    """The zeroed FP32 workspace (one ``block_m × block_n`` tile per output tile) and the
    int32 counters (one per tile) of a step's split-K launch."""
    tiles = batch * triton.cdiv(height * width, block_m)
    return (torch.zeros(tiles * block_m * block_n, device=device, dtype=torch.float32),
            torch.zeros(tiles, device=device, dtype=torch.int32))


@triton.jit
def conv3x3_splitk_kernel(
    out_ptr, x_ptr, w_ptr, bias_ptr, sum_ptr, ws_ptr, count_ptr,
    Ho, Wo, sob, soh, sow, soc,
    CIN: tl.constexpr, COUT: tl.constexpr, BLOCK_N: tl.constexpr, HAS_SUM: tl.constexpr,
    RELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr,
):
    """Grid ``(tiles, images, SPLITS)``: ``BLOCK_M`` consecutive output pixels × all output
    channels per tile; ``x`` contiguous NHWC FP16 of the output's size, ``w``
    :func:`~ttball.kernels.conv.pack_weight` (row ``tap * CIN + c``)."""
    tile, b, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    tiles = tl.num_programs(0)
    r = tl.arange(0, BLOCK_M)
    m = tile * BLOCK_M + r
    m_mask = m < Ho * Wo
    ho, wo = m // Wo, m % Wo
    rk = tl.arange(0, BLOCK_K)
    rn = tl.arange(0, BLOCK_N)
    x_base = b.to(tl.int64) * Ho * Wo * CIN
    chunks: tl.constexpr = CIN // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for it in range(s, 9 * chunks, SPLITS):
        tap = it // chunks
        c = (it % chunks) * BLOCK_K + rk
        hi = ho + tap // 3 - 1
        wi = wo + tap % 3 - 1
        ok = m_mask & (hi >= 0) & (hi < Ho) & (wi >= 0) & (wi < Wo)
        a = tl.load(x_ptr + x_base + (hi * Wo + wi)[:, None] * CIN + c[None, :],
                    mask=ok[:, None], other=0.0)
        w = tl.load(w_ptr + (it * BLOCK_K + rk)[:, None] * BLOCK_N + rn[None, :])
        acc = tl.dot(a, w, acc)
    slot = b * tiles + tile
    ws = ws_ptr + slot.to(tl.int64) * BLOCK_M * BLOCK_N + r[:, None] * BLOCK_N + rn[None, :]
    tl.atomic_add(ws, acc, sem="relaxed")
    tl.debug_barrier()  # every thread's partial sums are in before the count
    done = tl.atomic_add(count_ptr + slot, 1, sem="acq_rel", scope="gpu")
    if done == SPLITS - 1:  # the tile's last program: the epilogue, then reset for the next call
        total = tl.load(ws, cache_modifier=".cg")
        tl.store(ws, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
        tl.store(count_ptr + slot, 0)
        n_mask = rn < COUT
        total += tl.load(bias_ptr + rn)[None, :]
        if HAS_SUM:
            part = tl.sum(tl.where(m_mask[:, None], total, 0.0), axis=0)
            tl.atomic_add(sum_ptr + b * COUT + rn, part, mask=n_mask, sem="relaxed")
        if RELU:
            total = tl.maximum(total, 0.0)
        out_ptrs = (out_ptr + b.to(tl.int64) * sob + ho[:, None] * soh + wo[:, None] * sow
                    + rn[None, :] * soc)
        tl.store(out_ptrs, total.to(out_ptr.dtype.element_ty),
                 mask=m_mask[:, None] & n_mask[None, :])

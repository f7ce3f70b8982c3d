"""A 3×3 convolution with its K loop split over programs, for steps too small to fill the GPU
(issue 9, batch 1).

At batch 1 the plan's last chain before the head runs at the lowest resolution: four
128 → 128 3×3 steps of 18 × 32 pixels (9 tiles of 64 pixels: 9 of 132 SMs busy), 8-9 µs each
against a byte floor of 0.3 µs, all on the critical path (``scripts/critical_path.py``,
twelfth session). Their time is the serial K loop of one program: 9 taps × 128 channels.
Here program ``(tile, image, s)`` runs only the K iterations ``s, s + SPLITS, …`` and stores
its FP32 partial tile in slice ``s`` of a workspace (plain stores: no float atomics, so the
sum's order, and the result, is the same every call). Then either

* ``FUSED``: every thread fences its stores at GPU scope, the program counts itself done on
  the tile's counter (one acquire-release atomic after a barrier), and the tile's last
  program adds the ``SPLITS`` partials, runs the epilogue and resets the counter for the
  next call or CUDA graph replay; or
* not ``FUSED``: :func:`splitk_epilogue_kernel`, a second launch, adds them up and runs it.

The first version added the partials into one workspace with float atomics and relied on a
barrier plus the counter's release to publish them; on an H200 (Triton of PyTorch 2.11) it
was wrong on 1 call in 3 and on every call for some shapes (thirteenth session,
``scripts/splitk_diag.py``), though Triton's interpreter gave the right answer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ttball.kernels.gdc import INTERPRETED
from ttball.kernels.plan import INPUT, Conv

SPLIT_TILES = 132  # offered where a step has fewer 64-pixel tiles than an H200 has SMs
FUSED = True  # the tile's last program runs the epilogue (else a second launch does)


def splitk_applies(step: Conv) -> bool:
    """One 3×3 stride-1 term of an NHWC buffer with at least 64 input channels and at most
    128 output channels, no addend."""
    if len(step.terms) != 1 or step.addends:
        return False
    t = step.terms[0]
    return (t.ksize == 3 and t.stride == 1 and t.up == 0 and t.src != INPUT and t.cin >= 64
            and t.cin % 64 == 0 and step.cout <= 128)


def workspace(batch: int, height: int, width: int, block_m: int, block_n: int, splits: int,
              device: torch.device) -> tuple[Tensor, Tensor]:
    """The FP32 workspace of a step's split-K launch (``splits`` partial tiles of
    ``block_m × block_n`` per output tile) and its zeroed int32 counters (one per tile)."""
    tiles = batch * triton.cdiv(height * width, block_m)
    return (torch.empty(splits * tiles * block_m * block_n, device=device, dtype=torch.float32),
            torch.zeros(tiles, device=device, dtype=torch.int32))


if INTERPRETED:  # one program after another: nothing to order (and no inline assembly)

    @triton.jit
    def _fence():
        pass

else:

    @triton.jit
    def _fence():
        """``fence.acq_rel.gpu`` in every thread (CUDA's ``__threadfence()``)."""
        tl.inline_asm_elementwise("fence.acq_rel.gpu; mov.u32 $0, $1;", "=r,r",
                                  [tl.full((), 0, tl.int32)], dtype=tl.int32, is_pure=False,
                                  pack=1)


@triton.jit
def _epilogue(total, out_ptr, bias_ptr, sum_ptr, b, m, Ho, Wo, sob, soh, sow, soc,
              COUT: tl.constexpr, BLOCK_N: tl.constexpr, HAS_SUM: tl.constexpr,
              RELU: tl.constexpr):
    """Bias, the SE sums (before the activation), ReLU and the FP16 store of one tile."""
    rn = tl.arange(0, BLOCK_N)
    m_mask = m < Ho * Wo
    n_mask = rn < COUT
    ho, wo = m // Wo, m % Wo
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


@triton.jit
def _partial_sum(ws_ptr, slot, slots, r, rn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 SPLITS: tl.constexpr):
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    tile = r[:, None] * BLOCK_N + rn[None, :]
    for k in tl.static_range(SPLITS):
        part = ws_ptr + ((k * slots + slot).to(tl.int64) * BLOCK_M * BLOCK_N)
        total += tl.load(part + tile, cache_modifier=".cg")
    return total


@triton.jit
def conv3x3_splitk_kernel(
    out_ptr, x_ptr, w_ptr, bias_ptr, sum_ptr, ws_ptr, count_ptr,
    Ho, Wo, sob, soh, sow, soc,
    CIN: tl.constexpr, COUT: tl.constexpr, BLOCK_N: tl.constexpr, HAS_SUM: tl.constexpr,
    RELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr,
    FUSED: tl.constexpr,
):
    """Grid ``(tiles, images, SPLITS)``: ``BLOCK_M`` consecutive output pixels × all output
    channels per tile; ``x`` contiguous NHWC FP16 of the output's size, ``w``
    :func:`~ttball.kernels.conv.pack_weight` (row ``tap * CIN + c``)."""
    tile, b, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    tiles = tl.num_programs(0)
    slots = tiles * tl.num_programs(1)
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
    part = ws_ptr + ((s * slots + slot).to(tl.int64) * BLOCK_M * BLOCK_N)
    tl.store(part + r[:, None] * BLOCK_N + rn[None, :], acc)
    if FUSED:
        _fence()  # this thread's stores are visible at GPU scope …
        tl.debug_barrier()  # … for every thread, before the count
        done = tl.atomic_add(count_ptr + slot, 1, sem="acq_rel", scope="gpu")
        if done == SPLITS - 1:  # the tile's last program: the sum and the epilogue
            _fence()
            total = _partial_sum(ws_ptr, slot, slots, r, rn, BLOCK_M, BLOCK_N, SPLITS)
            tl.store(count_ptr + slot, 0)  # for the next call
            _epilogue(total, out_ptr, bias_ptr, sum_ptr, b, m, Ho, Wo, sob, soh, sow, soc,
                      COUT, BLOCK_N, HAS_SUM, RELU)


@triton.jit
def splitk_epilogue_kernel(
    out_ptr, bias_ptr, sum_ptr, ws_ptr, Ho, Wo, sob, soh, sow, soc,
    COUT: tl.constexpr, BLOCK_N: tl.constexpr, HAS_SUM: tl.constexpr, RELU: tl.constexpr,
    BLOCK_M: tl.constexpr, SPLITS: tl.constexpr,
):
    """Grid ``(tiles, images)``: the sum of a tile's ``SPLITS`` partials and the epilogue
    (:func:`conv3x3_splitk_kernel` without ``FUSED`` stored them)."""
    tile, b = tl.program_id(0), tl.program_id(1)
    tiles = tl.num_programs(0)
    r = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    total = _partial_sum(ws_ptr, b * tiles + tile, tiles * tl.num_programs(1), r, rn,
                         BLOCK_M, BLOCK_N, SPLITS)
    _epilogue(total, out_ptr, bias_ptr, sum_ptr, b, tile * BLOCK_M + r, Ho, Wo, sob, soh,
              sow, soc, COUT, BLOCK_N, HAS_SUM, RELU)

"""Conv steps of 1×1 stride-1 terms (Triton) with the weights resident: each program of a
persistent grid loads the packed weights once and loops over many pixel tiles.

Why: the implicit-GEMM kernel (:mod:`ttball.kernels.conv`) loads the packed weights again for
every tile. For the bottleneck's ``conv3 + downsample`` (step 4 of BlurBall's plan: 32 + 64
input channels → 128 at full resolution) that is 96 × 128 FP16 = 24 KB per tile, 384 bytes of
weight per pixel at 64-pixel tiles against 192 of activations read and 256 written. They come
from L2, but each program spends its time loading them: a profile of that step on an H200
(Nsight Compute, not committed here) found it occupancy-bound well above its DRAM floor, and
smaller tiles, more programs each loading the 24 KB for fewer pixels, slower still.

How: :data:`WARPS_PER_SM` warps of programs per multiprocessor (:func:`programs_per_sm`;
never more programs than tiles).
A program loads each term's ``(padded Cin, BLOCK_N)`` weight matrix once, then takes tiles
``program_id``, ``program_id + programs``, … of ``BLOCK_M`` consecutive pixels of one image
(the conv kernel's tiles, so a tile is inside one image and the SE sums stay per image). Per
tile: one ``(BLOCK_M, padded Cin)`` load of each term's NHWC source, one ``tl.dot`` per term,
and the conv kernel's :func:`~ttball.kernels.conv.epilogue`. The tile loop is a
``tl.range`` of ``NUM_STAGES`` stages, so Triton's software pipeliner issues the next tiles'
activation loads as asynchronous copies (``cp.async``) while this one computes. Weight bytes
per pixel: 24 KB once per program, and a program gets ~560 tiles at batch 64 (64 × 2304 tiles
of 64 pixels over 396 programs on 132 SMs): under one byte a pixel, against 384.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ttball.kernels.conv import epilogue, padded
from ttball.kernels.gdc import grid_launch_dependents, grid_wait
from ttball.kernels.plan import INPUT, Conv, Step

# As many programs as fit in an SM beside each other (more would wait for a second wave):
# step 4 compiled for sm_90 (Triton 3.9, ptxas -v) takes 133 registers a thread and 69 KB of
# shared memory (~24 KB of weights, three stages of 12 KB of activations) at 64 pixels × 4
# warps, 136 and 105 KB at 128 × 8: three of the first (52 K of the 64 K registers, 213 of 228
# KB) or one of the second (two need 70 K registers). Three keep ~70 KB of copies in flight,
# where Little's law wants ~36 KB per SM at 4.8 TB/s and ~1 µs. Not timed yet: the tuner
# decides between them; tests/kernels/test_sm90_compile.py checks the shared memory.
WARPS_PER_SM = 12
INTERPRETER_SMS = 1  # the CPU (Triton's interpreter) as one SM: a grid of three 4-warp programs
MAX_WEIGHT_BYTES = 64 * 1024  # resident weights beyond this leave no shared memory to pipeline


def weight_bytes(step: Conv) -> int:
    """Bytes of the packed FP16 weights of all terms (K = the padded Cins, N = padded Cout)."""
    return 2 * sum(padded(t.cin) for t in step.terms) * padded(step.cout)


def pointwise_applies(step: Step) -> bool:
    """Whether :func:`pointwise_kernel` can run ``step``: a Conv whose terms are all 1×1,
    stride 1, not upsampled, of NHWC FP16 buffers (not the batch), at most
    :data:`MAX_WEIGHT_BYTES` of packed weights."""
    return (isinstance(step, Conv)
            and all(t.ksize == 1 and t.stride == 1 and t.up == 0 and t.src != INPUT
                    for t in step.terms)
            and weight_bytes(step) <= MAX_WEIGHT_BYTES)


def programs_per_sm(num_warps: int) -> int:
    """Resident programs of ``num_warps`` warps per SM: :data:`WARPS_PER_SM` of them, at
    least one program."""
    return max(1, WARPS_PER_SM // num_warps)


def sm_count(device: torch.device) -> int:
    """Multiprocessors of ``device`` (:data:`INTERPRETER_SMS` off CUDA)."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def pointwise_grid(tiles: int, programs: int) -> tuple[int]:
    """A persistent grid: ``programs`` programs, or one per tile if there are fewer tiles."""
    return (max(1, min(tiles, programs)),)


@triton.jit
def _weight(w_ptr, P: tl.constexpr, BLOCK_N: tl.constexpr):
    """A term's packed ``(P, BLOCK_N)`` FP16 weights (:func:`~ttball.kernels.conv.pack_weight`)."""
    rk = tl.arange(0, P)
    rn = tl.arange(0, BLOCK_N)
    return tl.load(w_ptr + rk[:, None] * BLOCK_N + rn[None, :])


@triton.jit
def _rows(x_ptr, pix, m_mask, C: tl.constexpr, P: tl.constexpr):
    """``(BLOCK_M, P)`` FP16: pixels ``pix`` (int64, counted from the batch's first pixel) of a
    contiguous NHWC source of ``C`` channels, zero past ``C`` and where ``m_mask`` is false."""
    rk = tl.arange(0, P)
    mask = m_mask[:, None]
    if C != P:
        mask = mask & (rk < C)[None, :]
    return tl.load(x_ptr + pix[:, None] * C + rk[None, :], mask=mask, other=0.0)


@triton.jit
def pointwise_kernel(
    out_ptr, bias_ptr, add_ptr, sum_ptr,
    x0_ptr, w0_ptr, x1_ptr, w1_ptr, x2_ptr, w2_ptr, x3_ptr, w3_ptr,
    Ho, Wo, sob, soh, sow, soc, NB,
    COUT: tl.constexpr, N_TERMS: tl.constexpr,
    C0: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr, C3: tl.constexpr,
    P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr, P3: tl.constexpr,
    HAS_ADD: tl.constexpr, ADD_UP: tl.constexpr, HAS_SUM: tl.constexpr, RELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """``out = act(sum_k x_k @ w_k + bias + addend)`` for 1-4 terms; sources ``x_k`` contiguous
    NHWC FP16 ``(NB, Ho, Wo, C_k)``, weights packed ``(P_k = padded(C_k), BLOCK_N)``. Grid: a
    number of programs (:func:`pointwise_grid`), each looping over every ``num_programs``-th
    tile of ``BLOCK_M`` pixels of all images; the epilogue's arguments are the conv kernel's."""
    w0 = _weight(w0_ptr, P0, BLOCK_N)  # weights first: no kernel writes them (PDL)
    if N_TERMS > 1:
        w1 = _weight(w1_ptr, P1, BLOCK_N)
    if N_TERMS > 2:
        w2 = _weight(w2_ptr, P2, BLOCK_N)
    if N_TERMS > 3:
        w3 = _weight(w3_ptr, P3, BLOCK_N)
    if PDL:  # after: activations and the SE sums (ttball.kernels.gdc)
        grid_wait()
        grid_launch_dependents()
    hw = Ho * Wo
    tiles = tl.cdiv(hw, BLOCK_M)
    for t in tl.range(tl.program_id(0), tiles * NB, tl.num_programs(0), num_stages=NUM_STAGES):
        b = t // tiles
        m = (t % tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
        m_mask = m < hw
        pix = b.to(tl.int64) * hw + m
        acc = tl.dot(_rows(x0_ptr, pix, m_mask, C0, P0), w0,
                     tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
        if N_TERMS > 1:
            acc = tl.dot(_rows(x1_ptr, pix, m_mask, C1, P1), w1, acc)
        if N_TERMS > 2:
            acc = tl.dot(_rows(x2_ptr, pix, m_mask, C2, P2), w2, acc)
        if N_TERMS > 3:
            acc = tl.dot(_rows(x3_ptr, pix, m_mask, C3, P3), w3, acc)
        epilogue(acc, out_ptr, bias_ptr, add_ptr, sum_ptr, b, m // Wo, m % Wo, m_mask, Ho, Wo,
                 sob, soh, sow, soc, COUT, HAS_ADD, ADD_UP, HAS_SUM, RELU, BLOCK_N)

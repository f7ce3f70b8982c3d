"""Runs a :class:`~ttball.kernels.plan.Plan` with the Triton kernels: one launch per step plus
one memset of the SE sums, so ``len(plan.steps) + 1`` kernels per call (68 for BlurBall).
Optionally every kernel is launched with programmatic dependent launch
(:mod:`ttball.kernels.gdc`), so each one's launch overlaps the end of the one before, and the
tuner gets candidates that read a 3×3 step's input through the tensor memory accelerator
(``tma=True``, :func:`tma_configs`) or, for the 16- and 32-channel 3×3 steps, walk down the
image a row at a time (``rows=True``, :func:`rows_configs`, :mod:`ttball.kernels.rows`).
Steps of 1×1 stride-1 terms (the bottleneck's) also get candidates that keep the weights
resident in a persistent grid (:func:`pointwise_configs`, :mod:`ttball.kernels.pointwise`).

Weights are packed once (FP16, padded; biases and SE weights float32). Activations are NHWC
FP16 buffers allocated per input shape and reused along the plan by liveness (a buffer whose
last reader has run goes back to a pool of its size). The batch is read in place (float32
NCHW, strided) by the first convolution; the logits are written as float32 NCHW by the last
kernel.

Tuning: on the first call of a shape each step is timed over :func:`conv_configs` /
:func:`tail_configs` (2-5 configurations, CUDA events) and the fastest is kept for that shape;
a configuration that fails to compile or launch is skipped (its error kept in
``self.failures``). With ``tune=False``, or on CPU (``TRITON_INTERPRET=1``), the first
candidate is used.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch
import triton
from torch import Tensor

from ttball.bench.timing import device_ms
from ttball.kernels.conv import (
    block_k,
    chunk_plan,
    conv_kernel,
    im2col_k,
    pack_weight,
    pack_weight_im2col,
    padded,
)
from ttball.kernels.direct import (
    PAIRS,
    WGMMA,
    WGMMA_MIN_PIXELS,
    WGMMA_MIN_PIXELS_OF,
    WGMMA_RS,
    WGMMA_TMA,
    conv3x3_direct,
    conv3x3_direct_input,
    conv3x3_pair,
    direct_applies,
    direct_library,
    direct_tiles,
    pair_applies,
    wgmma_available,
)
from ttball.kernels.elementwise import se_tail_kernel
from ttball.kernels.plan import INPUT, LEVELS, OUTPUT, Conv, Plan, SqueezeTail, Step
from ttball.kernels.pointwise import (
    pointwise_applies,
    pointwise_grid,
    pointwise_kernel,
    programs_per_sm,
    sm_count,
)
from ttball.kernels.precompile import Precompiled, TritonCall, compile_threads, precompile
from ttball.kernels.refine import Refinement, refine
from ttball.kernels.rows import conv3x3_rows_kernel, rows_grid

MAX_TERMS = 4
TUNE_REPS = 3  # timed launches per candidate after one warm-up launch
PAIR_GAIN = 0.97  # a residual block's pair kernel replaces its two steps if this much faster
SHORT_MS, SHORT_REPS = 0.02, 20  # a candidate faster than this is timed again with more launches


@dataclass(frozen=True)
class Config:
    """A kernel configuration. Conv steps only (defaults: the first version's kernel):
    ``tile_w`` > 0 makes a program's pixels a ``(block_m // tile_w) × tile_w`` tile,
    ``k_chunk`` > 0 packs several 3×3 taps into K chunks of that size, ``l1`` caches the
    activation gathers in L1, ``tma`` reads term 0 with tensor-memory-accelerator copies
    (needs ``tile_w``; steps it does not apply to ignore it; :mod:`ttball.kernels.conv`).
    ``rows`` > 0 runs a step :func:`rows_applies` to with :mod:`ttball.kernels.rows` instead:
    ``block_m`` columns × ``rows`` output rows per program (other steps ignore it).
    ``direct`` > 0 runs a step :func:`~ttball.kernels.direct.direct_applies` to with the CUDA
    kernel of :mod:`ttball.kernels.direct`: tiles of ``direct`` rows × ``block_m`` columns,
    pipelined (a persistent grid, two halo buffers) when ``num_stages`` > 1.
    ``programs`` > 0 (the conv kernel, not ``rows`` or ``direct``): a grid of that many
    programs, each looping over tiles, so the step leaves the rest of the GPU to the steps
    beside it (candidates of :meth:`TritonExecutor.refine`, not of the per-step tuner).
    ``resident`` runs a step :func:`~ttball.kernels.pointwise.pointwise_applies` to with
    :mod:`ttball.kernels.pointwise`: a persistent grid (``programs``, else
    :func:`~ttball.kernels.pointwise.programs_per_sm` per SM) of programs that load the weights
    once and loop over tiles of ``block_m`` pixels, ``num_stages`` of them in flight (other
    steps ignore it).
    ``pair`` (``direct`` > 0): 1 runs the step and the next one, a residual block's conv1 and
    conv2, as one kernel (:func:`~ttball.kernels.direct.conv3x3_pair`, tiles of ``direct`` rows
    × ``block_m`` columns); 2 marks the next one, which then launches nothing. ``rs``
    (``direct`` > 0, a wgmma tile): the wgmma kernel with its A operand from registers
    (:data:`~ttball.kernels.direct.WGMMA_RS`); ``tma`` there: its halo copied by TMA."""

    block_m: int
    num_warps: int
    num_stages: int
    tile_w: int = 0
    k_chunk: int = 0
    l1: bool = False
    tma: bool = False
    rows: int = 0
    direct: int = 0
    programs: int = 0
    pair: int = 0
    rs: bool = False
    resident: bool = False

    def short(self) -> str:
        """``m128w4s3`` (+ ``t16`` tile width, ``k64`` taps per K chunk, ``L1``, ``TMA``,
        ``RES`` resident weights, ``r16`` rows per program, ``d8`` direct-kernel rows, ``p32``
        programs, ``+next`` the pair kernel, ``=prev`` computed by it)."""
        text = f"m{self.block_m}w{self.num_warps}s{self.num_stages}"
        text += f"t{self.tile_w}" if self.tile_w else ""
        text += f"k{self.k_chunk}" if self.k_chunk else ""
        text += ("L1" if self.l1 else "") + ("TMA" if self.tma else "") + ("RS" if self.rs else "")
        text += "RES" if self.resident else ""
        text += f"r{self.rows}" if self.rows else ""
        text += f"d{self.direct}" if self.direct else ""
        text += f"p{self.programs}" if self.programs else ""
        return text + {0: "", 1: "+next", 2: "=prev"}[self.pair]


def conv_configs(step: Conv, pixels: int) -> list[Config]:
    """Candidates for a conv step with ``pixels`` output pixels in the batch; first = default.
    Tiles of 128 pixels × Cout fill an H200 from ~1 k programs; below that, smaller tiles
    keep its 132 SMs busy (guesses until ``scripts/gpu_kernels.py`` has measured them).
    Steps with a 3×3 term also get :func:`tap_configs` (not measured yet: the tuner decides)."""
    n = padded(step.cout)
    if pixels < 132 * 128:
        old = [Config(32, 4, 2), Config(64, 4, 3)]
    elif n <= 32:
        old = [Config(128, 4, 3), Config(256, 8, 3), Config(64, 4, 3)]
    elif n == 64:
        old = [Config(128, 4, 3), Config(64, 4, 3), Config(128, 8, 3)]
    else:
        old = [Config(64, 4, 3), Config(128, 8, 3), Config(64, 8, 3)]
    return old + tap_configs(step, pixels)


def tap_configs(step: Conv, pixels: int) -> list[Config]:
    """The second version's variants for steps with a 3×3 term: 2-D pixel tiles, four 16-channel
    taps (two of 32, one of 64+) per K chunk of 64, L1-cached gathers; two stages, so 4-6
    programs share an SM and leave part of its 256 KB to L1 (sm_90 compile: 36-82 KB of shared
    memory). Two per step at most, so a cold start compiles about twice as many kernels as
    before. Not measured yet: predictions in ``docs/benchmarks/triton-h200.md``."""
    if not any(t.ksize == 3 for t in step.terms):
        return []
    if pixels < 132 * 128:
        return [Config(64, 4, 2, tile_w=16, k_chunk=64, l1=True)]
    if step.terms[0].cin < 16:  # the stem, im2col: K = 81 → 128 in two chunks or one
        return [Config(128, 4, 2, tile_w=16, k_chunk=64, l1=True),
                Config(128, 4, 1, tile_w=32, k_chunk=128, l1=True)]
    if padded(step.cout) >= 128:
        return [Config(64, 4, 2, tile_w=16, k_chunk=64, l1=True),
                Config(128, 8, 2, tile_w=32, k_chunk=64, l1=True)]
    return [Config(128, 4, 2, tile_w=16, k_chunk=64, l1=True),
            Config(256, 8, 2, tile_w=32, k_chunk=64, l1=True)]


def tma_applies(step: Conv) -> bool:
    """Whether term 0 can be read with TMA copies: a 3×3 stride-1 convolution of an NHWC FP16
    buffer with a power-of-two number of channels (not the stem, which reads the batch)."""
    t0 = step.terms[0]
    return (t0.ksize == 3 and t0.stride == 1 and t0.up == 0 and t0.src != INPUT
            and t0.cin >= 16 and t0.cin == padded(t0.cin))


def tma_configs(step: Conv, pixels: int) -> list[Config]:
    """TMA candidates (fourth step, ``triton-h200.md``) for a step :func:`tma_applies` to:
    8×16 and 4×32 tiles of 128 pixels with 3-4 stages (the copies are asynchronous, so deeper
    pipelines cost only shared memory: 4 KB a stage for 16 channels), 4×16 for 128 output
    channels or small grids."""
    if not tma_applies(step):
        return []
    if pixels < 132 * 128 or padded(step.cout) >= 128:
        return [Config(64, 4, 3, tile_w=16, tma=True), Config(128, 4, 3, tile_w=16, tma=True)]
    return [Config(128, 4, 3, tile_w=16, tma=True), Config(128, 4, 4, tile_w=32, tma=True)]


def rows_applies(step: Conv) -> bool:
    """Whether :mod:`ttball.kernels.rows` can run the step: one 3×3 stride-1 term of an NHWC
    FP16 buffer with 16 or 32 channels, at most 32 output channels (its nine weight matrices
    stay in registers)."""
    t0 = step.terms[0]
    return (len(step.terms) == 1 and t0.ksize == 3 and t0.stride == 1 and t0.up == 0
            and t0.src != INPUT and t0.cin in (16, 32) and padded(step.cout) <= 32)


def rows_configs(step: Conv, pixels: int) -> list[Config]:
    """Row-walking candidates (``block_m`` columns, ``rows`` rows a program) for a step
    :func:`rows_applies` to: narrow strips and few rows for small grids (batch 1 at half
    resolution is 144 × 256 pixels), wider and longer ones for large batches."""
    if not rows_applies(step):
        return []
    if pixels < 132 * 128 * 8:
        return [Config(32, 4, 1, rows=8), Config(64, 4, 1, rows=8)]
    return [Config(64, 4, 1, rows=16), Config(128, 4, 1, rows=16), Config(64, 4, 1, rows=32)]


def pointwise_configs(step: Conv, pixels: int) -> list[Config]:
    """Resident-weight candidates (:mod:`ttball.kernels.pointwise`) for a step
    :func:`~ttball.kernels.pointwise.pointwise_applies` to: 64-pixel tiles (4 warps, three
    stages, three programs an SM) and 128-pixel tiles (8 warps, two stages, one program an SM;
    :data:`~ttball.kernels.pointwise.WARPS_PER_SM`), 32 and 64 pixels for small grids as in
    :func:`conv_configs`. After the conv kernel's, so never a default: the tuner decides (on an
    H200 it takes ``m64w4s3RES`` for steps 2 and 4, docs/benchmarks/triton-h200.md)."""
    if not pointwise_applies(step):
        return []
    if pixels < 132 * 128:
        return [Config(32, 4, 3, resident=True), Config(64, 4, 3, resident=True)]
    return [Config(64, 4, 3, resident=True), Config(128, 8, 2, resident=True)]


def direct_configs(step: Conv, pixels: int, wgmma: bool = False) -> list[Config]:
    """Candidates of the CUDA direct kernel (:mod:`ttball.kernels.direct`) for a step it
    applies to: its compiled tiles, ``direct`` rows × ``block_m`` columns (``num_warps`` is
    nominal: the kernel has one warp per two 16-pixel segments of its tile, at most 8); one
    block per tile (``num_stages`` 1) or a persistent grid with the next tile's halo copied
    during this one's work (2). With ``wgmma``, also the wgmma kernel's tiles for the step's
    channels (:data:`~ttball.kernels.direct.WGMMA`; 64 columns, ``num_warps`` 4 a warpgroup)
    from :data:`~ttball.kernels.direct.WGMMA_MIN_PIXELS` output pixels (or the shape's entry
    in :data:`~ttball.kernels.direct.WGMMA_MIN_PIXELS_OF`), and those of
    :data:`~ttball.kernels.direct.WGMMA_TMA` again with ``tma`` (the halo copied by TMA) and
    those of :data:`~ttball.kernels.direct.WGMMA_RS` with ``rs`` (A from registers)."""
    if not direct_applies(step):
        return []
    shape = (step.terms[0].cin, step.cout)
    tiles = [(rows, cols, 8) for rows, cols in direct_tiles(pixels, *shape)]
    wgmma = (wgmma and step.terms[0].src != INPUT
             and pixels >= WGMMA_MIN_PIXELS_OF.get(shape, WGMMA_MIN_PIXELS))
    if wgmma:
        tiles += [(rows, cols, 4 * groups) for rows, cols, groups in WGMMA.get(shape, ())]
    configs = [Config(cols, warps, stages, direct=rows)
               for rows, cols, warps in tiles for stages in (2, 1)]
    if wgmma:  # and the same tiles with the halo copied by TMA, where compiled
        configs += [Config(cols, 4 * groups, stages, direct=rows, tma=True)
                    for rows, cols, groups in WGMMA_TMA.get(shape, ()) for stages in (2, 1)]
        # and the kernel with A from registers
        configs += [Config(cols, 4 * groups, stages, direct=rows, rs=True)
                    for rows, cols, groups in WGMMA_RS.get(shape, ()) for stages in (2, 1)]
    return configs


def pair_configs(step: Conv) -> list[Config]:
    """Candidates of the pair kernel for a residual block whose conv1 is ``step``: its
    compiled tiles, pipelined or a block per tile."""
    return [Config(cols, 8, stages, direct=rows, pair=1)
            for rows, cols in PAIRS[step.cout] for stages in (2, 1)]


def pair_waits(waits: list[list[int]], configs: list[Config]) -> list[list[int]]:
    """:func:`hazards`' waits with each pair kernel's step waiting for what its second step
    waits for too (the pair writes the second step's output and SE sums)."""
    out = [list(w) for w in waits]
    for i, cfg in enumerate(configs):
        if cfg.pair == 1:
            out[i] = sorted((set(waits[i]) | set(waits[i + 1])) - {i})
    return out


def tail_configs(step: SqueezeTail, pixels: int) -> list[Config]:
    """About 8 k elements per program for the elementwise tail; 64-128 pixels with 1×1 terms
    or a projection."""
    if step.terms or step.proj is not None:
        return [Config(128, 4, 2), Config(64, 4, 2)]
    rows = max(32, 8192 // step.channels)
    if pixels < 132 * rows:
        return [Config(max(16, rows // 4), 4, 1), Config(max(16, rows // 2), 4, 1)]
    return [Config(rows, 4, 1), Config(rows // 2, 4, 1), Config(rows, 8, 1)]


def _nhwc(t: Tensor) -> Tensor:
    if not t.is_contiguous():
        raise ValueError("internal buffers must be contiguous NHWC")
    return t


def _pdl(on: bool) -> dict[str, Any]:
    """The kernel arguments of programmatic dependent launch (:mod:`ttball.kernels.gdc`)."""
    return {"PDL": True, "launch_pdl": True} if on else {}


class _ConvLaunch:
    def __init__(self, step: Conv, device: torch.device, pdl: bool = False,
                 tma: bool = False, rows: bool = False, direct: bool = False) -> None:
        if len(step.terms) > MAX_TERMS:
            raise ValueError(f"{step.out}: at most {MAX_TERMS} terms per conv step")
        self.pdl_args = _pdl(pdl)
        self.step = step
        # offer tma_configs / rows_configs / direct_configs to the tuner
        self.tma, self.rows, self.direct = tma, rows, direct
        self.wgmma = direct and wgmma_available(device)  # the wgmma kernel's tiles too
        self.sms = sm_count(device)  # the resident kernel's grid: programs_per_sm per SM
        self._descs: dict[tuple[int, tuple[int, ...], tuple[int, ...]], Any] = {}
        self.weights = [pack_weight(t.weight, device) for t in step.terms]
        t0 = step.terms[0]
        self.im2col = t0.ksize == 3 and t0.up == 0 and t0.cin < 16  # the 9-channel stem
        self.w0_im2col = pack_weight_im2col(t0.weight, device) if self.im2col else None
        self._metas: dict[tuple[Config, int], dict[str, Any]] = {}
        self.partner: _ConvLaunch | None = None  # the next step, if the pair kernel can run both
        n = padded(step.cout)
        self.bias = torch.zeros(n, device=device)
        self.bias[: step.cout] = step.bias.to(device)
        meta: dict[str, Any] = {"COUT": step.cout, "N_TERMS": len(step.terms), "BLOCK_N": n}
        meta.update(C0=t0.cin, P0=padded(t0.cin), K0=t0.ksize, S0=t0.stride, U0=t0.up,
                    BK0=block_k(t0.cin))
        for k in range(1, MAX_TERMS):
            t = step.terms[k] if k < len(step.terms) else t0
            if k < len(step.terms) and t.cin != padded(t.cin):
                raise ValueError(f"{step.out}: term {k} needs a power-of-two Cin >= 16")
            meta.update({f"C{k}": t.cin, f"K{k}": t.ksize, f"S{k}": t.stride, f"U{k}": t.up,
                         f"BK{k}": block_k(t.cin)})
        add_up = step.addends[0][1] if step.addends else 0
        if len(step.addends) > 1:
            raise ValueError(f"{step.out}: one addend per conv step")
        meta.update(HAS_ADD=bool(step.addends), ADD_UP=add_up, HAS_SUM=step.se_sum is not None,
                    RELU=step.relu)
        self.meta = meta

    def variant_meta(self, cfg: Config, wo: int) -> dict[str, Any]:
        """``self.meta`` with the variant constexprs of ``cfg`` (the default config: unchanged,
        so the first version's kernel is compiled for it)."""
        if (cfg, wo) in self._metas:
            return self._metas[cfg, wo]
        meta = dict(self.meta)
        if cfg.tile_w:  # a tile no wider than the (padded) row, no taller than block_m
            meta["TILE_W"] = min(cfg.tile_w, triton.next_power_of_2(wo), cfg.block_m)
        if cfg.l1:
            meta["L1"] = True
        if cfg.programs:
            meta["PROGRAMS"] = cfg.programs
        if cfg.tma and tma_applies(self.step):
            if not cfg.tile_w:
                raise ValueError(f"{cfg}: TMA needs a 2-D tile (tile_w)")
            meta["TMA"] = True
        if cfg.k_chunk:
            for k, t in enumerate(self.step.terms):
                taps, bk = chunk_plan(t.cin, t.ksize, cfg.k_chunk)
                meta.update({f"T{k}": taps, f"BK{k}": bk})
            if self.im2col:
                t0 = self.step.terms[0]
                kpad = im2col_k(t0.cin, t0.ksize)
                meta.update(IM0=True, P0=kpad, BK0=min(cfg.k_chunk, kpad), T0=1)
        self._metas[cfg, wo] = meta
        return meta

    def out_pixels(self, bufs: dict[str, Tensor]) -> int:
        out = bufs[self.step.out]
        return out.shape[0] * out.shape[1] * out.shape[2]

    def configs(self, bufs: dict[str, Tensor]) -> list[Config]:
        pixels = self.out_pixels(bufs)
        extra = tma_configs(self.step, pixels) if self.tma else []
        extra += rows_configs(self.step, pixels) if self.rows else []
        extra += direct_configs(self.step, pixels, self.wgmma) if self.direct else []
        return conv_configs(self.step, pixels) + pointwise_configs(self.step, pixels) + extra

    def descriptor(self, x: Tensor, box: tuple[int, ...]) -> Any:
        """A TMA descriptor of the NHWC buffer ``x`` (one per buffer and box; a buffer is
        reused along the plan, so is its descriptor)."""
        from triton.tools.tensor_descriptor import TensorDescriptor

        key = (x.data_ptr(), tuple(x.shape), box)
        if key not in self._descs:
            self._descs[key] = TensorDescriptor(_nhwc(x), list(x.shape), list(x.stride()),
                                                list(box))
        return self._descs[key]

    def runs_cuda(self, cfg: Config) -> bool:
        """Whether ``cfg`` runs the step with the CUDA C++ kernels (direct or pair), not
        Triton."""
        return bool(cfg.pair) or bool(cfg.direct and direct_applies(self.step))

    def __call__(self, bufs: dict[str, Tensor], sums: dict[str, Tensor], cfg: Config) -> None:
        step = self.step
        if cfg.pair == 2:  # computed with the previous step by the pair kernel
            return
        if cfg.pair == 1 and self.partner is not None:
            second = self.partner.step
            conv3x3_pair(bufs[second.out], _nhwc(bufs[step.terms[0].src]), self.weights[0],
                         self.bias, self.partner.weights[0], self.partner.bias,
                         sums[second.se_sum] if second.se_sum else None,
                         (cfg.direct, cfg.block_m), second.relu, pipelined=cfg.num_stages > 1)
            return
        if cfg.direct and direct_applies(step):
            src, tile = bufs[step.terms[0].src], (cfg.direct, cfg.block_m)
            if step.terms[0].src == INPUT:  # the NHWC view of the FP32 NCHW batch
                conv3x3_direct_input(bufs[step.out], src.permute(0, 3, 1, 2), self.weights[0],
                                     self.bias, tile, step.relu, pipelined=cfg.num_stages > 1)
                return
            conv3x3_direct(bufs[step.out], _nhwc(src), self.weights[0], self.bias,
                           sums[step.se_sum] if step.se_sum else None, tile, step.relu,
                           pipelined=cfg.num_stages > 1,
                           warpgroups=cfg.num_warps // 4 if cfg.block_m in (64, 128) else 1,
                           tma=cfg.tma, rs=cfg.rs)
            return
        self.triton_call(bufs, sums, cfg).launch()

    def triton_call(self, bufs: dict[str, Tensor], sums: dict[str, Tensor],
                    cfg: Config) -> TritonCall:
        """The Triton launch that runs the step with ``cfg`` (not for the CUDA kernels: a
        config with ``pair`` or a ``direct`` tile the step takes)."""
        step, out = self.step, bufs[self.step.out]
        B, Ho, Wo, _ = out.shape
        add = _nhwc(bufs[step.addends[0][0]]) if step.addends else out
        se_sum = sums[step.se_sum] if step.se_sum else self.bias
        if cfg.rows and rows_applies(step):
            return self._rows(bufs, out, add, se_sum, cfg)
        if cfg.resident and pointwise_applies(step):
            return self._resident(bufs, out, add, se_sum, cfg)
        meta = self.variant_meta(cfg, Wo)
        x0 = bufs[step.terms[0].src]
        w0 = self.w0_im2col if meta.get("IM0") else self.weights[0]
        xs = [_nhwc(bufs[t.src]) for t in step.terms[1:]]
        ws = self.weights[1:]
        pairs = []
        for k in range(MAX_TERMS - 1):
            pairs += [xs[k], ws[k]] if k < len(xs) else [x0, w0]
        if "TILE_W" in meta:
            tile_w = meta["TILE_W"]
            tiles = triton.cdiv(Ho, cfg.block_m // tile_w) * triton.cdiv(Wo, tile_w)
        else:
            tiles = triton.cdiv(Ho * Wo, cfg.block_m)
        src0: Any = x0
        if meta.get("TMA"):
            tile_w = meta["TILE_W"]
            src0 = self.descriptor(x0, (1, cfg.block_m // tile_w, tile_w, meta["BK0"]))
        grid = (min(cfg.programs, tiles * B), 1) if cfg.programs else (tiles, B)
        return TritonCall(
            conv_kernel, grid,
            (out, self.bias, add, se_sum, src0, w0, *pairs, Ho, Wo, *out.stride(),
             x0.shape[1], x0.shape[2], *x0.stride(), B),
            {**meta, "BLOCK_M": cfg.block_m, "num_warps": cfg.num_warps,
             "num_stages": cfg.num_stages, **self.pdl_args},
        )

    def _resident(self, bufs: dict[str, Tensor], out: Tensor, add: Tensor, se_sum: Tensor,
                  cfg: Config) -> TritonCall:
        """The step through :func:`~ttball.kernels.pointwise.pointwise_kernel` (``add``,
        ``se_sum``: as for the conv kernel); unused term slots repeat term 0."""
        B, Ho, Wo, _ = out.shape
        terms, m = self.step.terms, self.meta
        pairs: list[Tensor] = []
        cins: dict[str, int] = {}
        for k in range(MAX_TERMS):
            j = k if k < len(terms) else 0
            pairs += [_nhwc(bufs[terms[j].src]), self.weights[j]]
            cins.update({f"C{k}": terms[j].cin, f"P{k}": padded(terms[j].cin)})
        tiles = B * triton.cdiv(Ho * Wo, cfg.block_m)
        grid = pointwise_grid(tiles, cfg.programs or programs_per_sm(cfg.num_warps) * self.sms)
        return TritonCall(
            pointwise_kernel, grid,
            (out, self.bias, add, se_sum, *pairs, Ho, Wo, *out.stride(), B),
            dict(COUT=m["COUT"], N_TERMS=m["N_TERMS"], **cins, HAS_ADD=m["HAS_ADD"],
                 ADD_UP=m["ADD_UP"], HAS_SUM=m["HAS_SUM"], RELU=m["RELU"],
                 BLOCK_M=cfg.block_m, BLOCK_N=m["BLOCK_N"], NUM_STAGES=cfg.num_stages,
                 num_warps=cfg.num_warps, num_stages=cfg.num_stages, **self.pdl_args),
        )

    def _rows(self, bufs: dict[str, Tensor], out: Tensor, add: Tensor, se_sum: Tensor,
              cfg: Config) -> TritonCall:
        """The step through :func:`conv3x3_rows_kernel` (``add``, ``se_sum``: as for the conv
        kernel, stand-ins where the step has none)."""
        B, Ho, Wo, _ = out.shape
        m = self.meta
        return TritonCall(
            conv3x3_rows_kernel, rows_grid(Ho, Wo, B, cfg.block_m, cfg.rows),
            (out, _nhwc(bufs[self.step.terms[0].src]), self.weights[0], self.bias, add, se_sum,
             Ho, Wo, *out.stride()),
            dict(CIN=m["C0"], COUT=m["COUT"], BLOCK_N=m["BLOCK_N"], BLOCK_W=cfg.block_m,
                 ROWS=cfg.rows, HAS_ADD=m["HAS_ADD"], ADD_UP=m["ADD_UP"], HAS_SUM=m["HAS_SUM"],
                 RELU=m["RELU"], num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                 **self.pdl_args),
        )


class _TailLaunch:
    def __init__(self, step: SqueezeTail, device: torch.device, pdl: bool = False) -> None:
        if len(step.terms) > MAX_TERMS - 1:
            raise ValueError(f"{step.y}: at most {MAX_TERMS - 1} terms in a tail")
        self.pdl_args = _pdl(pdl)
        self.step = step
        c, hid = step.channels, step.fc1.shape[0]
        hid_pad = max(2, triton.next_power_of_2(hid))
        self.fc1 = torch.zeros(c, hid_pad, device=device)
        self.fc1[:, :hid] = step.fc1.T.to(device)
        self.fc2 = torch.zeros(hid_pad, c, device=device)
        self.fc2[:hid] = step.fc2.T.to(device)
        self.weights = [pack_weight(t.weight, device) for t in step.terms]
        self.bias = torch.zeros(c, device=device)
        if step.bias is not None:
            self.bias.copy_(step.bias.to(device))
        meta: dict[str, Any] = {"C": c, "HID": hid_pad, "STORE_T": step.out is not None,
                                "N_TERMS": len(step.terms)}
        for k in range(1, MAX_TERMS):
            t = step.terms[k - 1] if k <= len(step.terms) else None
            cin = t.cin if t else c
            meta.update({f"C{k}": cin, f"U{k}": t.up if t else 0, f"BK{k}": block_k(cin)})
        head_n, head_pad = 1, 16
        self.head_w = self.head_b = self.bias
        if step.head is not None:
            head_n = step.head.weight.shape[0]
            self.head_w = pack_weight(step.head.weight[:, :, None, None], device)
            head_pad = self.head_w.shape[1]
            self.head_b = torch.zeros(head_pad, device=device)
            self.head_b[:head_n] = step.head.bias.to(device)
        if step.proj is not None:  # the head's pointers carry the projection (no terms)
            self.head_w = pack_weight(step.proj.weight[:, :, None, None], device)
            head_n, head_pad = step.proj.weight.shape[0], self.head_w.shape[1]
            if step.terms or step.head is not None or head_n != head_pad:
                raise ValueError(f"{step.y}: a projection needs a tail without terms or head, "
                                 "and 16, 32, ... output channels")
            self.head_b = step.proj.bias.to(device, torch.float32)
        meta.update(HEAD=step.head is not None, HEAD_N=head_n, HEAD_PAD=head_pad,
                    PROJ=step.proj is not None)
        self.meta = meta

    def configs(self, bufs: dict[str, Tensor]) -> list[Config]:
        y = bufs[self.step.y]
        return tail_configs(self.step, y.shape[0] * y.shape[1] * y.shape[2])

    def __call__(self, bufs: dict[str, Tensor], sums: dict[str, Tensor], cfg: Config) -> None:
        self.triton_call(bufs, sums, cfg).launch()

    def triton_call(self, bufs: dict[str, Tensor], sums: dict[str, Tensor],
                    cfg: Config) -> TritonCall:
        step = self.step
        y, res = _nhwc(bufs[step.y]), _nhwc(bufs[step.residual])
        B, Ho, Wo, _ = y.shape
        t = _nhwc(bufs[step.out]) if step.out else y
        pairs = []
        for k in range(MAX_TERMS - 1):
            if k < len(step.terms):
                pairs += [_nhwc(bufs[step.terms[k].src]), self.weights[k]]
            else:
                pairs += [y, self.bias]
        if step.head is not None:
            f = bufs[step.head.out]
        elif step.proj is not None:
            f = _nhwc(bufs[step.proj.out])
        elif step.fused is not None:
            f = _nhwc(bufs[step.fused])
        else:
            f = y
        return TritonCall(
            se_tail_kernel, (triton.cdiv(Ho * Wo, cfg.block_m), B),
            (y, res, sums[step.se_sum], self.fc1, self.fc2, t, self.bias, *pairs, f,
             self.head_w, self.head_b, Ho, Wo, 1.0 / (Ho * Wo), *f.stride()),
            {**self.meta, "BLOCK_M": cfg.block_m, "num_warps": cfg.num_warps,
             "num_stages": cfg.num_stages, **self.pdl_args},
        )


Launch = _ConvLaunch | _TailLaunch


def _launcher(step: Step, device: torch.device, pdl: bool, tma: bool, rows: bool,
              direct: bool = False) -> Launch:
    if isinstance(step, Conv):
        return _ConvLaunch(step, device, pdl, tma, rows, direct)
    return _TailLaunch(step, device, pdl)


class _Buffers:
    """Activations for one input shape, reused by liveness; SE sums in one zeroed block."""

    def __init__(self, plan: Plan, batch: int, height: int, width: int, device: torch.device):
        if height % 2 ** (LEVELS - 1) or width % 2 ** (LEVELS - 1):
            raise ValueError(f"height and width must be multiples of {2 ** (LEVELS - 1)}")
        last_use: dict[str, int] = {}
        for i, step in enumerate(plan.steps):
            for name in _reads(step):
                last_use[name] = i
        self.tensors: dict[str, Tensor] = {}
        pool: dict[tuple[int, int], list[Tensor]] = {}
        for i, step in enumerate(plan.steps):
            for name in plan.outputs(step):
                if name == OUTPUT:
                    continue
                buf = plan.buffers[name]
                free = pool.get((buf.channels, buf.level))
                self.tensors[name] = free.pop() if free else torch.empty(
                    batch, height >> buf.level, width >> buf.level, buf.channels,
                    device=device, dtype=torch.float16,
                )
            for name in _reads(step):
                if last_use[name] == i and name != INPUT:
                    buf = plan.buffers[name]
                    pool.setdefault((buf.channels, buf.level), []).append(self.tensors[name])
        self.logits = torch.empty(batch, plan.buffers[OUTPUT].channels, height, width,
                                  device=device)
        self.tensors[OUTPUT] = self.logits.permute(0, 2, 3, 1)
        total = sum(plan.sums.values())
        self.sum_block = torch.zeros(batch * total, device=device)
        self.sums: dict[str, Tensor] = {}
        offset = 0
        for name, c in plan.sums.items():
            self.sums[name] = self.sum_block[offset : offset + batch * c].view(batch, c)
            offset += batch * c


def _reads(step: Step) -> list[str]:
    names = [t.src for t in step.terms]
    if isinstance(step, Conv):
        names += [a for a, _ in step.addends]
    else:
        names += [step.y, step.residual]
    return list(dict.fromkeys(names))


def _main_output(step: Step) -> str:
    return step.out if isinstance(step, Conv) else step.y


def pair_steps(plan: Plan) -> list[int]:
    """Indices ``i`` of the residual blocks whose conv1 (step ``i``) and conv2 (step ``i + 1``)
    :func:`~ttball.kernels.direct.pair_applies` to, conv1's output read by conv2 alone."""
    readers: dict[str, int] = {}
    for step in plan.steps:
        for name in _reads(step):
            readers[name] = readers.get(name, 0) + 1
    return [i for i, (a, b) in enumerate(zip(plan.steps, plan.steps[1:]))
            if isinstance(a, Conv) and isinstance(b, Conv) and pair_applies(a, b)
            and readers.get(a.out) == 1]


def hazards(plan: Plan, bufs: _Buffers) -> list[list[int]]:
    """For each step, the earlier steps it must wait for when steps may run concurrently:
    the last writer of every tensor it reads (read after write) and, for every tensor it
    writes, that tensor's last writer and its readers since (write after write, write after
    read). Tensors are compared by storage, since :class:`_Buffers` reuses a tensor once its
    buffer is dead; squeeze-excitation sums count as tensors (the conv writes, the tail
    reads)."""
    def key(t: Tensor) -> int:
        return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()

    writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    out: list[list[int]] = []
    for i, step in enumerate(plan.steps):
        reads = [bufs.tensors[n] for n in _reads(step)]
        writes = [bufs.tensors[n] for n in plan.outputs(step)]
        if isinstance(step, Conv) and step.se_sum:
            writes.append(bufs.sums[step.se_sum])
        if isinstance(step, SqueezeTail):
            reads.append(bufs.sums[step.se_sum])
        deps: set[int] = set()
        for t in reads:
            if key(t) in writer:
                deps.add(writer[key(t)])
        for t in writes:
            if key(t) in writer:
                deps.add(writer[key(t)])
            deps.update(readers.get(key(t), []))
        for t in reads:
            readers.setdefault(key(t), []).append(i)
        for t in writes:
            writer[key(t)], readers[key(t)] = i, []
        deps.discard(i)
        out.append(sorted(deps))
    return out


class TritonExecutor:
    """``executor(batch (B, 9, H, W) float32 contiguous) -> logits (B, 3, H, W) float32``.

    The returned tensor is the shape's own output buffer, overwritten by the next call of that
    shape. ``cold_seconds[shape]`` is the first call's time (compiles and tuning included).
    ``pdl``: launch every kernel with programmatic dependent launch (sm_90+; the caller checks
    :func:`ttball.kernels.gdc.pdl_missing`). ``tma``: the tuner also times :func:`tma_configs`
    (sm_90+); ``rows``: and :func:`rows_configs`; ``direct`` (CUDA, the caller checks
    :func:`ttball.kernels.direct.direct_missing`): and :func:`direct_configs`, the CUDA C++
    direct convolution. ``branches`` (CUDA): after the first call of a
    shape, each step runs on the CUDA stream of its output's resolution, so HRNet's parallel
    branches run side by side; the steps wait for each other only where :func:`hazards` says
    (a CUDA graph captured from such a call keeps the same edges).
    """

    def __init__(
        self, plan: Plan, device: torch.device, tune: bool = True, config: Config | None = None,
        pdl: bool = False, tma: bool = False, rows: bool = False, branches: bool = False,
        direct: bool = False,
    ) -> None:
        self.plan, self.device = plan, device
        self.branches = branches and device.type == "cuda"
        self._streams: list[torch.cuda.Stream] = []  # branches: one per level but the first
        # branches: each level's stream priority (lower is more urgent; CUDA's default is 0,
        # the least); a level 0 priority other than 0 gives level 0 a stream of its own too
        self.lane_priority: tuple[int, ...] = (0,) * LEVELS
        self._events: list[torch.cuda.Event] = []
        self._waits: dict[tuple[int, ...], list[list[int]]] = {}  # branches: per shape, per step
        self.tune = tune and device.type == "cuda" and config is None
        self.config = config  # one configuration for every step (the interpreter tests)
        self.launches = [_launcher(step, device, pdl, tma, rows, direct) for step in plan.steps]
        # direct: residual blocks whose two convolutions the pair kernel may run as one (the
        # first's index); the tuner decides per shape, or `forced_pair` for every one (tests)
        self.pairs = pair_steps(plan) if direct else []
        for i in self.pairs:
            self.launches[i].partner = self.launches[i + 1]
        self.forced_pair: Config | None = None
        # per shape: for each pair, (first step, ms of the two steps, ms of the pair, config,
        # taken)
        self.pair_trials: dict[tuple[int, ...], list[tuple[int, float, float, str, bool]]] = {}
        self._buffers: dict[tuple[int, ...], _Buffers] = {}
        self._configs: dict[tuple[int, ...], list[Config]] = {}
        # per shape, per step: the tuner's candidates as (ms alone, config), fastest first
        self._timed: dict[tuple[int, ...], list[list[tuple[float, Config]]]] = {}
        self.failures: list[str] = []
        self.cold_seconds: dict[tuple[int, ...], float] = {}
        self.direct = direct
        # per shape: what the first call's precompiling did (CUDA, tuned)
        self.precompiled: dict[tuple[int, ...], Precompiled] = {}

    def __call__(self, batch: Tensor) -> Tensor:
        if batch.dim() != 4 or batch.shape[1] != 9 or not batch.is_contiguous():
            raise ValueError(f"expected a contiguous (B, 9, H, W) batch, got {tuple(batch.shape)}")
        shape = tuple(batch.shape)
        if shape not in self._configs:
            start = time.perf_counter()
            out = self._first_call(batch)
            self.cold_seconds[shape] = time.perf_counter() - start
            return out
        bufs = self._buffers[shape]
        bufs.tensors[INPUT] = batch.permute(0, 2, 3, 1)
        bufs.sum_block.zero_()
        if self.branches:
            self._run_branches(shape, bufs)
            return bufs.logits
        for launch, cfg in zip(self.launches, self._configs[shape]):
            launch(bufs.tensors, bufs.sums, cfg)
        return bufs.logits

    def _run_branches(self, shape: tuple[int, ...], bufs: _Buffers) -> None:
        """One stream per resolution level (the first is the caller's): fork after the SE
        sums are zeroed, an event wait for each cross-stream hazard, join at the end."""
        main = torch.cuda.current_stream(self.device)
        if not self._streams:
            own = range(0 if self.lane_priority[0] else 1, LEVELS)
            self._streams = [torch.cuda.Stream(self.device, priority=self.lane_priority[k])
                             for k in own]
            self._events = [torch.cuda.Event() for _ in self.launches]
        if shape not in self._waits:
            self._waits[shape] = hazards(self.plan, bufs)
        streams = self._streams if len(self._streams) == LEVELS else [main, *self._streams]
        lanes = [self.plan.buffers[_main_output(la.step)].level for la in self.launches]
        needed = {j for i, deps in enumerate(self._waits[shape]) for j in deps
                  if lanes[j] != lanes[i]}
        waits = pair_waits(self._waits[shape], self._configs[shape])
        for side in self._streams:
            side.wait_stream(main)
        for i, (launch, cfg) in enumerate(zip(self.launches, self._configs[shape])):
            stream = streams[lanes[i]]
            for j in waits[i]:
                if lanes[j] != lanes[i]:
                    stream.wait_event(self._events[j])
            with torch.cuda.stream(stream):
                launch(bufs.tensors, bufs.sums, cfg)
            if i in needed:
                self._events[i].record(stream)
        for side in self._streams:
            main.wait_stream(side)

    def _first_call(self, batch: Tensor) -> Tensor:
        shape = tuple(batch.shape)
        bufs = _Buffers(self.plan, shape[0], shape[2], shape[3], self.device)
        bufs.tensors[INPUT] = batch.permute(0, 2, 3, 1)
        bufs.sum_block.zero_()
        if self.tune:  # CUDA: every candidate compiled on all cores, then timed one by one
            self.precompiled[shape] = self._precompile(self.candidate_calls(bufs), self.direct)
        chosen: list[Config] = []
        timed: list[list[tuple[float, Config]]] = []
        for i, launch in enumerate(self.launches):
            chosen.append(self._choose(launch, bufs, timed))
            if i - 1 in self.pairs and (self.tune or self.forced_pair):
                trial = self._choose_pair(i - 1, bufs, chosen, timed)
                self.pair_trials.setdefault(shape, []).append(trial)
        self._buffers[shape], self._configs[shape], self._timed[shape] = bufs, chosen, timed
        return bufs.logits

    def first_call_with(self, batch: Tensor, configs: list[Config]) -> Tensor:
        """The first call of ``batch``'s shape with each step's configuration given (a tuning
        record, :mod:`ttball.kernels.records`) instead of tuned: the given kernels compiled on
        all cores (CUDA), then one call. Raises what a launch raises, the shape then left
        untuned (its next call tunes)."""
        shape = tuple(batch.shape)
        if len(configs) != len(self.launches):
            raise ValueError(f"{len(configs)} configurations for {len(self.launches)} steps")
        start = time.perf_counter()
        bufs = _Buffers(self.plan, shape[0], shape[2], shape[3], self.device)
        bufs.tensors[INPUT] = batch.permute(0, 2, 3, 1)
        if self.device.type == "cuda":
            calls = self._triton_calls(bufs, zip(self.launches, configs))
            self.precompiled[shape] = self._precompile(calls, any(c.direct for c in configs))
        bufs.sum_block.zero_()
        for launch, cfg in zip(self.launches, configs):
            launch(bufs.tensors, bufs.sums, cfg)
        self._buffers[shape], self._configs[shape] = bufs, list(configs)
        self._timed[shape] = [[(0.0, cfg)] for cfg in configs]  # nothing for refine to try
        self.cold_seconds[shape] = time.perf_counter() - start
        return bufs.logits

    def has(self, shape: tuple[int, ...]) -> bool:
        """Whether ``shape`` had its first call (tuned or given its configurations)."""
        return shape in self._configs

    def configs(self, shape: tuple[int, ...]) -> list[Config]:
        """The configuration of each step for ``shape`` (after its first call)."""
        return list(self._configs[shape])

    def refine(self, batch: Tensor, time_graph: Callable[[Tensor], float],
               **options: Any) -> Refinement:
        """Re-choose the steps' configurations for ``batch``'s shape by timing the whole CUDA
        graph (:func:`ttball.kernels.refine.refine`; ``options`` go to it). ``time_graph(batch)``
        captures this executor's call as it stands into a CUDA graph and returns the ms of a
        replay (the backend's, which owns the graphs). The shape must have been called once
        (tuned). CUDA only."""
        shape = tuple(batch.shape)
        if shape not in self._configs:
            raise RuntimeError(f"refine: shape {shape} has not been tuned yet")
        if self.device.type != "cuda":
            raise RuntimeError("refine times CUDA graphs: it needs a CUDA device")
        original = list(self._configs[shape])
        sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        bufs = self._buffers[shape]
        extra = [self._grid_limited(launch, cfg, bufs, sms)
                 for launch, cfg in zip(self.launches, original)]
        # every side step on a quarter, then on half of the SMs at once
        starts = [[e[k] if len(e) > k else cfg for e, cfg in zip(extra, original)]
                  for k in range(2) if any(len(e) > k for e in extra)]

        def trial(configs: list[Config]) -> float:
            self._configs[shape] = list(configs)
            return time_graph(batch)

        try:
            configs, report = refine(original, self._timed[shape], trial, name=Config.short,
                                     extra=extra, starts=starts, **options)
        except BaseException:
            self._configs[shape] = original  # not left on a trial's configurations
            raise
        self._configs[shape] = configs
        self(batch)  # leaves the buffers as the chosen configurations compute them
        return report

    def _grid_limited(self, launch: Launch, cfg: Config, bufs: _Buffers,
                      sms: int) -> list[Config]:
        """``cfg`` on a quarter and on half of the ``sms`` multiprocessors (a fixed number of
        programs looping over the tiles), for a side branch's conv step (level ≥ 1) run by the
        conv kernel whose grid is larger than that; else nothing."""
        step = launch.step
        if (not isinstance(launch, _ConvLaunch) or cfg.rows or cfg.direct or cfg.programs
                or self.plan.buffers[step.out].level == 0):
            return []
        tiles = -(-launch.out_pixels(bufs.tensors) // cfg.block_m)
        return [replace(cfg, programs=p) for p in (sms // 4, sms // 2) if 0 < p < tiles]

    def _candidates(self, launch: Launch, bufs: _Buffers) -> list[Config]:
        candidates = [self.config] if self.config else launch.configs(bufs.tensors)
        return candidates if self.tune else candidates[:1]

    def candidate_calls(self, bufs: _Buffers) -> list[TritonCall]:
        """The Triton launch of every candidate the tuner tries for ``bufs``' shape (the CUDA
        kernels' candidates left out)."""
        return self._triton_calls(bufs, ((launch, cfg) for launch in self.launches
                                         for cfg in self._candidates(launch, bufs)))

    @staticmethod
    def _triton_calls(bufs: _Buffers, runs: Iterable[tuple[Launch, Config]]) -> list[TritonCall]:
        """The Triton launch of each ``(step's launcher, config)`` for ``bufs``' shape, those
        that run a CUDA kernel (direct or pair) left out."""
        return [launch.triton_call(bufs.tensors, bufs.sums, cfg) for launch, cfg in runs
                if not (isinstance(launch, _ConvLaunch) and launch.runs_cuda(cfg))]

    def _precompile(self, calls: list[TritonCall], direct: bool) -> Precompiled:
        """Compile ``calls`` on a thread pool (:mod:`ttball.kernels.precompile`), and build the
        CUDA direct kernels meanwhile if ``direct`` (some of the configurations use them)."""
        jobs = [lambda: direct_library(self.device)] if direct else []
        return precompile(calls, self.device, compile_threads(), jobs)

    def _choose(self, launch: Launch, bufs: _Buffers,
                timed_steps: list[list[tuple[float, Config]]]) -> Config:
        """Run the step with the fastest working candidate (its output then is the result);
        append every working candidate's time, fastest first, to ``timed_steps``."""
        candidates = self._candidates(launch, bufs)
        timed: list[tuple[float, Config]] = []
        for cfg in candidates:
            try:
                seconds = self._time(lambda c=cfg: launch(bufs.tensors, bufs.sums, c))
            except Exception as exc:  # noqa: BLE001  (a config that can't compile is skipped)
                self.failures.append(f"{_name(launch)} {cfg}: {type(exc).__name__}: {exc}")
                continue
            timed.append((seconds, cfg))
        if not timed:
            raise RuntimeError(f"no working kernel configuration for {_name(launch)}: "
                               + "; ".join(self.failures[-len(candidates):]))
        timed.sort(key=lambda pair: pair[0])
        timed_steps.append(timed)
        best = timed[0][1]
        if self.tune:  # timing ran every candidate several times: run the chosen one again
            step = launch.step
            if isinstance(step, Conv) and step.se_sum:  # the repeated launches added up
                bufs.sums[step.se_sum].zero_()
            launch(bufs.tensors, bufs.sums, best)
        return best

    def _choose_pair(self, i: int, bufs: _Buffers, chosen: list[Config],
                     timed: list[list[tuple[float, Config]]]
                     ) -> tuple[int, float, float, str, bool]:
        """After steps ``i`` and ``i + 1`` (a residual block's two convolutions) were tuned and
        run: time the pair kernel's candidates, and take the fastest for both steps if it
        beats their two times by :data:`PAIR_GAIN` (``forced_pair``: take that one). Then the
        second step's output and SE sums are computed again, by whichever runs. Returns
        ``(i, ms of the two steps, ms of the pair, its config, taken)``."""
        first, second = self.launches[i], self.launches[i + 1]
        assert isinstance(first, _ConvLaunch) and isinstance(second, _ConvLaunch)
        best: tuple[float, Config] | None = None
        for cfg in [self.forced_pair] if self.forced_pair else pair_configs(first.step):
            try:
                ms = self._time(lambda c=cfg: first(bufs.tensors, bufs.sums, c))
            except Exception as exc:  # noqa: BLE001  (as in _choose)
                self.failures.append(f"{_name(first)} {cfg}: {type(exc).__name__}: {exc}")
                continue
            if best is None or ms < best[0]:
                best = (ms, cfg)
        separate = timed[i][0][0] + timed[i + 1][0][0]
        if best is not None and (self.forced_pair or best[0] < separate * PAIR_GAIN):
            chosen[i], chosen[i + 1] = best[1], replace(best[1], pair=2)
            timed[i], timed[i + 1] = [best], [(0.0, chosen[i + 1])]  # nothing for refine to try
        se_sum = second.step.se_sum
        if se_sum:  # the timed launches added up
            bufs.sums[se_sum].zero_()
        runner = first if chosen[i].pair else second
        runner(bufs.tensors, bufs.sums, chosen[i] if chosen[i].pair else chosen[i + 1])
        if best is None:
            return i, separate, float("nan"), "", False
        return i, separate, best[0], best[1].short(), bool(chosen[i].pair)

    def _time(self, fn: Callable[[], None]) -> float:
        fn()  # compiles; on CPU (interpreter) this is the only run
        if not self.tune:
            return 0.0
        ms = device_ms(fn, self.device, TUNE_REPS)
        return device_ms(fn, self.device, SHORT_REPS) if ms < SHORT_MS else ms

    def chosen(self, shape: tuple[int, ...]) -> list[tuple[str, Config]]:
        """The configuration each step runs with for ``shape`` (after its first call)."""
        return [(_name(la), cfg) for la, cfg in zip(self.launches, self._configs[shape])]

    def tuned(self, shape: tuple[int, ...]) -> str | None:
        """:meth:`chosen` in one line, ``step=config; …`` (``None`` before the first call)."""
        if shape not in self._configs:
            return None
        return "; ".join(f"{name}={cfg.short()}" for name, cfg in self.chosen(shape))


def _name(launch: Launch) -> str:
    step = launch.step
    return f"conv->{step.out}" if isinstance(step, Conv) else f"tail({step.y})"

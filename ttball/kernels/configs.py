"""What the tuner chooses among for each step of a :class:`~ttball.kernels.plan.Plan`: a
kernel :class:`Config` and, per kind of kernel, the candidate configurations a step gets
(:func:`conv_configs` and :func:`tail_configs` always; :func:`tma_configs`, :func:`rows_configs`,
:func:`direct_configs` and :func:`pair_configs` for the variants that offer them;
:func:`pointwise_configs` for steps of 1×1 stride-1 terms). A candidate's first entry is the
default, used without tuning (``tune=False``, or Triton's interpreter on the CPU). Which one
wins is the executor's measurement (:mod:`ttball.kernels.executor`)."""

from __future__ import annotations

from dataclasses import dataclass

from ttball.kernels.conv import padded
from ttball.kernels.direct import (
    INPUT_KERNELS_TMA,
    PAIRS,
    WGMMA,
    WGMMA_MIN_PIXELS,
    WGMMA_MIN_PIXELS_OF,
    WGMMA_RS,
    WGMMA_TAPS,
    WGMMA_TAPS_TMA,
    WGMMA_TMA,
    direct_applies,
    direct_tiles,
    offered,
    taps_offered,
)
from ttball.kernels.plan import INPUT, Conv, SqueezeTail
from ttball.kernels.pointwise import pointwise_applies


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
    (:data:`~ttball.kernels.direct.WGMMA_RS`); ``tma`` there: its halo copied by TMA.
    ``taps`` (``direct`` > 0): the tap-partials kernel, ``direct`` rows × ``block_m`` columns
    (:data:`~ttball.kernels.direct.WGMMA_TAPS`; with ``tma``, its halo copied by TMA)."""

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
    taps: bool = False

    def short(self) -> str:
        """``m128w4s3`` (+ ``t16`` tile width, ``k64`` taps per K chunk, ``L1``, ``TMA``, ``RS``
        A from registers, ``TAPS`` the tap-partials kernel, ``RES`` resident weights, ``r16``
        rows per program, ``d8`` direct-kernel rows, ``p32`` programs, ``+next`` the pair
        kernel, ``=prev`` computed by it)."""
        text = f"m{self.block_m}w{self.num_warps}s{self.num_stages}"
        text += f"t{self.tile_w}" if self.tile_w else ""
        text += f"k{self.k_chunk}" if self.k_chunk else ""
        text += ("L1" if self.l1 else "") + ("TMA" if self.tma else "") + ("RS" if self.rs else "")
        text += "TAPS" if self.taps else ""
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
    those of :data:`~ttball.kernels.direct.WGMMA_RS` with ``rs`` (A from registers), and
    those of :data:`~ttball.kernels.direct.WGMMA_TAPS` with ``taps`` (and of
    :data:`~ttball.kernels.direct.WGMMA_TAPS_TMA` with ``taps`` and ``tma``) for steps without
    SE sums (with :func:`~ttball.kernels.direct.taps_offered`); for the input step, with
    ``wgmma`` (Hopper), the tiles of :data:`~ttball.kernels.direct.INPUT_KERNELS_TMA` again
    with ``tma`` (its input staged by TMA); those of :data:`~ttball.kernels.direct.UNTESTED`
    only with :func:`~ttball.kernels.direct.next_chosen`."""
    if not direct_applies(step):
        return []
    shape = (step.terms[0].cin, step.cout)
    tiles = [(rows, cols, 8) for rows, cols in direct_tiles(pixels, *shape)]
    if step.terms[0].src == INPUT:  # the input kernel; on Hopper also with its TMA staging
        configs = [Config(cols, warps, stages, direct=rows)
                   for rows, cols, warps in tiles for stages in (2, 1)]
        if wgmma:
            configs += [Config(cols, 4, stages, direct=rows, tma=True)
                        for rows, cols in INPUT_KERNELS_TMA.get(shape, ())
                        if offered(shape, rows, cols, 1, tma=True) for stages in (2, 1)]
        return configs
    wgmma = wgmma and pixels >= WGMMA_MIN_PIXELS_OF.get(shape, WGMMA_MIN_PIXELS)
    if wgmma:
        tiles += [(rows, cols, 4 * groups) for rows, cols, groups in WGMMA.get(shape, ())]
    configs = [Config(cols, warps, stages, direct=rows)
               for rows, cols, warps in tiles for stages in (2, 1)]
    if wgmma:  # and the same tiles with the halo copied by TMA, where compiled
        configs += [Config(cols, 4 * groups, stages, direct=rows, tma=True)
                    for rows, cols, groups in WGMMA_TMA.get(shape, ())
                    if offered(shape, rows, cols, groups, tma=True) for stages in (2, 1)]
        # and the kernel with A from registers
        configs += [Config(cols, 4 * groups, stages, direct=rows, rs=True)
                    for rows, cols, groups in WGMMA_RS.get(shape, ()) for stages in (2, 1)]
        if step.se_sum is None and taps_offered():  # and the nine taps as one wgmma's N
            configs += [Config(cols, 4 * groups, stages, direct=rows, taps=True, tma=tma)
                        for table, tma in ((WGMMA_TAPS, False), (WGMMA_TAPS_TMA, True))
                        for rows, cols, groups in table.get(shape, ())
                        if offered(shape, rows, cols, groups, tma, taps=True)
                        for stages in (2, 1)]
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

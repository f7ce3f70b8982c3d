"""A direct 3×3 convolution in CUDA C++ for the 16- and 32-channel steps (issue 9, eighth step).

Why not Triton: an implicit GEMM reads each input pixel once per tap (nine times) from L2,
which Nsight Compute found 70-85 % busy on these steps; Triton's block language cannot slice
a tile held on chip at an offset, so its row-walking variant still staged every tap's operand
through shared memory (``docs/benchmarks/triton-h200.md``, fourth and fifth steps). Here a
block copies its output tile's halo, ``(TH + 2) × (TW + 2)`` pixels × Cin, from global
memory into shared memory **once**, and each warp forms the nine taps' operands from that
halo at a pixel offset: in NHWC, 16 consecutive pixels × 16 channels are one row-major
16 × 16 matrix, and a tap's shift is an address offset of ``ldmatrix``.

Applies to a conv step with one 3×3 stride-1 term of an NHWC FP16 buffer and no addend, with
16 or 32 channels in and out: conv1 (ReLU) and conv2 (SE sums) of HRNet's BasicBlocks at full
and half resolution, and layer1's 32 → 32; to transition1's 128 → 16 (26 of the plan's 67
steps, 49 % of the steps' time at batch 64). To 64 → 64 only on the wgmma kernel (below): the
mma.sync kernel, compiled for it, was 1.3-2.1× slower than Triton's TMA kernel on all four of
its shapes (twelfth session).
Epilogue as the Triton kernel's: bias, SE sums of the pre-activation by atomics, ReLU, FP16
store.

Two schedules, both offered to the tuner (``Config.num_stages`` 1 or 2): one block per tile,
or a persistent grid whose blocks load their weights once and copy the next tile's halo
with ``cp.async`` into a second buffer while they compute the current tile.

Third version (eleventh session). The second (``nvcuda::wmma``) was measured on an H200
(``docs/benchmarks/triton-h200.md``, "Eighth step, measured"): correct and verified, level
with Triton on 16 → 16 and 2× slower on 32 and 128 input channels, where the fragment loads
and MMAs took two thirds of the time. The third is 1.18-1.36× faster than Triton on the four
shapes at batch 64 and takes the network from 22.8 to 19.7 ms there (3,253 windows/s,
"Eighth step, third version"). Three things in its tensor-core side changed:

- ``mma.sync.m16n8k16`` and ``ldmatrix`` in PTX instead of wmma, so the accumulators stay in
  registers through the epilogue (wmma staged every one through shared memory as FP32);
- the halo and the weights are stored with their 16-byte chunks XOR-swizzled per pixel (per
  weight row), so each 8-row ``ldmatrix`` phase is one shared-memory wavefront; the
  unswizzled rows 32, 64 or 256 bytes apart were 2-, 4- or 8-way bank conflicts (the
  padding of the second version made them 2-way);
- each warp computes two 16-pixel segments at once, so every weight fragment it loads serves
  both, and a block has as many warps as that gives (4 or 8).

Fourth version, beside the third (fifteenth session): ``conv3x3_wgmma_kernel`` for the 16- and
32-channel shapes on compute capability 9.0 (tiles of :data:`WGMMA`). Hopper's warpgroup MMA
reads A and B from shared memory through descriptors, so the halo is stored
channel-group-major (per 8 channels, a plane of every halo pixel's 16 bytes): 8 consecutive
pixels × 8 channels are one contiguous core matrix, and a tap's one-pixel shift is a 16-byte
offset of the descriptor's start address (``scripts/probe_wgmma.cu`` checked this on an
H200). Measured: 7 % faster than the third version on the full-resolution 32 → 32 step at
batch 64, slower at half resolution and at batch 1; the tuner chooses per step. Sixteenth
session: each row's wgmma overlap the previous row's epilogue, a block may have two warpgroups
(each every other row of the tile) and 16 → 16 has 16-row tiles; with them it also wins on
two of the half-resolution 32 → 32 steps at batch 64. Nsight Compute found it latency-bound
(issue slots 37–42 % busy, no unit above 68 %). Seventeenth session: its halo is read
through L1 (``cp.async.ca``), which halved its L2 traffic (with ``.cg`` each 32-byte sector
was read twice, one L2 request a sector), and it takes 64 → 64 (wgmma n64), where the
tensor cores do four times n16's work for each operand they read. Eighteenth session: for
64 → 64 also ``conv3x3_wgmma_n128_kernel``, the output channels as wgmma's M and 128 pixels as
N (``m64n128k16``: twice the work of ``m64n64k16`` for 6 KB of operands against 8 for two),
with the epilogue transposed through shared memory (tiles of 128 columns in :data:`WGMMA`),
and ``conv3x3_wgmma_rs_kernel`` for 16 → 16 and 32 → 32: A from registers, each halo row's
fragments loaded once and used by the up to three output rows that read it
(:data:`WGMMA_RS`; 18 % off 16 → 16, which was bound by shared memory).

The pair kernel (:func:`conv3x3_pair`) runs a residual block's two convolutions with the
intermediate in shared memory; the executor takes it per block and shape only where it
measures faster than the two steps (16 channels at batch 8 and 64 on an H200, by at least the
tuner's 3 %, an estimated 3-6 %: its border recomputation costs about what the saved DRAM
traffic gains; "Tenth step").

The kernels are in ``direct.cu`` beside this file (:data:`KERNEL_SOURCE`), plain CUDA
without PyTorch headers. At first use :func:`build_library` compiles it with ``nvcc`` alone
into a shared library for the device's architecture, kept in ``$TTBALL_CACHE_DIR/kernels``,
and ``ctypes`` calls its C entry points. Until the twelfth session
``torch.utils.cpp_extension.load_inline`` built it together with a wrapper that included
PyTorch's headers: on a 2-core machine that wrapper took 2 min to compile, the kernels 8-12 s,
and it made ``triton-fp16-direct``'s cold start (125 s on an H200, twelfth session) longer
than max-autotune's. ``tests/kernels/test_direct.py`` builds it wherever an ``nvcc`` is found.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from ttball.cachedir import part_path
from ttball.errors import UserError
from ttball.filelock import exclusive
from ttball.kernels.plan import INPUT, Conv

# (TH rows, TW columns) per block. (A 16 × 32 tile, each warp four 16-pixel segments so that a
# weight fragment serves four, at one block of 8 warps an SM, tied or lost on every step in
# the fifteenth session; removed.)
_SMALL = ((8, 32), (4, 32), (16, 16), (8, 16))
# (Cin, Cout) → the tiles compiled for it. 128 → 16 (transition1, the stem's slowest step)
# gets tiles of 8 and 16 pixel segments: its halo takes 46-87 KB of shared memory, its weights
# 37 KB. (A 14 × 16 tile at two blocks an SM, registers capped and taps in a loop, was measured
# in the fifteenth session: 2.08 against 1.85 ms at batch 64, 40.2 against 37.7 µs at batch 1
# for the best tile; removed.)
# 64 → 64 was compiled in the eleventh session and measured in the twelfth: 1.3-2.1× slower
# than Triton on all four of its shapes, so it is not built (triton-h200.md).
KERNELS: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {
    (16, 16): _SMALL, (32, 32): _SMALL, (16, 32): _SMALL, (32, 16): _SMALL,
    (128, 16): ((8, 16), (8, 32), (16, 16)),
}
# (Cin, Cout) → the tiles of the wgmma kernel (``conv3x3_wgmma_kernel``: A and B read by the
# tensor cores from a channel-group-major halo in shared memory; fifteenth session), as (rows,
# 64 pixels, warpgroups a block): with two warpgroups (sixteenth session) each takes every
# other row of the tile, twice the warps an SM for the same shared memory. Hopper only: the
# library is built for sm_90a there, and :func:`wgmma_available` says where the tuner may
# offer them.
WGMMA: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] = {
    shape: ((4, 64, 1), (2, 64, 1), (8, 64, 1), (4, 64, 2), (8, 64, 2))
    for shape in ((16, 16), (32, 32), (16, 32), (32, 16))}
# and for 16 -> 16 (the twelve full-resolution BasicBlock convolutions) 16-row tiles: a 1.125x
# halo instead of 1.25x, two blocks an SM of 81 KB
WGMMA[16, 16] += ((16, 64, 2),)
# and 64 -> 64 (step 1, the stem's second convolution at full resolution, 1.70 ms at batch 64 on
# Triton, 3x its bytes; and the branches' third level): wgmma only (the mma.sync kernel lost to
# Triton on it, eleventh session). 74 KB of weights and 8 halo planes: one block an SM, 2 to 6
# rows; at n64 the tensor cores do 4x the work of n16 for each A operand they read from shared
# memory, so the count had it tensor-bound (seventeenth session). Measured in the eighteenth:
# 4x64x2 1.60 ms alone at batch 64 (cuDNN 3.6), step 1 1.62 against Triton's 1.82-1.88;
# latency-bound under Nsight Compute (tensor pipe 35 %, shared memory 53 %).
WGMMA[64, 64] = ((4, 64, 1), (2, 64, 1), (4, 64, 2), (6, 64, 3))
# and with the pixels as N (conv3x3_wgmma_n128_kernel, eighteenth session; 128-pixel rows,
# 183-219 KB of shared memory: 2 rows with one warpgroup or two, 1 row). Measured: 2x128x2
# 1.55 ms alone against 4x64x2's 1.59; the tuner takes it for step 1 and the SE-sum steps.
WGMMA[64, 64] += ((2, 128, 1), (2, 128, 2), (1, 128, 1))
# Offered only from this many output pixels a step: in the fifteenth session (one warpgroup,
# rows not pipelined) they won or tied at full resolution at batch 64 (9.4 M pixels) and lost
# at half resolution there (2.4 M) and at batch 1 (0.15 M); the sixteenth offers them from half
# resolution at batch 64 again, with pipelined rows and two warpgroups, and not below
# (batch 8 at full resolution is 1.2 M), so the batch-1 tuning is unchanged. The nineteenth
# offers them from 2^17, batch 1 at full resolution: alone at batch 8, 16 -> 16 and 32 -> 32
# took 34-36 and 69-76 us on them against 45 and 88 on the mma.sync kernel; in the network the
# tuner took them for the full-resolution 16/32-channel steps at batch 1 (steps 7 and 8 6.8 and
# 7.4 us with A from registers) and batch 8: `ttball bench` 0.431 -> 0.412 ms at batch 1,
# 2.455 -> 2.237 at 8, 15.956 ms at 64 (4,011 windows/s), verify passed.
WGMMA_MIN_PIXELS = 1 << 17
# except 64 -> 64, where the alternative is Triton, not the mma.sync kernel: from the third
# level at batch 64 (72 x 128 x 64 = 0.59 M pixels; alone there the wgmma kernel took 119 us
# against cuDNN's 247 in the eighteenth session), not at batch 1. (Since the nineteenth
# session's 2^17 for the others this keeps 64 -> 64 off at batch 1: branch wgmma64-b1 offered it
# there, 0.411 against 0.410 ms; with its TMA-halo tiles too, in the forty-sixth session on an
# H100, the tuner took a wgmma tile for step 1 (37.3 us against Triton's 39.2) and the network
# ran 0.407 / 0.407 ms against 0.406 / 0.411: no gain, docs/benchmarks/h100-2026-12-05/.)
WGMMA_MIN_PIXELS_OF: dict[tuple[int, int], int] = {(64, 64): 1 << 19}
# The wgmma tiles also compiled with the halo copied by TMA (one bulk-tensor copy a channel
# plane, zero fill outside the image, an mbarrier per halo buffer) instead of a cp.async per
# 16 bytes: the tiles the tuner chose for these shapes in the seventeenth session. Offered as
# ``Config.tma`` beside them (eighteenth session: the tuner takes them for three of the eight
# steps they are offered to, 6-17 % faster there; alone, only 32 -> 32 8x64x2 gained).
WGMMA_TMA: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] = {
    (16, 16): ((16, 64, 2), (8, 64, 2)), (32, 32): ((8, 64, 2), (4, 64, 2)),
    # and (forty-second session, not measured yet) 64 -> 64's tiles, with the pixels as M and
    # as N (the 128-column kernel: its cp.async halo loop ~28 % of its instructions)
    (64, 64): ((4, 64, 2), (6, 64, 3), (2, 128, 1), (2, 128, 2), (1, 128, 1))}
# The wgmma kernel with A from registers (``conv3x3_wgmma_rs_kernel``, eighteenth session): each
# warpgroup walks its consecutive rows' halo rows and uses each halo row's A fragments for the
# up to three output rows that read it, so A's shared-memory reads fall by 3R / (R + 2) for R
# rows a warpgroup (Nsight Compute had 16 -> 16 bound by shared memory). Offered as
# ``Config.rs`` where the wgmma tiles are, as (rows, 64, warpgroups). Measured (eighteenth
# session, batch 64): 16 -> 16 16x64x2 174 us against 212 with A from shared memory (-18 %);
# 32 -> 32 500 us against 489 with the TMA halo (no gain: not bound by A's reads).
WGMMA_RS: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] = {
    (16, 16): ((16, 64, 1), (16, 64, 2), (8, 64, 1), (8, 64, 2)),
    (32, 32): ((8, 64, 1), (8, 64, 2), (4, 64, 2))}

# The tap-partials kernel (``conv3x3_wgmma_taps_kernel``, forty-second session) for 128 -> 16:
# the nine taps as one wgmma's N (m64n144k16 over a halo of 8 x 32 pixels, A and B from
# shared memory), their FP16 partials summed from shared memory for each of the 6 x 30 output
# pixels. Under Nsight Compute the direct kernel ran this step with the tensor pipe 33 % busy,
# waiting on its ldmatrix and mma.sync chains. Offered as ``Config.taps`` where the wgmma
# tiles are (from WGMMA_MIN_PIXELS), as (rows, columns, warpgroups); no SE sums. Measured on an
# H200 (GPU tests passed, verify PASS): step 5 1.45-1.48 ms at batch 64 against the direct
# kernel's 1.63-1.65, 29.7-30.4 us at batch 1 against 33.9-35.6; the network 0.6-0.9 % faster
# at 64, 0.5-2 % at 1 (docs/benchmarks/triton-h200.md, "Forty-second session").
# $TTBALL_WGMMA_TAPS=0 leaves it out (:func:`taps_offered`).
# Its second tile (not measured yet): 6 x 14 outputs over an 8 x 16 halo with one warpgroup
# (106 KB), two blocks an SM, so one block's wgmma run while the other stores or sums its
# partials (the 6 x 30 tile's one block runs its phases one after the other, the tensor pipe
# 37 % busy); about the same MMA rows an output (1.52x against 1.42x). And 14 x 14 outputs
# over a 16 x 16 halo (two warpgroups, 176 KB, one block an SM as 6 x 30): 1.31x.
WGMMA_TAPS: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] = {
    (128, 16): ((6, 30, 2), (6, 14, 1), (14, 14, 2))}
TAPS_ENV = "TTBALL_WGMMA_TAPS"
# The same with the halo copied by TMA (``Config.taps`` and ``tma``): in the cp.async version
# the halo's copy loop is 28 instructions a 16-byte chunk, 16 chunks a thread a tile, ~450 of
# the ~1,190 instructions a thread issues a tile (scripts/sass_loops.py; the kernel is
# issue-bound, 38 % of issue slots with 8 warps an SM under Nsight Compute).
WGMMA_TAPS_TMA: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] = {
    (128, 16): ((6, 30, 2), (6, 14, 1), (14, 14, 2))}
# Candidates built without a GPU, as (Cin, Cout, rows, columns, warpgroups, tma, taps): their
# GPU tests have not run, and the tuner checks speed, not results, so it offers them only with
# $TTBALL_DIRECT_NEXT=1, or those named there by :func:`candidate_id` (:func:`next_chosen`;
# scripts/gpu_candidate_tests.py runs their tests and names those that passed). Empty since
# the forty-fifth session: the twelve built in the forty-second to forty-fourth (the
# tap-partials kernel's 6 x 14 and 14 x 14 tiles and its TMA halo, the 64 -> 64 tiles' TMA
# halos, the input kernel's TMA staging) passed their GPU tests and `ttball verify` with all of
# them offered on an H200 (docs/benchmarks/h200-2026-12-05c/README.md).
UNTESTED: frozenset[tuple[int, int, int, int, int, bool, bool]] = frozenset()
NEXT_ENV = "TTBALL_DIRECT_NEXT"
# The column counts of the wgmma kernels' tiles (their blocks are warpgroups): 64 and 128 of
# WGMMA, and the tap-partials kernel's
WGMMA_COLUMNS = (64, 128) + tuple(sorted({cols for tiles in WGMMA_TAPS.values()
                                          for _, cols, _ in tiles}))

# The stem's first convolution, from the network's FP32 NCHW input: (input channels, Cout) →
# tiles (conv3x3_input_kernel; 4 warps a block, registers capped for three blocks per SM,
# since its halo loads are synchronous; 8-warp tiles spilled at two blocks per SM).
INPUT_KERNELS: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {(9, 64): ((8, 16), (4, 32))}
# The same tiles with each tile's input staged by TMA (``conv3x3_input_tma_kernel``,
# forty-fourth session; Hopper): one copy instruction a tile, the next tile's during this one's
# MMAs, then a conversion from shared memory (36 instructions a halo pixel in the SASS against
# 98 for the plain loads, whose latency Nsight Compute found the kernel stalled on). Offered
# where the wgmma tiles are (:func:`wgmma_available`), as ``Config.tma`` on the input step.
# Its GPU test failed on an H200 at the forty-fourth session's end ("illegal instruction": the
# box started one FP32 column left of the tile, not 16-byte aligned); with the box four columns
# left it passed in the forty-fifth: step 0 at batch 64 915 -> 732 us, at batch 1 20.1 -> 17.3.
INPUT_KERNELS_TMA: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {
    (9, 64): ((8, 16), (4, 32))}

# Channels of a residual block's two 3×3 convolutions → the tiles of the pair kernel compiled
# for it (rows, columns of output pixels): 16 at full resolution, 32 at half.
PAIRS: dict[int, tuple[tuple[int, int], ...]] = {16: ((8, 32), (8, 64)), 32: ((8, 16), (8, 32))}

# The kernels (plain CUDA, no PyTorch headers: tests compile it with nvcc alone).
KERNEL_SOURCE = Path(__file__).with_name("direct.cu").read_text()

def taps_offered() -> bool:
    """Whether the tuner offers the tap-partials kernel (:data:`WGMMA_TAPS`): unless
    ``$TTBALL_WGMMA_TAPS`` is ``0``."""
    return os.environ.get(TAPS_ENV, "").strip() != "0"


def candidate_id(cin: int, cout: int, rows: int, cols: int, groups: int, tma: bool = False,
                 taps: bool = False) -> str:
    """A wgmma tile's name, as its GPU test's id: ``"128-16-6x14-wg1-taps-tma"``."""
    return f"{cin}-{cout}-{rows}x{cols}-wg{groups}" + "-taps" * taps + "-tma" * tma


def next_chosen() -> frozenset[tuple[int, int, int, int, int, bool, bool]]:
    """The candidates of :data:`UNTESTED` the tuner also offers: all of them if
    ``$TTBALL_DIRECT_NEXT`` is ``1``, those it names by :func:`candidate_id` if it is a
    comma-separated list (the ones whose GPU tests passed), none if unset or empty.

    Raises:
        UserError: a name that is not one of :data:`UNTESTED`'s.
    """
    value = os.environ.get(NEXT_ENV, "").strip()
    if value in ("", "0"):
        return frozenset()
    if value == "1":
        return UNTESTED
    by_id = {candidate_id(*key): key for key in UNTESTED}
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in by_id]
    if unknown:
        raise UserError(f"${NEXT_ENV}: {', '.join(unknown)} not among the untested candidates "
                         f"({', '.join(sorted(by_id))}); 1 offers all of them")
    return frozenset(by_id[name] for name in names)


def offered(shape: tuple[int, int], rows: int, cols: int, groups: int, tma: bool = False,
            taps: bool = False) -> bool:
    """Whether the tuner may offer this compiled tile: not one of :data:`UNTESTED`, or one of
    :func:`next_chosen`."""
    key = (*shape, rows, cols, groups, tma, taps)
    return key not in UNTESTED or key in next_chosen()


def direct_applies(step: Conv) -> bool:
    """Whether :func:`conv3x3_direct` can run ``step`` (see the module's docstring)."""
    if len(step.terms) != 1 or step.addends:
        return False
    t = step.terms[0]
    if not (t.ksize == 3 and t.stride == 1 and t.up == 0):
        return False
    if t.src == INPUT:  # conv3x3_direct_input
        return (t.cin, step.cout) in INPUT_KERNELS and step.se_sum is None
    return (t.cin, step.cout) in KERNELS or (t.cin, step.cout) in WGMMA


def pair_applies(first: Conv, second: Conv) -> bool:
    """Whether :func:`conv3x3_pair` can run ``first`` and then ``second`` as one kernel: a
    residual block's conv1 (ReLU, no SE sums) and conv2 (reading conv1's output only), both
    3×3 stride 1 with the same channel count of :data:`PAIRS`. The caller checks that no
    other step reads ``first``'s output, which the pair never writes."""
    if not (direct_applies(first) and direct_applies(second)):
        return False
    c = first.terms[0].cin
    return (c in PAIRS and first.cout == c and second.terms[0].cin == c and second.cout == c
            and first.relu and first.se_sum is None and second.terms[0].src == first.out)


def direct_tiles(pixels: int, cin: int, cout: int) -> list[tuple[int, int]]:
    """Tile candidates for a step with ``pixels`` output pixels (the tuner picks): for the
    small channel counts, smaller tiles where the grid would not fill an H200's 132
    multiprocessors a few times over."""
    tiles = KERNELS.get((cin, cout)) or INPUT_KERNELS.get((cin, cout), ())
    if tiles is not _SMALL:  # (none for a shape only the wgmma kernel takes, 64 -> 64)
        return list(tiles)
    if pixels < 132 * 256 * 4:
        return [(4, 32), (8, 16)]
    return [(8, 32), (16, 16), (4, 32)]


def wgmma_available(device: torch.device) -> bool:
    """Whether the wgmma kernel's tiles (:data:`WGMMA`) run on ``device``: compute capability
    9.0 exactly, for which :func:`build_library` targets sm_90a (wgmma's architecture-specific
    target)."""
    return (device.type == "cuda" and torch.cuda.is_available()
            and torch.cuda.get_device_capability(device) == (9, 0))


def direct_missing(device: torch.device) -> str | None:
    """Why the direct kernel can't be built or run on ``device`` (None: it can)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return "needs a CUDA device"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return "needs compute capability 8.0 or newer"
    if nvcc_path() is None:
        return "needs nvcc (CUDA's compiler) to build the kernel"
    return None


def nvcc_path() -> str | None:
    """CUDA's compiler: ``$CUDA_HOME/bin/nvcc`` as PyTorch finds it, else ``nvcc`` on PATH."""
    from torch.utils.cpp_extension import CUDA_HOME

    if CUDA_HOME and (Path(CUDA_HOME) / "bin" / "nvcc").is_file():
        return str(Path(CUDA_HOME) / "bin" / "nvcc")
    return shutil.which("nvcc")


def build_library(directory: Path, arch: str, nvcc: str | None = None) -> Path:
    """:data:`KERNEL_SOURCE` compiled for ``sm_<arch>`` (e.g. ``"90"``; ``sm_90a`` for it, which
    the wgmma kernel needs) into a shared library in ``directory`` (:func:`nvcc_library`). ``nvcc``
    alone builds it (no PyTorch headers, which took about two minutes of a 2-core machine's
    compile in the ``load_inline`` build this replaces, the kernels 8 s), its device code
    optimised on every core (``--split-compile=0``, left out by an nvcc before 11.8)."""
    nvcc = nvcc or nvcc_path()
    if nvcc is None:
        raise RuntimeError("needs nvcc (CUDA's compiler) to build the kernel")
    target = "90a" if arch == "90" else arch  # the wgmma kernel needs sm_90a's instructions
    flags = ["-std=c++17", "-O3", "--split-compile=0",
             f"-gencode=arch=compute_{target},code=sm_{target}"]
    return nvcc_library(directory, "ttball_direct", f"{KERNEL_SOURCE}|{arch}",
                        Path(__file__).with_name("direct.cu"), flags, nvcc,
                        optional="--split-compile=0")


def nvcc_library(directory: Path, name: str, key: str, source: Path, flags: Sequence[str],
                 nvcc: str, libraries: Sequence[str] = (), optional: str | None = None) -> Path:
    """``source`` compiled by ``nvcc`` with ``flags`` (and linked with ``libraries``) into the
    shared library ``<name>_<digest>.so`` in ``directory``; ``key`` is what decides the build
    besides the compiler (the source's text, the architecture), the digest is of both, and an
    existing library is reused. The CUDA runtime is linked as a shared library: the one PyTorch
    loaded (same soname) if it has, else the toolkit's, found through the rpath. One process
    builds it at a time (a lock beside it, :func:`ttball.filelock.exclusive`): others wait, then
    take its library (eight replicas started together each ran nvcc on every core); past the
    lock's timeout a process builds its own, writing a temporary file and renaming it, so a
    reader never sees half of one. ``optional``: a flag dropped, and the build run again, when
    nvcc's error names it (an older nvcc)."""
    real = Path(nvcc).resolve()
    digest = hashlib.sha256(
        f"{key}|{real}|{real.stat().st_mtime_ns if real.exists() else 0}".encode()).hexdigest()
    lib = directory / f"{name}_{digest[:16]}.so"
    if lib.is_file():
        return lib
    with exclusive(lib.with_suffix(".lock")):
        if lib.is_file():  # built by the process that held the lock
            return lib
        directory.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_name(f"{lib.stem}.{os.getpid()}.tmp.so")
        cmd = [nvcc, "-shared", *flags, "-Xcompiler", "-fPIC", "-cudart", "shared",
               "-Xlinker", f"-rpath={real.parent.parent / 'lib64'}", str(source), "-o", str(tmp),
               *libraries]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
            if done.returncode != 0 and optional and optional.split("=")[0] in done.stderr:
                cmd.remove(optional)
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                                      check=False)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise RuntimeError(f"nvcc exited with {done.returncode}: {last}")
            os.replace(tmp, lib)
        finally:
            tmp.unlink(missing_ok=True)
    return lib


def library_dir() -> Path:
    """Where the built library is kept: ``$TTBALL_CACHE_DIR/kernels`` (default
    ``~/.cache/ttball/kernels``)."""
    return part_path("kernels")


_P, _I = ctypes.c_void_p, ctypes.c_int
# the entry points of direct.cu: pointers, then ints, then the stream
_SIGNATURES = {
    "ttball_conv3x3_direct": [_P] * 5 + [_I] * 14 + [_P],
    "ttball_conv3x3_pair": [_P] * 7 + [_I] * 11 + [_P],
    "ttball_conv3x3_direct_input": [_P] * 4 + [_I] * 12 + [_P],
}
_LIBRARIES: dict[str, ctypes.CDLL] = {}
_FAILED: dict[str, str] = {}  # arch → why its build failed: not tried again in this process


def direct_library(device: torch.device) -> ctypes.CDLL:
    """The compiled kernels for ``device``'s architecture (built at first use, then cached on
    disk by :func:`build_library` and in this process)."""
    major, minor = torch.cuda.get_device_capability(device)
    arch = f"{major}{minor}"
    if arch in _FAILED:
        raise RuntimeError(_FAILED[arch])
    if arch not in _LIBRARIES:
        try:
            lib = ctypes.CDLL(str(build_library(library_dir(), arch)))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            _FAILED[arch] = f"building the direct kernel failed: {type(exc).__name__}: {exc}"
            raise RuntimeError(_FAILED[arch]) from exc
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        _LIBRARIES[arch] = lib
    return _LIBRARIES[arch]


def _check(name: str, t: Tensor, dtype: torch.dtype, device: torch.device) -> None:
    if device.type != "cuda":
        raise ValueError(f"{name}: a CUDA tensor expected, got one on {device}")
    if t.dtype != dtype or not t.is_contiguous() or t.device != device:
        raise ValueError(f"{name}: contiguous {dtype} on {device} expected, got {t.dtype}, "
                         f"{'' if t.is_contiguous() else 'not '}contiguous, on {t.device}")


def _result(rc: int, what: str) -> None:
    if rc == -1:
        raise ValueError(f"{what}: not compiled in")
    if rc != 0:
        raise RuntimeError(f"{what}: CUDA error {rc}")


def conv3x3_direct(out: Tensor, x: Tensor, w: Tensor, bias: Tensor, se_sum: Tensor | None,
                   tile: tuple[int, int], relu: bool, pipelined: bool = False,
                   skip_mma: bool = False, max_blocks: int = 0, warpgroups: int = 1,
                   tma: bool = False, rs: bool = False, taps: bool = False) -> None:
    """``out = relu?(conv3x3(x, w) + bias)`` on the current CUDA stream, and
    ``se_sum += sum_hw(conv + bias)`` if given. ``x``, ``out``: contiguous NHWC FP16; ``w``:
    :func:`ttball.kernels.conv.pack_weight` of the ``(Cout, Cin, 3, 3)`` weight; ``bias``:
    float32 ``(Cout,)``; ``tile``: (rows, columns) of output pixels per block.

    ``pipelined``: a persistent grid (as many blocks as fit on the device at once), each block
    loading its weights once and copying the next tile's halo while it computes this one
    (``cp.async``, two halo buffers); else one block per tile. ``max_blocks`` > 0 caps the
    persistent grid (tests: many tiles a block on small inputs). ``skip_mma`` leaves out the
    tensor-core work (a wrong result: for timing the copies and the epilogue alone; not for
    the wgmma kernel's tiles, :data:`WGMMA`). ``warpgroups``: the wgmma kernel's warpgroups a
    block (1 to 3; 1 for the other tiles); ``tma``: its halo copied by TMA (the tiles of
    :data:`WGMMA_TMA`); ``rs``: its A operand from registers (the tiles of :data:`WGMMA_RS`);
    ``taps``: the tap-partials kernel (the tiles of :data:`WGMMA_TAPS`, no ``se_sum``; with
    ``tma`` its halo copied by TMA, the tiles of :data:`WGMMA_TAPS_TMA`)."""
    if x.dim() != 4 or out.dim() != 4 or out.shape[:3] != x.shape[:3]:
        raise ValueError(f"x {tuple(x.shape)} and out {tuple(out.shape)}: NHWC with the same "
                         "batch, height and width expected")
    if tma and tile[1] not in (64, 128) and not taps:
        raise ValueError("tma: only for the wgmma kernels' tiles (64 or 128 columns, or taps)")
    if rs and (tma or tile[1] != 64):
        raise ValueError("rs: only for the wgmma kernel's tiles (64 columns), without tma")
    if taps and (rs or se_sum is not None or (x.shape[3], out.shape[3]) not in WGMMA_TAPS):
        raise ValueError("taps: only for the shapes of WGMMA_TAPS, without rs or se_sum")
    if skip_mma and (tile[1] in WGMMA_COLUMNS or taps):
        raise ValueError("skip_mma: not for the wgmma kernels' tiles")
    if warpgroups not in (1, 2, 3) or (warpgroups > 1 and tile[1] not in WGMMA_COLUMNS):
        raise ValueError(f"warpgroups={warpgroups}: 1, or 2 or 3 for the wgmma kernels' tiles "
                         f"({', '.join(map(str, WGMMA_COLUMNS))} columns)")
    for name, t, dtype in (("x", x, torch.float16), ("out", out, torch.float16),
                           ("w", w, torch.float16), ("bias", bias, torch.float32)):
        _check(name, t, dtype, x.device)
    if se_sum is not None:
        _check("se_sum", se_sum, torch.float32, x.device)
    (rows, cols), (batch, height, width, cin), cout = tile, x.shape, out.shape[3]
    # the C entry's variant: 0 as tiled, 1 the TMA halo, 2 A from registers, 3 the tap
    # partials, 4 those with the TMA halo
    variant = (4 if tma else 3) if taps else 1 if tma else 2 if rs else 0
    stream = torch.cuda.current_stream(x.device).cuda_stream  # the capture stream in a capture
    rc = direct_library(x.device).ttball_conv3x3_direct(
        out.data_ptr(), x.data_ptr(), w.data_ptr(), bias.data_ptr(),
        se_sum.data_ptr() if se_sum is not None else None, batch, height, width, cin, cout,
        rows, cols, warpgroups, variant, relu, se_sum is not None, pipelined, skip_mma,
        max_blocks, stream)
    _result(rc, f"conv3x3_direct for {cin} -> {cout} channels, tile {rows}x{cols}"
            + (f", {warpgroups} warpgroups" if warpgroups > 1 else "") + (", TMA" if tma else "")
            + (", A from registers" if rs else "") + (", tap partials" if taps else ""))


def conv3x3_pair(out: Tensor, x: Tensor, w1: Tensor, bias1: Tensor, w2: Tensor, bias2: Tensor,
                 se_sum: Tensor | None, tile: tuple[int, int], relu: bool,
                 pipelined: bool = False, skip_mma: bool = False, max_blocks: int = 0) -> None:
    """A residual block's two convolutions in one kernel, on the current CUDA stream:
    ``mid = relu(conv3x3(x, w1) + bias1)`` (FP16, kept in shared memory, never written), then
    ``out = relu?(conv3x3(mid, w2) + bias2)`` and ``se_sum += sum_hw(conv3x3(mid, w2) + bias2)``
    if given. Channels: one of :data:`PAIRS`, the same in ``x``, mid and ``out``; weights,
    biases, ``tile``, ``pipelined``, ``skip_mma`` and ``max_blocks`` as for
    :func:`conv3x3_direct` (the tile is one of ``PAIRS[channels]``)."""
    if x.dim() != 4 or out.shape != x.shape:
        raise ValueError(f"x {tuple(x.shape)} and out {tuple(out.shape)}: NHWC of one shape "
                         "expected")
    for name, t, dtype in (("x", x, torch.float16), ("out", out, torch.float16),
                           ("w1", w1, torch.float16), ("w2", w2, torch.float16),
                           ("bias1", bias1, torch.float32), ("bias2", bias2, torch.float32)):
        _check(name, t, dtype, x.device)
    if se_sum is not None:
        _check("se_sum", se_sum, torch.float32, x.device)
    (rows, cols), (batch, height, width, channels) = tile, x.shape
    stream = torch.cuda.current_stream(x.device).cuda_stream
    rc = direct_library(x.device).ttball_conv3x3_pair(
        out.data_ptr(), x.data_ptr(), w1.data_ptr(), bias1.data_ptr(), w2.data_ptr(),
        bias2.data_ptr(), se_sum.data_ptr() if se_sum is not None else None, batch, height,
        width, channels, rows, cols, relu, se_sum is not None, pipelined, skip_mma, max_blocks,
        stream)
    _result(rc, f"conv3x3_pair for {channels} channels, tile {rows}x{cols}")


def conv3x3_direct_input(out: Tensor, x: Tensor, w: Tensor, bias: Tensor,
                         tile: tuple[int, int], relu: bool, pipelined: bool = False,
                         skip_mma: bool = False, max_blocks: int = 0, tma: bool = False) -> None:
    """The stem's first convolution from the network's input, on the current CUDA stream:
    ``out = relu?(conv3x3(x, w) + bias)`` with ``x`` the contiguous FP32 NCHW batch (its
    channels one of :data:`INPUT_KERNELS`, converted to FP16 and padded to 16 on chip) and
    ``out`` contiguous NHWC FP16. ``w``: :func:`ttball.kernels.conv.pack_weight` of the
    weight (16 rows per tap); the rest as for :func:`conv3x3_direct` (``pipelined``: a
    persistent grid, each block loading its weights once; the halo loads are not overlapped).
    ``tma`` (tiles of :data:`INPUT_KERNELS_TMA`, H100/H200): each tile's input staged by TMA,
    the next tile's while this one computes (the width a multiple of 4)."""
    if x.dim() != 4 or out.dim() != 4 or (out.shape[0], out.shape[1], out.shape[2]) != (
            x.shape[0], x.shape[2], x.shape[3]):
        raise ValueError(f"x {tuple(x.shape)} (NCHW) and out {tuple(out.shape)} (NHWC): the "
                         "same batch, height and width expected")
    (rows, cols), (batch, channels, height, width), cout = tile, x.shape, out.shape[3]
    if tma and (rows, cols) not in INPUT_KERNELS_TMA.get((channels, cout), ()):
        raise ValueError(f"tma: only for the tiles of INPUT_KERNELS_TMA, not {channels} -> "
                         f"{cout} with {rows}x{cols}")
    if tma and width % 4:
        raise ValueError(f"tma: the tensor map's rows must be 16-byte multiples: width {width} "
                         "is not a multiple of 4")
    for name, t, dtype in (("x", x, torch.float32), ("out", out, torch.float16),
                           ("w", w, torch.float16), ("bias", bias, torch.float32)):
        _check(name, t, dtype, x.device)
    if tma and not wgmma_available(x.device):
        raise ValueError("tma: the input's TMA staging is built for sm_90a (H100/H200) only")
    stream = torch.cuda.current_stream(x.device).cuda_stream
    rc = direct_library(x.device).ttball_conv3x3_direct_input(
        out.data_ptr(), x.data_ptr(), w.data_ptr(), bias.data_ptr(), batch, height, width,
        channels, cout, rows, cols, int(tma), relu, pipelined, skip_mma, max_blocks, stream)
    _result(rc, f"conv3x3_direct_input for {channels} -> {cout} channels, tile {rows}x{cols}"
            + (" (TMA)" if tma else ""))

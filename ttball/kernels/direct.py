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
steps, 49 % of the steps' time at batch 64); and, added after the last measurement, to
64 → 64: the stem's second convolution and the BasicBlocks at quarter resolution (9 steps).
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

The pair kernel (:func:`conv3x3_pair`) runs a residual block's two convolutions with the
intermediate in shared memory; the executor takes it per block and shape only where it
measures faster than the two steps (16 channels at batch 8 and 64 on an H200, by at least the
tuner's 3 %, an estimated 3-6 %: its border recomputation costs about what the saved DRAM
traffic gains; "Tenth step").

Built at first use with ``torch.utils.cpp_extension.load_inline`` (needs ``nvcc`` and a C++
compiler; the GPU tests, this build included, took 70-74 s on a fresh H200 machine; then cached
by PyTorch). The kernels are in ``direct.cu`` beside
this file (:data:`KERNEL_SOURCE`), plain CUDA without PyTorch headers, so
``tests/kernels/test_direct.py`` compiles it for sm_90 wherever an ``nvcc`` is found.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ttball.kernels.plan import INPUT, Conv

_SMALL = ((8, 32), (4, 32), (16, 16), (8, 16))  # (TH rows, TW columns) per block
# (Cin, Cout) → the tiles compiled for it. 128 → 16 (transition1, the stem's slowest step)
# gets tiles of 8 and 16 pixel segments: its halo takes 46-87 KB of shared memory, its weights
# 37 KB. 64 → 64 (not measured yet): weights 74 KB, halos 23-44 KB.
KERNELS: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {
    (16, 16): _SMALL, (32, 32): _SMALL, (16, 32): _SMALL, (32, 16): _SMALL,
    (128, 16): ((8, 16), (8, 32), (16, 16)),
    (64, 64): ((8, 16), (8, 32), (16, 16)),
}

# Channels of a residual block's two 3×3 convolutions → the tiles of the pair kernel compiled
# for it (rows, columns of output pixels): 16 at full resolution, 32 at half.
PAIRS: dict[int, tuple[tuple[int, int], ...]] = {16: ((8, 32), (8, 64)), 32: ((8, 16), (8, 32))}

# The kernels (plain CUDA, no PyTorch headers: tests compile it with nvcc alone).
KERNEL_SOURCE = Path(__file__).with_name("direct.cu").read_text()

_WRAPPER_SOURCE = r"""
#include <torch/extension.h>

extern "C" int ttball_conv3x3_direct(void* out, const void* x, const void* w, const float* bias,
                                     float* se_sum, int B, int H, int W, int cin, int cout,
                                     int th, int tw, int relu, int has_sum,
                                     int pipelined, int skip_mma, int max_blocks,
                                     cudaStream_t stream);

void conv3x3_direct(torch::Tensor out, torch::Tensor x, torch::Tensor w, torch::Tensor bias,
                    torch::Tensor se_sum, int64_t th, int64_t tw, bool relu, bool has_sum,
                    bool pipelined, bool skip_mma, int64_t max_blocks, int64_t stream) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kHalf && x.is_contiguous() && x.dim() == 4,
              "x: contiguous NHWC FP16 on CUDA");
  TORCH_CHECK(out.scalar_type() == torch::kHalf && out.is_contiguous(), "out: contiguous FP16");
  TORCH_CHECK(out.size(0) == x.size(0) && out.size(1) == x.size(1) && out.size(2) == x.size(2),
              "out must have x's batch, height and width");
  TORCH_CHECK(w.scalar_type() == torch::kHalf && w.is_contiguous(), "w: packed FP16");
  TORCH_CHECK(bias.scalar_type() == torch::kFloat, "bias: float32");
  TORCH_CHECK(!has_sum || se_sum.scalar_type() == torch::kFloat, "se_sum: float32");
  int rc = ttball_conv3x3_direct(out.data_ptr(), x.data_ptr(), w.data_ptr(),
                                 bias.data_ptr<float>(),
                                 has_sum ? se_sum.data_ptr<float>() : nullptr,
                                 (int)x.size(0), (int)x.size(1), (int)x.size(2), (int)x.size(3),
                                 (int)out.size(3), (int)th, (int)tw, relu, has_sum, pipelined,
                                 skip_mma, (int)max_blocks,
                                 reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(rc != -1, "conv3x3_direct: no kernel for cin ", x.size(3), ", cout ", out.size(3),
              ", tile ", th, "x", tw);
  TORCH_CHECK(rc == 0, "conv3x3_direct: CUDA error ", rc);
}

extern "C" int ttball_conv3x3_pair(void* out, const void* x, const void* w1,
                                   const float* bias1, const void* w2, const float* bias2,
                                   float* se_sum, int B, int H, int W, int c, int th, int tw,
                                   int relu, int has_sum, int pipelined, int skip_mma,
                                   int max_blocks, cudaStream_t stream);

void conv3x3_pair(torch::Tensor out, torch::Tensor x, torch::Tensor w1, torch::Tensor bias1,
                  torch::Tensor w2, torch::Tensor bias2, torch::Tensor se_sum, int64_t th,
                  int64_t tw, bool relu, bool has_sum, bool pipelined, bool skip_mma,
                  int64_t max_blocks, int64_t stream) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kHalf && x.is_contiguous() && x.dim() == 4,
              "x: contiguous NHWC FP16 on CUDA");
  TORCH_CHECK(out.scalar_type() == torch::kHalf && out.is_contiguous() && out.sizes() == x.sizes(),
              "out: contiguous FP16 of x's shape");
  TORCH_CHECK(w1.scalar_type() == torch::kHalf && w1.is_contiguous() &&
              w2.scalar_type() == torch::kHalf && w2.is_contiguous(), "w1, w2: packed FP16");
  TORCH_CHECK(bias1.scalar_type() == torch::kFloat && bias2.scalar_type() == torch::kFloat,
              "bias1, bias2: float32");
  TORCH_CHECK(!has_sum || se_sum.scalar_type() == torch::kFloat, "se_sum: float32");
  int rc = ttball_conv3x3_pair(out.data_ptr(), x.data_ptr(), w1.data_ptr(),
                               bias1.data_ptr<float>(), w2.data_ptr(), bias2.data_ptr<float>(),
                               has_sum ? se_sum.data_ptr<float>() : nullptr,
                               (int)x.size(0), (int)x.size(1), (int)x.size(2), (int)x.size(3),
                               (int)th, (int)tw, relu, has_sum, pipelined, skip_mma,
                               (int)max_blocks, reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(rc != -1, "conv3x3_pair: no kernel for ", x.size(3), " channels, tile ", th, "x",
              tw);
  TORCH_CHECK(rc == 0, "conv3x3_pair: CUDA error ", rc);
}
"""

_DECLARATION = ("void conv3x3_direct(torch::Tensor out, torch::Tensor x, torch::Tensor w, "
                "torch::Tensor bias, torch::Tensor se_sum, int64_t th, int64_t tw, bool relu, "
                "bool has_sum, bool pipelined, bool skip_mma, int64_t max_blocks, "
                "int64_t stream);\n"
                "void conv3x3_pair(torch::Tensor out, torch::Tensor x, torch::Tensor w1, "
                "torch::Tensor bias1, torch::Tensor w2, torch::Tensor bias2, "
                "torch::Tensor se_sum, int64_t th, int64_t tw, bool relu, bool has_sum, "
                "bool pipelined, bool skip_mma, int64_t max_blocks, int64_t stream);")


def direct_applies(step: Conv) -> bool:
    """Whether :func:`conv3x3_direct` can run ``step`` (see the module's docstring)."""
    if len(step.terms) != 1 or step.addends:
        return False
    t = step.terms[0]
    return (t.ksize == 3 and t.stride == 1 and t.up == 0 and t.src != INPUT
            and (t.cin, step.cout) in KERNELS)


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
    tiles = KERNELS[cin, cout]
    if tiles is not _SMALL:
        return list(tiles)
    if pixels < 132 * 256 * 4:
        return [(4, 32), (8, 16)]
    return [(8, 32), (16, 16), (4, 32)]


def direct_missing(device: torch.device) -> str | None:
    """Why the direct kernel can't be built or run on ``device`` (None: it can)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return "needs a CUDA device"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return "needs compute capability 8.0 or newer"
    from torch.utils.cpp_extension import CUDA_HOME

    if not (CUDA_HOME or shutil.which("nvcc")):
        return "needs nvcc (CUDA's compiler) to build the kernel"
    return None


_MODULE: Any = None
_FAILED: str | None = None  # why the build failed: not tried again in this process


def _module() -> Any:
    """The compiled extension (built once per source version, cached by PyTorch)."""
    global _MODULE, _FAILED
    if _FAILED:
        raise RuntimeError(_FAILED)
    if _MODULE is None:
        from torch.utils.cpp_extension import load_inline

        digest = hashlib.sha256((KERNEL_SOURCE + _WRAPPER_SOURCE).encode()).hexdigest()[:12]
        try:
            _MODULE = load_inline(
                name=f"ttball_direct_{digest}", cpp_sources=_DECLARATION,
                cuda_sources=KERNEL_SOURCE + _WRAPPER_SOURCE,
                functions=["conv3x3_direct", "conv3x3_pair"],
                extra_cuda_cflags=["-O3"], verbose=False,
            )
        except Exception as exc:  # a compiler's failure comes in many types
            lines = str(exc).strip().splitlines() or [""]
            _FAILED = f"building the direct kernel failed: {type(exc).__name__}: {lines[-1]}"
            raise RuntimeError(_FAILED) from exc
    return _MODULE


def conv3x3_direct(out: Tensor, x: Tensor, w: Tensor, bias: Tensor, se_sum: Tensor | None,
                   tile: tuple[int, int], relu: bool, pipelined: bool = False,
                   skip_mma: bool = False, max_blocks: int = 0) -> None:
    """``out = relu?(conv3x3(x, w) + bias)`` on the current CUDA stream, and
    ``se_sum += sum_hw(conv + bias)`` if given. ``x``, ``out``: contiguous NHWC FP16; ``w``:
    :func:`ttball.kernels.conv.pack_weight` of the ``(Cout, Cin, 3, 3)`` weight; ``bias``:
    float32 ``(Cout,)``; ``tile``: (rows, columns) of output pixels per block.

    ``pipelined``: a persistent grid (as many blocks as fit on the device at once), each block
    loading its weights once and copying the next tile's halo while it computes this one
    (``cp.async``, two halo buffers); else one block per tile. ``max_blocks`` > 0 caps the
    persistent grid (tests: many tiles a block on small inputs). ``skip_mma`` leaves out the
    tensor-core work (a wrong result: for timing the copies and the epilogue alone)."""
    rows, cols = tile
    stream = torch.cuda.current_stream(x.device).cuda_stream  # the capture stream in a capture
    _module().conv3x3_direct(out, x, w, bias, se_sum if se_sum is not None else bias, rows,
                             cols, relu, se_sum is not None, pipelined, skip_mma, max_blocks,
                             stream)


def conv3x3_pair(out: Tensor, x: Tensor, w1: Tensor, bias1: Tensor, w2: Tensor, bias2: Tensor,
                 se_sum: Tensor | None, tile: tuple[int, int], relu: bool,
                 pipelined: bool = False, skip_mma: bool = False, max_blocks: int = 0) -> None:
    """A residual block's two convolutions in one kernel, on the current CUDA stream:
    ``mid = relu(conv3x3(x, w1) + bias1)`` (FP16, kept in shared memory, never written), then
    ``out = relu?(conv3x3(mid, w2) + bias2)`` and ``se_sum += sum_hw(conv3x3(mid, w2) + bias2)``
    if given. Channels: one of :data:`PAIRS`, the same in ``x``, mid and ``out``; weights,
    biases, ``tile``, ``pipelined``, ``skip_mma`` and ``max_blocks`` as for
    :func:`conv3x3_direct` (the tile is one of ``PAIRS[channels]``)."""
    rows, cols = tile
    stream = torch.cuda.current_stream(x.device).cuda_stream
    _module().conv3x3_pair(out, x, w1, bias1, w2, bias2,
                           se_sum if se_sum is not None else bias2, rows, cols, relu,
                           se_sum is not None, pipelined, skip_mma, max_blocks, stream)

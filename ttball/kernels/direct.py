"""A direct 3×3 convolution in CUDA C++ for the 16- and 32-channel steps (issue 9, eighth step).

Why not Triton: an implicit GEMM reads each input pixel once per tap (nine times) from L2,
which Nsight Compute found 70-85 % busy on these steps; Triton's block language cannot slice
a tile held on chip at an offset, so its row-walking variant still staged every tap's operand
through shared memory (``docs/benchmarks/triton-h200.md``, fourth and fifth steps). Here a
block copies its output tile's halo, ``(TH + 2) × (TW + 2)`` pixels × Cin, from global
memory into shared memory **once**, and each warp forms the nine taps' operands by loading
16 × 16 tensor-core fragments (``nvcuda::wmma``) from that halo at a pixel offset: in NHWC,
16 consecutive pixels × 16 channels are one row-major 16 × 16 matrix, and a tap's shift is a
pointer offset. The weights stay in shared memory (or, for 16 → 16, in registers).

Applies to a conv step with one 3×3 stride-1 term of an NHWC FP16 buffer with 16 or 32 channels,
16 or 32 output channels, and no addend: conv1 (ReLU) and conv2 (SE sums) of HRNet's
BasicBlocks at full and half resolution, and layer1's 32 → 32; and to transition1's 128 → 16
(26 of the plan's 67 steps; 49 % of the steps' time at batch 64). Epilogue as the Triton kernel's: bias, SE sums of the
pre-activation by atomics, ReLU, FP16 store.

Two schedules, both offered to the tuner (``Config.num_stages`` 1 or 2): one block per tile,
or a persistent grid whose blocks load their weights once and copy the next tile's halo
with ``cp.async`` into a second buffer while they compute the current tile.

Measured on an H200 (``docs/benchmarks/triton-h200.md``, "Eighth step, measured"): correct
and verified. The pipelined schedule ties with the Triton kernel on 16 → 16 and is 2× slower
on 32 and 128 input channels, where the wmma fragment loads and MMAs take two thirds of the
time. The network gains 1.4 % at batch 64.

Built at first use with ``torch.utils.cpp_extension.load_inline`` (needs ``nvcc`` and a C++
compiler; about a minute, then cached by PyTorch). :data:`KERNEL_SOURCE` is plain CUDA (no
PyTorch headers), so ``tests/kernels/test_direct.py`` compiles it for sm_90 wherever an
``nvcc`` is found.
"""

from __future__ import annotations

import hashlib
import shutil
from typing import Any

import torch
from torch import Tensor

from ttball.kernels.plan import INPUT, Conv

_SMALL = ((8, 32), (4, 32), (16, 16), (8, 16))  # (TH rows, TW columns) per block
# (Cin, Cout) → the tiles compiled for it. 128 → 16 (transition1, the stem's slowest step)
# gets tiles of 8 pixel segments: its halo takes 46-52 KB of shared memory, its weights 37 KB.
KERNELS: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {
    (16, 16): _SMALL, (32, 32): _SMALL, (16, 32): _SMALL, (32, 16): _SMALL,
    (128, 16): ((8, 16), (4, 32)),
}

KERNEL_SOURCE = r"""
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>

using namespace nvcuda;

namespace ttball_direct {

constexpr int kWarps = 8;

template <int CIN, int COUT, int TH, int TW>
struct Shape {
  static constexpr int HALO_W = TW + 2;
  static constexpr int HALO = (TH + 2) * HALO_W;      // halo pixels
  static constexpr int SEGS = TW / 16;                // 16-pixel segments per row
  static constexpr int TASKS = TH * SEGS;             // one task: 16 pixels x COUT
  static constexpr int KC = CIN / 16, NC = COUT / 16;
  // Halfs per halo pixel. Wider inputs get 16 halfs of padding: with rows 2 * CIN bytes apart
  // the 8 rows a fragment load reads at once fall on the same shared-memory banks (8-way for
  // 128 channels, 4-way for 32); 32 bytes more make it 2-way, as for 16 channels, and keep each
  // fragment's rows 32-byte aligned.
  static constexpr int HALO_LD = CIN == 16 ? 16 : CIN + 16;
  static constexpr int HALO_BYTES = HALO * HALO_LD * 2;  // a multiple of 32
  static constexpr int W_BYTES = 9 * CIN * COUT * 2;
  static constexpr int STAGE_BYTES = kWarps * 16 * COUT * 4;
  static constexpr int SUM_BYTES = (COUT * 4 + 127) / 128 * 128;  // keeps the halos aligned
  // weights, the warps' epilogue stages, the SE sums, then one halo (a block per tile) or two
  // (pipelined)
  static constexpr int SMEM1 = W_BYTES + STAGE_BYTES + SUM_BYTES + HALO_BYTES;
  static constexpr int SMEM2 = SMEM1 + HALO_BYTES;
};

// Copies tile t's halo into `halo` with cp.async (16-byte vectors; src-size 0 writes the zeros
// of the convolution's padding outside the image). Completes with the caller's wait_group.
template <int CIN, int COUT, int TH, int TW>
__device__ __forceinline__ void issue_halo(half* halo, const half* __restrict__ x, int t,
                                           int tiles_w, int tiles_img, int H, int W) {
  using S = Shape<CIN, COUT, TH, TW>;
  const int b = t / tiles_img, rem = t % tiles_img;
  const int h0 = (rem / tiles_w) * TH, w0 = (rem % tiles_w) * TW;
  const half* xb = x + (size_t)b * H * W * CIN;
  constexpr int VEC = CIN / 8;
  for (int i = threadIdx.x; i < S::HALO * VEC; i += blockDim.x) {
    const int p = i / VEC, v = i % VEC;
    const int hh = h0 - 1 + p / S::HALO_W, ww = w0 - 1 + p % S::HALO_W;
    const bool inside = hh >= 0 && hh < H && ww >= 0 && ww < W;
    const half* src = inside ? xb + ((size_t)hh * W + ww) * CIN + v * 8 : x;
    const unsigned dst = (unsigned)__cvta_generic_to_shared(halo + p * S::HALO_LD + v * 8);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(inside ? 16 : 0));
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

// out (B, H, W, COUT) = conv3x3(x (B, H, W, CIN), w) + bias, then optional SE sums of that
// (se_sum (B, COUT) float32, atomics) and ReLU. w: (9 * CIN, COUT) FP16, row tap * CIN + c.
// Tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... (batch-major): with a grid of one block per
// tile each block takes one; with a persistent grid (`pipelined`) each block loads its weights
// once and prefetches the next tile's halo into the second buffer while it computes this one.
// skip_mma (timing only): no tensor-core work, the rest as usual.
template <int CIN, int COUT, int TH, int TW>
__global__ void __launch_bounds__(kWarps * 32)
conv3x3_direct_kernel(half* __restrict__ out, const half* __restrict__ x,
                      const half* __restrict__ w, const float* __restrict__ bias,
                      float* __restrict__ se_sum, int B, int H, int W, int relu, int has_sum,
                      int pipelined, int skip_mma) {
  using S = Shape<CIN, COUT, TH, TW>;
  extern __shared__ __align__(128) unsigned char smem[];
  half* wsm = reinterpret_cast<half*>(smem);
  float* stage_all = reinterpret_cast<float*>(smem + S::W_BYTES);
  float* sums = stage_all + kWarps * 16 * COUT;
  half* halos = reinterpret_cast<half*>(smem + S::W_BYTES + S::STAGE_BYTES + S::SUM_BYTES);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tiles_w = (W + TW - 1) / TW, tiles_img = tiles_w * ((H + TH - 1) / TH);
  const int ntiles = tiles_img * B;
  int t = blockIdx.x;
  issue_halo<CIN, COUT, TH, TW>(halos, x, t, tiles_w, tiles_img, H, W);
  for (int i = tid; i < S::W_BYTES / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(wsm)[i] = reinterpret_cast<const uint4*>(w)[i];
  if (has_sum)
    for (int i = tid; i < COUT; i += blockDim.x) sums[i] = 0.f;
  __syncthreads();

  // Each lane of the epilogue always handles the same two channels (32 is a multiple of
  // COUT / 2), so its bias and SE partial sums stay in registers.
  const int c0 = (lane % (COUT / 2)) * 2;
  const float bias0 = bias[c0], bias1 = bias[c0 + 1];
  float s0 = 0.f, s1 = 0.f;
  float* stage = stage_all + warp * 16 * COUT;

  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> wreg[9];
  constexpr bool W_IN_REGISTERS = S::KC * S::NC == 1;
  if constexpr (W_IN_REGISTERS) {
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) wmma::load_matrix_sync(wreg[tap], wsm + tap * 16 * 16, 16);
  }
  // Where the weights come from shared memory, a warp takes two tasks at once when the tile
  // has enough, so each weight fragment it loads serves two pixel segments.
  constexpr int PAIR = (!W_IN_REGISTERS && S::TASKS >= 2 * kWarps) ? 2 : 1;

  for (int it = 0; t < ntiles; ++it) {
    const int next = pipelined ? t + gridDim.x : ntiles;
    half* halo = halos + (it & 1) * S::HALO * S::HALO_LD;
    if (next < ntiles) {
      issue_halo<CIN, COUT, TH, TW>(halos + ((it + 1) & 1) * S::HALO * S::HALO_LD, x, next,
                                    tiles_w, tiles_img, H, W);
      asm volatile("cp.async.wait_group 1;\n" ::);  // this tile's halo, not the next one's
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();  // every thread's copies of this halo are visible to all warps
    const int b = t / tiles_img, rem = t % tiles_img;
    const int h0 = (rem / tiles_w) * TH, w0 = (rem % tiles_w) * TW;

    for (int first = warp * PAIR; first < S::TASKS; first += kWarps * PAIR) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[PAIR][S::NC];
#pragma unroll
      for (int p = 0; p < PAIR; ++p)
#pragma unroll
        for (int n = 0; n < S::NC; ++n) wmma::fill_fragment(acc[p][n], 0.f);
      if (!skip_mma) {
#pragma unroll
        for (int tap = 0; tap < 9; ++tap) {
          const int dh = tap / 3, dw = tap % 3;
#pragma unroll
          for (int k = 0; k < S::KC; ++k) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[PAIR];
#pragma unroll
            for (int p = 0; p < PAIR; ++p) {
              const int r = (first + p) / S::SEGS, seg = (first + p) % S::SEGS;
              // pixel j of the segment reads halo pixel (r + dh, seg * 16 + j + dw): rows
              // HALO_LD halfs apart
              wmma::load_matrix_sync(a[p], halo + ((r + dh) * S::HALO_W + seg * 16 + dw)
                                                      * S::HALO_LD + k * 16, S::HALO_LD);
            }
            if constexpr (W_IN_REGISTERS) {
              wmma::mma_sync(acc[0][0], a[0], wreg[tap], acc[0][0]);
            } else {
#pragma unroll
              for (int n = 0; n < S::NC; ++n) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> bf;
                wmma::load_matrix_sync(bf, wsm + (tap * CIN + k * 16) * COUT + n * 16, COUT);
#pragma unroll
                for (int p = 0; p < PAIR; ++p) wmma::mma_sync(acc[p][n], a[p], bf, acc[p][n]);
              }
            }
          }
        }
      }
#pragma unroll
      for (int p = 0; p < PAIR; ++p) {
        const int r = (first + p) / S::SEGS, seg = (first + p) % S::SEGS;
#pragma unroll
        for (int n = 0; n < S::NC; ++n)
          wmma::store_matrix_sync(stage + n * 16, acc[p][n], COUT, wmma::mem_row_major);
        __syncwarp();
        const int ho = h0 + r;
        for (int e = lane; e < 16 * COUT / 2; e += 32) {
          const int j = e / (COUT / 2);
          const int wo = w0 + seg * 16 + j;
          const float2 pair = *reinterpret_cast<const float2*>(stage + j * COUT + c0);
          float v0 = pair.x + bias0, v1 = pair.y + bias1;
          if (ho < H && wo < W) {
            s0 += v0;
            s1 += v1;
            if (relu) {
              v0 = fmaxf(v0, 0.f);
              v1 = fmaxf(v1, 0.f);
            }
            half* dst = out + (((size_t)b * H + ho) * W + wo) * COUT + c0;
            *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(v0, v1);
          }
        }
        __syncwarp();
      }
    }
    // The SE sums of one image: out to global memory when the next tile is another image's.
    if (has_sum && (next >= ntiles || next / tiles_img != b)) {
      atomicAdd(&sums[c0], s0);
      atomicAdd(&sums[c0 + 1], s1);
      s0 = s1 = 0.f;
      __syncthreads();
      for (int i = tid; i < COUT; i += blockDim.x) {
        atomicAdd(&se_sum[(size_t)b * COUT + i], sums[i]);
        sums[i] = 0.f;
      }
    }
    __syncthreads();  // this halo buffer is refilled two tiles on; the sums are zeroed
    t = next;
  }
}

template <int CIN, int COUT, int TH, int TW>
cudaError_t launch(half* out, const half* x, const half* w, const float* bias, float* se_sum,
                   int B, int H, int W, int relu, int has_sum, int pipelined, int skip_mma,
                   int max_blocks, cudaStream_t stream) {
  using S = Shape<CIN, COUT, TH, TW>;
  auto kernel = conv3x3_direct_kernel<CIN, COUT, TH, TW>;
  const int smem = pipelined ? S::SMEM2 : S::SMEM1;
  // once per device, on the first (uncaptured) call: the shared-memory limit and how many
  // blocks of the pipelined kernel fit on the device at once (its persistent grid)
  static int resident[64] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device >= 64) return cudaErrorInvalidDevice;
  if (!resident[device]) {
    if (S::SMEM2 > 48 * 1024) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM2);
      if (err != cudaSuccess) return err;
    }
    int per_sm = 0, sms = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, S::SMEM2);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    resident[device] = per_sm * sms > 0 ? per_sm * sms : 1;
  }
  const int ntiles = ((W + TW - 1) / TW) * ((H + TH - 1) / TH) * B;
  int blocks = ntiles;
  if (pipelined) {
    blocks = resident[device] < blocks ? resident[device] : blocks;
    blocks = max_blocks > 0 && max_blocks < blocks ? max_blocks : blocks;
  }
  kernel<<<blocks, kWarps * 32, smem, stream>>>(out, x, w, bias, se_sum, B, H, W, relu, has_sum,
                                               pipelined, skip_mma);
  return cudaGetLastError();
}

}  // namespace ttball_direct

#define TTBALL_TILE(CIN, COUT, TH, TW)                                                     \
  if (cin == CIN && cout == COUT && th == TH && tw == TW)                                   \
    return (int)ttball_direct::launch<CIN, COUT, TH, TW>(                                   \
        (half*)out, (const half*)x, (const half*)w, bias, se_sum, B, H, W, relu, has_sum,   \
        pipelined, skip_mma, max_blocks, stream);
#define TTBALL_TILES(CIN, COUT)                                                            \
  TTBALL_TILE(CIN, COUT, 8, 32) TTBALL_TILE(CIN, COUT, 4, 32)                               \
  TTBALL_TILE(CIN, COUT, 16, 16) TTBALL_TILE(CIN, COUT, 8, 16)

// 0 on success, a cudaError_t otherwise, -1 for a shape or tile not compiled in.
extern "C" int ttball_conv3x3_direct(void* out, const void* x, const void* w, const float* bias,
                                     float* se_sum, int B, int H, int W, int cin, int cout,
                                     int th, int tw, int relu, int has_sum,
                                     int pipelined, int skip_mma, int max_blocks,
                                     cudaStream_t stream) {
  TTBALL_TILES(16, 16) TTBALL_TILES(32, 32) TTBALL_TILES(16, 32) TTBALL_TILES(32, 16)
  TTBALL_TILE(128, 16, 8, 16) TTBALL_TILE(128, 16, 4, 32)
  return -1;
}
"""

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
"""

_DECLARATION = ("void conv3x3_direct(torch::Tensor out, torch::Tensor x, torch::Tensor w, "
                "torch::Tensor bias, torch::Tensor se_sum, int64_t th, int64_t tw, bool relu, "
                "bool has_sum, bool pipelined, bool skip_mma, int64_t max_blocks, "
                "int64_t stream);")


def direct_applies(step: Conv) -> bool:
    """Whether :func:`conv3x3_direct` can run ``step`` (see the module's docstring)."""
    if len(step.terms) != 1 or step.addends:
        return False
    t = step.terms[0]
    return (t.ksize == 3 and t.stride == 1 and t.up == 0 and t.src != INPUT
            and (t.cin, step.cout) in KERNELS)


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
                cuda_sources=KERNEL_SOURCE + _WRAPPER_SOURCE, functions=["conv3x3_direct"],
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

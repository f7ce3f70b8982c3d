
#include <cuda.h>  // CUtensorMap (the wgmma kernel's TMA halo; the driver is reached at run time)
#include <cuda_fp16.h>
#include <stdint.h>

namespace ttball_direct {

// Which of a row's CH 16-byte chunks chunk c is stored at: c ^ swizzle<CH>(row). Any 8
// consecutive rows' copies of one chunk then fall on 8 different 16-byte bank groups, so an
// ldmatrix of 8 such rows is one shared-memory wavefront (rows 32, 64 or 256 bytes apart,
// unswizzled, would be 2-, 4- or 8-way conflicts).
template <int CH>
__device__ __forceinline__ int swizzle(int row) {
  if constexpr (CH >= 8) return row & 7;
  else if constexpr (CH == 4) return (row >> 1) & 3;
  else if constexpr (CH == 2) return (row >> 2) & 1;
  else return 0;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// Four 8 x 8 FP16 matrices from shared memory; lane l gives the address of row l % 8 of
// matrix l / 8, and gets element (l / 4, 2 * (l % 4) + {0, 1}) of each (.trans: transposed).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// d (16 x 8, float32) += a (16 x 16, row-major) * b (16 x 8, column-major), one warp.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The row (0-15) and 8-column half of a 16 x 16 operand whose address lane gives to
// ldmatrix.x4 (its matrices: rows 0-7, then 8-15 of columns 0-7, then the same of 8-15).
__device__ __forceinline__ int operand_row(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int operand_half(int lane) { return lane >> 4; }

// Calls f(p, row, col, v) for this thread's share of a halo of ROWS x HALO_W pixels of CH
// 16-byte chunks: chunks i = tid, tid + T, ... of the pixel-major order, i.e. chunk v = tid % CH
// (T, the block's threads, is a multiple of CH) of pixels p = tid / CH, + T / CH, ..., at
// row p / HALO_W and column p % HALO_W. The row and column advance by constants, so a chunk
// costs no division. (The flat loop it replaced divided i by CH and p by HALO_W, in signed
// arithmetic, for every chunk: Nsight Compute counted about 48 instructions a chunk, a third
// of the wgmma kernel's instructions and of its stall samples, sixteenth session.)
// (Host and device: tests/kernels/test_direct.py checks the walk on the host.)
template <int ROWS, int HALO_W, int CH, int T, typename F>
__host__ __device__ __forceinline__ void halo_chunks(int tid, F&& f) {
  static_assert(T % CH == 0, "every thread copies one chunk position of each pixel it takes");
  constexpr int STEP = T / CH, DR = STEP / HALO_W, DC = STEP % HALO_W;
  const int v = tid % CH;
  int p = tid / CH, row = p / HALO_W, col = p % HALO_W;
#pragma unroll 1
  for (; p < ROWS * HALO_W; p += STEP) {
    f(p, row, col, v);
    row += DR;
    col += DC;
    if (col >= HALO_W) {
      col -= HALO_W;
      ++row;
    }
  }
}

// The source of a 16-byte halo chunk at image row hh, column ww (either may be outside):
// xv, the image's first pixel plus the chunk's byte offset in a pixel (byte offsets within
// the image in 32 bits: an image of the network is < 2 GB); outside the image xz, any valid
// address, to be copied with src-size 0. `inside` says which.
template <int CIN>
__device__ __forceinline__ const void* chunk_source(const char* xv, const char* xz, int hh,
                                                    int ww, int H, int W, bool& inside) {
  inside = (unsigned)hh < (unsigned)H && (unsigned)ww < (unsigned)W;
  return inside ? xv + (unsigned)(hh * W + ww) * (unsigned)(CIN * 2) : xz;
}

// 16-byte cp.async from src of `bytes` bytes (0: 16 zeros) to shared-memory address dst.
__device__ __forceinline__ void copy_chunk(unsigned dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src),
               "r"(bytes));
}

// The same through L1 (cp.async.ca), for the wgmma kernels' channel-group-major halos: with
// .cg each 16-byte chunk there went to L2 as a request of its own for a whole 32-byte sector,
// so every sector was read twice (one request a sector, Nsight Compute, seventeenth session);
// through L1 the chunk beside it is a hit. L2 sectors read halved, requests 6-8x fewer, the
// kernels 7-12 % faster alone at batch 64.
__device__ __forceinline__ void copy_chunk_l1(unsigned dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src),
               "r"(bytes));
}

// Copies the (TH + 2 PAD) x (TW + 2 PAD) pixels around tile t (rows and columns from -PAD)
// into `halo` with cp.async: 16-byte chunks, swizzled per pixel; src-size 0 writes the zeros
// of the convolution's padding outside the image. Completes with the caller's wait_group.
// T > 0: the block's threads, walked by halo_chunks; T == 0: the flat loop over blockDim.x,
// kept for the 16/32-channel direct kernels, for which halo_chunks raised ptxas's register
// count for 32 -> 32 from 127 to 158 (one 8-warp block an SM instead of two).
template <int CIN, int TH, int TW, int PAD, int T>
__device__ __forceinline__ void issue_halo_pad(half* halo, const half* __restrict__ x, int t,
                                               int tiles_w, int tiles_img, int H, int W) {
  constexpr int HALO_W = TW + 2 * PAD, HALO = (TH + 2 * PAD) * HALO_W, CH = CIN / 8;
  const int b = t / tiles_img, rem = t % tiles_img;
  const int h0 = (rem / tiles_w) * TH - PAD, w0 = (rem % tiles_w) * TW - PAD;
  const half* xb = x + (size_t)b * H * W * CIN;
  if constexpr (T > 0) {
    const char* xv = reinterpret_cast<const char*>(xb) + threadIdx.x % CH * 16;
    const char* xz = reinterpret_cast<const char*>(x);
    auto chunk = [&](int p, int row, int col, int v) {
      bool inside;
      const void* src = chunk_source<CIN>(xv, xz, h0 + row, w0 + col, H, W, inside);
      copy_chunk(smem_addr(halo + p * CIN + (v ^ swizzle<CH>(p)) * 8), src, inside ? 16 : 0);
    };
    halo_chunks<TH + 2 * PAD, HALO_W, CH, T>(threadIdx.x, chunk);
  } else {
    auto chunk = [&](int p, int row, int col, int v) {
      const int hh = h0 + row, ww = w0 + col;
      const bool inside = hh >= 0 && hh < H && ww >= 0 && ww < W;
      const half* src = inside ? xb + ((size_t)hh * W + ww) * CIN + v * 8 : x;
      copy_chunk(smem_addr(halo + p * CIN + (v ^ swizzle<CH>(p)) * 8), src, inside ? 16 : 0);
    };
    for (int i = threadIdx.x; i < HALO * CH; i += blockDim.x) {
      const int p = i / CH;
      chunk(p, p / HALO_W, p % HALO_W, i % CH);
    }
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

// mbarrier and TMA (cp.async.bulk.tensor) for the TMA halos (sm_90a only)
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(count));
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// this thread's arrival, and `bytes` more for the barrier's phase to wait for
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}
// until the barrier's phase of this parity has completed
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nLAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@p bra.uni DONE;\nbra.uni LAB_WAIT;\nDONE:\n}\n"
      :: "r"(smem_addr(bar)), "r"(parity) : "memory");
#endif
}
// the box of `map` at coordinates (c0 innermost) into shared memory at dst, completing on bar
__device__ __forceinline__ void tma_load_4d(unsigned dst, const CUtensorMap* map, uint64_t* bar,
                                            int c0, int c1, int c2, int c3) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4, %5}], [%6];\n"
      :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
         "r"(smem_addr(bar)) : "memory");
#endif
}

// The network's input tile instead (the stem's first convolution): x is the FP32 NCHW batch
// with SRC_C <= CIN channels; each thread reads one halo pixel's SRC_C values (a warp's reads
// of one channel are consecutive columns), converts them to FP16, pads the channels to CIN
// with zeros and stores the pixel's chunks swizzled as issue_halo_pad does. Plain loads (no
// cp.async: it cannot convert), so the caller syncs before the halo is read.
template <int CIN, int TH, int TW, int SRC_C>
__device__ __forceinline__ void load_halo_nchw(half* halo, const float* __restrict__ x, int t,
                                               int tiles_w, int tiles_img, int H, int W) {
  constexpr int HALO_W = TW + 2, HALO = (TH + 2) * HALO_W, CH = CIN / 8;
  static_assert(SRC_C <= CIN, "channels padded up to CIN");
  const int b = t / tiles_img, rem = t % tiles_img;
  const int h0 = (rem / tiles_w) * TH, w0 = (rem % tiles_w) * TW;
  const size_t plane = (size_t)H * W;
  const float* xb = x + (size_t)b * SRC_C * plane;
  for (int p = threadIdx.x; p < HALO; p += blockDim.x) {
    const int hh = h0 - 1 + p / HALO_W, ww = w0 - 1 + p % HALO_W;
    const bool inside = hh >= 0 && hh < H && ww >= 0 && ww < W;
    const float* src = xb + (size_t)hh * W + ww;
    __align__(16) half v[CIN];
#pragma unroll
    for (int c = 0; c < CIN; ++c)
      v[c] = __float2half_rn(c < SRC_C && inside ? __ldg(src + c * plane) : 0.f);
#pragma unroll
    for (int k = 0; k < CH; ++k)
      *reinterpret_cast<uint4*>(halo + p * CIN + (k ^ swizzle<CH>(p)) * 8) =
          reinterpret_cast<const uint4*>(v)[k];
  }
}

// The input's halo by TMA instead (forty-fourth session; built without a GPU, not measured):
// one thread copies the tile's SRC_C planes of (TH + 2) rows x BOXW FP32 columns, the tensor
// map's zero fill outside the image being the padding, into a staging buffer, the next tile's
// while this one computes; then every thread converts its halo pixels from shared memory as
// load_halo_nchw does from global memory. Nsight Compute had the input kernel stalled on those
// plain global loads (fourteenth session: 6.1 of 13.8 cycles an instruction at batch 1); the
// same staging by 4-byte cp.async cost more instructions than it hid (fifteenth session). Here
// the copy is one instruction a tile.
// The box starts LEAD = 4 columns left of the tile, not 1: TMA faults ("illegal instruction",
// forty-fourth session's GPU test) unless the box's first element is 16-byte aligned in global
// memory, as a tile's first column is; the halo's first column is the box's column 3.
template <int TH, int TW, int SRC_C>
struct InputStage {
  static constexpr int LEAD = 4;                      // box columns before the tile's first
  static constexpr int BOXW = (LEAD + TW + 1 + 3) / 4 * 4;  // through the halo's last column,
                                                      // in 16-byte multiples
  static constexpr int PLANE = (TH + 2) * BOXW;       // floats of one channel
  static constexpr int BYTES = SRC_C * PLANE * 4;     // what the barrier expects a tile
  static constexpr int STRIDE = (BYTES + 127) / 128 * 128;  // the two stages 128-byte aligned
  static_assert(TW % 4 == 0, "a tile's first column 16-byte aligned");
};

// Tile t's input box into `stage`, completing on `bar` (one thread calls it)
template <int TH, int TW, int SRC_C>
__device__ __forceinline__ void issue_input_tma(float* stage, const CUtensorMap* map,
                                                uint64_t* bar, int t, int tiles_w,
                                                int tiles_img) {
  using St = InputStage<TH, TW, SRC_C>;
  const int b = t / tiles_img, rem = t % tiles_img;
  mbar_expect_tx(bar, St::BYTES);
  tma_load_4d(smem_addr(stage), map, bar, (rem % tiles_w) * TW - St::LEAD,
              (rem / tiles_w) * TH - 1, 0, b);
}

// The staged box as the FP16 halo: pixel p's SRC_C values converted, padded to CIN with
// zeros and stored swizzled (load_halo_nchw's layout and rounding)
template <int CIN, int TH, int TW, int SRC_C>
__device__ __forceinline__ void convert_input_stage(half* halo, const float* stage) {
  using St = InputStage<TH, TW, SRC_C>;
  constexpr int HALO_W = TW + 2, HALO = (TH + 2) * HALO_W, CH = CIN / 8;
  for (int p = threadIdx.x; p < HALO; p += blockDim.x) {
    const float* src = stage + (p / HALO_W) * St::BOXW + St::LEAD - 1 + p % HALO_W;
    __align__(16) half v[CIN];
#pragma unroll
    for (int c = 0; c < CIN; ++c) v[c] = __float2half_rn(c < SRC_C ? src[c * St::PLANE] : 0.f);
#pragma unroll
    for (int k = 0; k < CH; ++k)
      *reinterpret_cast<uint4*>(halo + p * CIN + (k ^ swizzle<CH>(p)) * 8) =
          reinterpret_cast<const uint4*>(v)[k];
  }
}

// Copies w ((9 * CIN, COUT) FP16, row tap * CIN + c) into shared memory, rows swizzled.
template <int CIN, int COUT>
__device__ __forceinline__ void load_weights(half* wsm, const half* __restrict__ w) {
  constexpr int WCH = COUT / 8;
  for (int i = threadIdx.x; i < 9 * CIN * WCH; i += blockDim.x) {
    const int r = i / WCH, v = i % WCH;
    *reinterpret_cast<uint4*>(wsm + r * COUT + (v ^ swizzle<WCH>(r)) * 8) =
        reinterpret_cast<const uint4*>(w)[i];
  }
}

// acc[p] += the 3 x 3 convolution of two 16-pixel segments (one warp, mma.sync m16n8k16):
// pixel j of segment p reads src pixels base[p] + j + dh * SRC_W + dw for tap (dh, dw), so
// each tap's operand is one ldmatrix of 16 consecutive source pixels x 16 channels. Weights
// from shared memory (swizzled rows).
template <int CIN, int COUT, int SRC_W>
__device__ __forceinline__ void conv_segments(float (&acc)[2][COUT / 8][4], const half* src,
                                              const int (&base)[2], const half* wsm, int lane) {
  constexpr int KC = CIN / 16, NB = COUT / 8, CH = CIN / 8, WCH = COUT / 8;
  const int lrow = operand_row(lane), lhalf = operand_half(lane);
#pragma unroll
  for (int tap = 0; tap < 9; ++tap) {
    const int dh = tap / 3, dw = tap % 3;
#pragma unroll
    for (int k = 0; k < KC; ++k) {
      uint32_t a[2][4];
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int sp = base[p] + dh * SRC_W + dw + lrow;
        ldsm_x4(a[p], src + sp * CIN + ((2 * k + lhalf) ^ swizzle<CH>(sp)) * 8);
      }
#pragma unroll
      for (int n2 = 0; n2 < NB / 2; ++n2) {
        uint32_t bf[4];
        const int r = tap * CIN + k * 16 + lrow;
        ldsm_x4_trans(bf, wsm + r * COUT + ((2 * n2 + lhalf) ^ swizzle<WCH>(r)) * 8);
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          mma(acc[p][2 * n2], a[p], bf[0], bf[1]);
          mma(acc[p][2 * n2 + 1], a[p], bf[2], bf[3]);
        }
      }
    }
  }
}

template <int NB>
__device__ __forceinline__ void zero(float (&acc)[2][NB][4]) {
#pragma unroll
  for (int p = 0; p < 2; ++p)
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[p][n][e] = 0.f;
}

// The epilogue of one segment's accumulators (one warp): pixels g and g + 8 of the segment
// (output row ho, columns wo0 + ...), channels n * 8 + 2q and + 1 of each 8-wide block n:
// + bias, SE partial sums (registers), optional ReLU, FP16 store.
template <int COUT>
__device__ __forceinline__ void store_segment(half* __restrict__ out, const float (&acc)[COUT / 8][4],
                                              const float (&bias_r)[COUT / 8][2],
                                              float (&ssum)[COUT / 8][2], int b, int ho,
                                              int wo0, int H, int W, int relu, int lane) {
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int half8 = 0; half8 < 2; ++half8) {
    const int wo = wo0 + g + 8 * half8;
    if (ho < H && wo < W) {
      half* dst = out + (((size_t)b * H + ho) * W + wo) * COUT + 2 * q;
#pragma unroll
      for (int n = 0; n < COUT / 8; ++n) {
        float v0 = acc[n][2 * half8] + bias_r[n][0], v1 = acc[n][2 * half8 + 1] + bias_r[n][1];
        ssum[n][0] += v0;
        ssum[n][1] += v1;
        if (relu) {
          v0 = fmaxf(v0, 0.f);
          v1 = fmaxf(v1, 0.f);
        }
        *reinterpret_cast<__half2*>(dst + n * 8) = __floats2half2_rn(v0, v1);
      }
    }
  }
}

// The SE sums of one image: the lanes' partial sums over the warp's pixel rows (lanes with the
// same q), into shared memory; then the block's, by atomics, into se_sum[b]. Every thread of
// the block calls it.
template <int COUT>
__device__ __forceinline__ void flush_sums(float (&ssum)[COUT / 8][2], float* sums,
                                           float* __restrict__ se_sum, int b, int lane) {
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int n = 0; n < COUT / 8; ++n)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float v = ssum[n][j];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (g == 0) atomicAdd(&sums[n * 8 + 2 * q + j], v);
      ssum[n][j] = 0.f;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < COUT; i += blockDim.x) {
    atomicAdd(&se_sum[(size_t)b * COUT + i], sums[i]);
    sums[i] = 0.f;
  }
}

template <int COUT>
__device__ __forceinline__ void load_bias(float (&bias_r)[COUT / 8][2], float (&ssum)[COUT / 8][2],
                                          const float* __restrict__ bias, int lane) {
  const int q = lane % 4;
#pragma unroll
  for (int n = 0; n < COUT / 8; ++n) {
    bias_r[n][0] = bias[n * 8 + 2 * q];
    bias_r[n][1] = bias[n * 8 + 2 * q + 1];
    ssum[n][0] = ssum[n][1] = 0.f;
  }
}

// Waits for tile `it`'s halo after issuing the next tile's (if any) into the other buffer.
template <int CIN, int TH, int TW, int PAD, int T>
__device__ __forceinline__ void next_halo(half* other, const half* __restrict__ x, int next,
                                          int ntiles, int tiles_w, int tiles_img, int H, int W) {
  if (next < ntiles) {
    issue_halo_pad<CIN, TH, TW, PAD, T>(other, x, next, tiles_w, tiles_img, H, W);
    asm volatile("cp.async.wait_group 1;\n" ::);  // this tile's halo, not the next one's
  } else {
    asm volatile("cp.async.wait_group 0;\n" ::);
  }
  __syncthreads();  // every thread's copies of this halo are visible to all warps
}

template <int CIN, int COUT, int TH, int TW>
struct Shape {
  static constexpr int HALO_W = TW + 2;
  static constexpr int HALO = (TH + 2) * HALO_W;      // halo pixels
  static constexpr int SEGS = TW / 16;                // 16-pixel segments per row
  static constexpr int TASKS = TH * SEGS;             // one task: 16 pixels x COUT
  // two segments per warp, so that each weight fragment a warp loads serves both
  static constexpr int WARPS = TASKS / 2 < 8 ? TASKS / 2 : 8;
  static constexpr int P = TASKS / WARPS;
  static constexpr int KC = CIN / 16;                 // k steps of 16 channels per tap
  static constexpr int NB = COUT / 8;                 // n blocks of 8 output channels
  static constexpr int CH = CIN / 8, WCH = COUT / 8;  // 16-byte chunks: halo pixel, weight row
  // issue_halo_pad's T: halo_chunks for 128 -> 16 (its copy loop was 48 % of its instructions,
  // sixteenth session), the flat loop for the others (see there)
  static constexpr int COPY_T = CIN == 128 ? WARPS * 32 : 0;
  static constexpr int HALO_BYTES = HALO * CIN * 2;   // a multiple of 32
  static constexpr int W_BYTES = 9 * CIN * COUT * 2;  // a multiple of 128
  static constexpr int SUM_BYTES = (COUT * 4 + 127) / 128 * 128;  // keeps the halos aligned
  // weights, SE sums, then one halo (a block per tile) or two (pipelined)
  static constexpr int SMEM1 = W_BYTES + SUM_BYTES + HALO_BYTES;
  static constexpr int SMEM2 = SMEM1 + HALO_BYTES;
  static_assert(CIN % 16 == 0 && COUT % 16 == 0 && TW % 16 == 0, "16-wide fragments");
  static_assert(TASKS % WARPS == 0 && P <= 4, "tasks split evenly over the warps");
};

// The single convolution's tile loop and epilogue below are written out in full rather than
// with conv_segments and store_segment (which the pair kernel uses): built from them, it
// compiled to 30 fewer registers and measured 3-11 % slower per shape on an H200
// (docs/benchmarks/triton-h200.md, "Tenth step"). Its set-up, halo copies and SE sums use the
// shared helpers (the same instructions).
// out (B, H, W, COUT) = conv3x3(x (B, H, W, CIN), w) + bias, then optional SE sums of that
// (se_sum (B, COUT) float32, atomics) and ReLU. w: (9 * CIN, COUT) FP16, row tap * CIN + c.
// Tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... (batch-major): with a grid of one block per
// tile each block takes one; with a persistent grid (`pipelined`) each block loads its weights
// once and prefetches the next tile's halo into the second buffer while it computes this one.
// Each warp computes two 16-pixel segments x COUT with mma.sync m16n8k16: tap (dh, dw) of a
// segment is the 16 x 16 matrix of its 16 pixels x 16 channels, read from the halo at a pixel
// offset by one ldmatrix; the accumulators stay in registers through the epilogue.
// skip_mma (timing only): no fragment loads or MMAs, the rest as usual.
// SRC_C > 0: x is the network's FP32 NCHW input with SRC_C channels (load_halo_nchw, one
// halo buffer, loaded at the top of each tile; `pipelined` then only makes the grid
// persistent, so the weights are loaded once per block). The body is a device function so
// that the input's kernel can have launch bounds of its own: a second __launch_bounds__
// argument, even 1, changed the register allocation of the measured kernels (sm_90, CUDA 13).
// TMA_IN (with SRC_C > 0): the input's halo staged by TMA (issue_input_tma, two stages
// after the halo; `map` and the two barriers `bars` the kernel's).
template <int CIN, int COUT, int TH, int TW, int SRC_C, bool TMA_IN = false>
__device__ __forceinline__ void direct_conv(half* __restrict__ out, const half* __restrict__ x,
                                            const half* __restrict__ w,
                                            const float* __restrict__ bias,
                                            float* __restrict__ se_sum, int B, int H, int W,
                                            int relu, int has_sum, int pipelined, int skip_mma,
                                            const CUtensorMap* map = nullptr,
                                            uint64_t* bars = nullptr) {
  using S = Shape<CIN, COUT, TH, TW>;
  extern __shared__ __align__(128) unsigned char smem[];
  half* wsm = reinterpret_cast<half*>(smem);
  float* sums = reinterpret_cast<float*>(smem + S::W_BYTES);
  half* halos = reinterpret_cast<half*>(smem + S::W_BYTES + S::SUM_BYTES);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q = lane % 4;  // an accumulator's rows g, g + 8; columns 2q, 2q + 1
  // the row (0-15) and 8-column half of a 16 x 16 operand whose address this lane gives to
  // ldmatrix.x4 (matrices: rows 0-7 | 8-15 of columns 0-7, then of columns 8-15)
  const int lrow = operand_row(lane), lhalf = operand_half(lane);
  const int tiles_w = (W + TW - 1) / TW, tiles_img = tiles_w * ((H + TH - 1) / TH);
  const int ntiles = tiles_img * B;
  int t = blockIdx.x;
  static_assert(!TMA_IN || SRC_C > 0, "TMA staging is the input kernel's");
  using St = InputStage<TH, TW, (SRC_C > 0 ? SRC_C : 1)>;
  float* stages = reinterpret_cast<float*>(smem + S::SMEM1);  // (TMA_IN only)
  if constexpr (SRC_C == 0) {
    issue_halo_pad<CIN, TH, TW, 1, S::COPY_T>(halos, x, t, tiles_w, tiles_img, H, W);
  } else if constexpr (TMA_IN) {
    if (tid == 0) {  // the barriers' init is visible to all after the __syncthreads below
      mbar_init(&bars[0], 1);
      mbar_init(&bars[1], 1);
      issue_input_tma<TH, TW, SRC_C>(stages, map, &bars[0], t, tiles_w, tiles_img);
    }
  }
  load_weights<CIN, COUT>(wsm, w);
  if (has_sum)
    for (int i = tid; i < COUT; i += blockDim.x) sums[i] = 0.f;
  __syncthreads();

  // this lane's output channels: n * 8 + 2q and + 1 of each n block; their bias and SE
  // partial sums stay in registers
  float bias_r[S::NB][2], ssum[S::NB][2];
  load_bias<COUT>(bias_r, ssum, bias, lane);
  // 16 -> 16: the nine taps' weight fragments in registers (36 per lane)
  constexpr bool W_IN_REGISTERS = CIN == 16 && COUT == 16;
  uint32_t wreg[W_IN_REGISTERS ? 9 : 1][4];
  if constexpr (W_IN_REGISTERS) {
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      const int r = tap * 16 + lrow;
      ldsm_x4_trans(wreg[tap], wsm + r * COUT + (lhalf ^ swizzle<S::WCH>(r)) * 8);
    }
  }

  for (int it = 0; t < ntiles; ++it) {
    const int next = pipelined ? t + gridDim.x : ntiles;
    half* halo = halos + (SRC_C ? 0 : (it & 1) * S::HALO * CIN);
    if constexpr (SRC_C == 0) {
      next_halo<CIN, TH, TW, 1, S::COPY_T>(halos + ((it + 1) & 1) * S::HALO * CIN, x, next,
                                           ntiles, tiles_w, tiles_img, H, W);
    } else if constexpr (TMA_IN) {
      // the next tile's box into the other stage (its last reader, this block's conversion of
      // the tile before, finished before the barrier that ended that tile)
      if (tid == 0 && next < ntiles)
        issue_input_tma<TH, TW, SRC_C>(stages + ((it + 1) & 1) * (St::STRIDE / 4), map,
                                       &bars[(it + 1) & 1], next, tiles_w, tiles_img);
      mbar_wait(&bars[it & 1], (it >> 1) & 1);  // this stage's (it / 2)-th fill
      convert_input_stage<CIN, TH, TW, SRC_C>(halo, stages + (it & 1) * (St::STRIDE / 4));
      __syncthreads();
    } else {
      load_halo_nchw<CIN, TH, TW, SRC_C>(halo, reinterpret_cast<const float*>(x), t, tiles_w,
                                         tiles_img, H, W);
      __syncthreads();
    }
    const int b = t / tiles_img, rem = t % tiles_img;
    const int h0 = (rem / tiles_w) * TH, w0 = (rem % tiles_w) * TW;

    float acc[S::P][S::NB][4];
#pragma unroll
    for (int p = 0; p < S::P; ++p)
#pragma unroll
      for (int n = 0; n < S::NB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[p][n][e] = 0.f;
    if (!skip_mma) {
#pragma unroll
      for (int tap = 0; tap < 9; ++tap) {
        const int dh = tap / 3, dw = tap % 3;
#pragma unroll
        for (int k = 0; k < S::KC; ++k) {
          uint32_t a[S::P][4];
#pragma unroll
          for (int p = 0; p < S::P; ++p) {
            const int task = warp * S::P + p, r = task / S::SEGS, seg = task % S::SEGS;
            // row lrow of the operand: output pixel seg * 16 + lrow of row r, read at halo
            // pixel (r + dh, seg * 16 + lrow + dw)
            const int hp = (r + dh) * S::HALO_W + seg * 16 + lrow + dw;
            ldsm_x4(a[p], halo + hp * CIN + ((2 * k + lhalf) ^ swizzle<S::CH>(hp)) * 8);
          }
          if constexpr (W_IN_REGISTERS) {
#pragma unroll
            for (int p = 0; p < S::P; ++p) {
              mma(acc[p][0], a[p], wreg[tap][0], wreg[tap][1]);
              mma(acc[p][1], a[p], wreg[tap][2], wreg[tap][3]);
            }
          } else {
#pragma unroll
            for (int n2 = 0; n2 < S::NB / 2; ++n2) {
              uint32_t bf[4];
              const int r = tap * CIN + k * 16 + lrow;
              ldsm_x4_trans(bf, wsm + r * COUT + ((2 * n2 + lhalf) ^ swizzle<S::WCH>(r)) * 8);
#pragma unroll
              for (int p = 0; p < S::P; ++p) {
                mma(acc[p][2 * n2], a[p], bf[0], bf[1]);
                mma(acc[p][2 * n2 + 1], a[p], bf[2], bf[3]);
              }
            }
          }
        }
      }
    }
    // epilogue from the accumulators: pixels g and g + 8 of each segment, channels
    // n * 8 + 2q and + 1. STAGE_OUT: into this tile's halo buffer (free once every warp's MMAs
    // are done), 16-byte chunks swizzled per pixel so that each half2 store instruction is one
    // shared-memory wavefront; then the block writes the tile out in 16-byte chunks, rows of
    // TW * COUT * 2 contiguous bytes. Written directly instead, each store instruction covers
    // 8 pixels x 16 bytes, half of each 32-byte sector (Nsight Compute: 30 % of the 32 -> 32
    // kernel's global sectors excessive, L1 its busiest unit). Measured on an H200 (fifteenth
    // session): transition1's 128 -> 16 2 % faster, the 16- and 32-channel kernels 3-11 %
    // slower (the two barriers and a store phase that no MMA overlaps), so only 128 -> 16.
    constexpr bool STAGE_OUT = SRC_C == 0 && CIN >= 64 && TH * TW * COUT * 2 <= S::HALO_BYTES;
    half* staged = halo;
    if constexpr (STAGE_OUT) __syncthreads();
#pragma unroll
    for (int p = 0; p < S::P; ++p) {
      const int task = warp * S::P + p, r = task / S::SEGS, seg = task % S::SEGS;
      const int ho = h0 + r;
#pragma unroll
      for (int half8 = 0; half8 < 2; ++half8) {
        const int wo = w0 + seg * 16 + g + 8 * half8;
        const int pix = r * TW + seg * 16 + g + 8 * half8;
        if (ho < H && wo < W) {
          half* dst = out + (((size_t)b * H + ho) * W + wo) * COUT + 2 * q;
#pragma unroll
          for (int n = 0; n < S::NB; ++n) {
            float v0 = acc[p][n][2 * half8] + bias_r[n][0];
            float v1 = acc[p][n][2 * half8 + 1] + bias_r[n][1];
            ssum[n][0] += v0;
            ssum[n][1] += v1;
            if (relu) {
              v0 = fmaxf(v0, 0.f);
              v1 = fmaxf(v1, 0.f);
            }
            if constexpr (STAGE_OUT)
              *reinterpret_cast<__half2*>(staged + pix * COUT +
                                          (n ^ swizzle<S::WCH>(pix)) * 8 + 2 * q) =
                  __floats2half2_rn(v0, v1);
            else
              *reinterpret_cast<__half2*>(dst + n * 8) = __floats2half2_rn(v0, v1);
          }
        }
      }
    }
    if constexpr (STAGE_OUT) {
      __syncthreads();
      for (int i = tid; i < TH * TW * S::WCH; i += blockDim.x) {
        const int pix = i / S::WCH, c = i % S::WCH;
        const int ho = h0 + pix / TW, wo = w0 + pix % TW;
        if (ho < H && wo < W)
          *reinterpret_cast<uint4*>(out + (((size_t)b * H + ho) * W + wo) * COUT + c * 8) =
              *reinterpret_cast<const uint4*>(staged + pix * COUT +
                                              (c ^ swizzle<S::WCH>(pix)) * 8);
      }
    }
    // the SE sums of one image, out when the next tile is another image's
    if (has_sum && (next >= ntiles || next / tiles_img != b))
      flush_sums<COUT>(ssum, sums, se_sum, b, lane);
    __syncthreads();  // this halo buffer is refilled two tiles on; the sums are zeroed
    t = next;
  }
}

template <int CIN, int COUT, int TH, int TW>
__global__ void __launch_bounds__(Shape<CIN, COUT, TH, TW>::WARPS * 32)
conv3x3_direct_kernel(half* __restrict__ out, const half* __restrict__ x,
                      const half* __restrict__ w, const float* __restrict__ bias,
                      float* __restrict__ se_sum, int B, int H, int W, int relu, int has_sum,
                      int pipelined, int skip_mma) {
  direct_conv<CIN, COUT, TH, TW, 0>(out, x, w, bias, se_sum, B, H, W, relu, has_sum, pipelined,
                                    skip_mma);
}

// The input's kernel: its halo loads are not asynchronous, so two or three blocks per SM
// (registers capped to fit) hide one block's loads behind another's MMAs. (Staging them by
// 4-byte cp.async instead, the next tile's during this one's MMAs, measured 14-20 % slower
// in the fifteenth session: docs/benchmarks/triton-h200.md.)
template <int CIN, int COUT, int TH, int TW, int SRC_C>
__global__ void __launch_bounds__(Shape<CIN, COUT, TH, TW>::WARPS * 32,
                                  Shape<CIN, COUT, TH, TW>::WARPS <= 4 ? 3 : 2)
conv3x3_input_kernel(half* __restrict__ out, const float* __restrict__ x,
                     const half* __restrict__ w, const float* __restrict__ bias, int B, int H,
                     int W, int relu, int pipelined, int skip_mma) {
  direct_conv<CIN, COUT, TH, TW, SRC_C>(out, reinterpret_cast<const half*>(x), w, bias, nullptr,
                                        B, H, W, relu, 0, pipelined, skip_mma);
}

// The same with its halo staged by TMA (Hopper; the tensor map of the FP32 NCHW batch).
template <int CIN, int COUT, int TH, int TW, int SRC_C>
__global__ void __launch_bounds__(Shape<CIN, COUT, TH, TW>::WARPS * 32,
                                  Shape<CIN, COUT, TH, TW>::WARPS <= 4 ? 3 : 2)
conv3x3_input_tma_kernel(half* __restrict__ out, const float* __restrict__ x,
                         const half* __restrict__ w, const float* __restrict__ bias, int B,
                         int H, int W, int relu, int pipelined, int skip_mma,
                         const __grid_constant__ CUtensorMap map) {
  __shared__ __align__(8) uint64_t bars[2];  // the two stages' barriers
  direct_conv<CIN, COUT, TH, TW, SRC_C, true>(out, reinterpret_cast<const half*>(x), w, bias,
                                              nullptr, B, H, W, relu, 0, pipelined, skip_mma,
                                              &map, bars);
}

// The wgmma kernel (fifteenth session; built after scripts/probe_wgmma.cu showed on an H200
// that wgmma reads a tap's operand from this halo layout correctly, and runs the tensor side
// of 32 -> 32 at 250-335 ns per 64 pixels per SM against the mma.sync kernel's 606 ns all in).
// Hopper's warpgroup MMA reads A and B from shared memory through descriptors, so there are
// no ldmatrix -> mma.sync chains. Its core matrices are 8 rows x 16 bytes, rows 16 bytes
// apart (no swizzle), so the halo is stored channel-group-major: for each 8 channels a plane
// of every halo pixel's 16 bytes. 8 consecutive pixels x 8 channels are then one contiguous
// core matrix, and a tap's one-pixel shift is a 16-byte offset of the descriptor's start
// address. The weights: per tap and 8 input channels, COUT rows of 16 bytes. A block is WG
// warpgroups (128 threads each) sharing the halo and weights; its tile is TH rows x 64
// pixels, each warpgroup taking every WG-th row, one wgmma M = 64 row at a time: 9 taps x
// CIN / 16 wgmma m64nCOUTk16, then the epilogue of that row (as the mma.sync kernel's: bias,
// SE sums, ReLU, FP16 stores). Persistent and pipelined as direct_conv (the next tile's halo
// copied by cp.async while this one computes). Sixteenth session, on an H200 at batch 64:
// row r + 1's wgmma run during row r's epilogue (two accumulator sets): -8 % on the
// full-resolution 16 -> 16 steps, nothing on 32 -> 32; WG = 2 (twice the warps an SM for the
// same shared memory; Nsight Compute had the one-warpgroup kernel latency-bound, 37 % of
// issue slots used, no unit over 64 % busy): -4 % on 32 -> 32; 16-row tiles for 16 -> 16:
// -2 to -4 %. The descriptors are a per-tile base plus compile-time offsets (ptxas still
// moves four registers into place for each wgmma). No skip_mma (the Python side refuses it
// for these tiles): a branch around the wgmma made ptxas serialize them. Only for sm_90a
// (wgmma is architecture-specific): built for another target the kernel is empty and the
// Python side never offers it.
template <int CIN, int COUT, int TH, bool TMA = false, int TW_ = 64>
struct WgmmaShape {
  static constexpr int TW = TW_, HALO_W = TW + 2, HALO = (TH + 2) * HALO_W, CH = CIN / 8;
  // bytes of one 8-channel plane: 16 past a multiple of 128, so that the cp.async copies of
  // one pixel's consecutive chunks fall on different banks; with TMA a multiple of 128 (its
  // destinations' alignment)
  static constexpr int PLANE = (HALO * 16 + 127) / 128 * 128 + (TMA ? 0 : 16);
  static constexpr int HALO_BYTES = CH * PLANE;
  static constexpr int NB = COUT / 8;
  static constexpr int W_BYTES = 9 * CIN * COUT * 2;
  static constexpr int SUM_BYTES = (COUT * 4 + 127) / 128 * 128;
  static constexpr int SMEM1 = W_BYTES + SUM_BYTES + HALO_BYTES;
  static constexpr int SMEM2 = SMEM1 + HALO_BYTES;
  static_assert(CIN % 16 == 0 && (COUT == 16 || COUT == 32 || COUT == 64),
                "wgmma n16, n32 or n64");
  static_assert(SMEM2 <= 227 * 1024, "two halos and the weights fit one block's shared memory");
};

// A shared-memory matrix descriptor without swizzle: the start address, the K direction's
// core-matrix byte offset ("leading") and the M or N direction's ("stride"), each >> 4.
__device__ __forceinline__ uint64_t wgmma_descriptor(const void* p, uint32_t leading,
                                                     uint32_t stride) {
  const uint32_t addr = smem_addr(p);
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((leading & 0x3FFFF) >> 4) << 16) |
         ((uint64_t)((stride & 0x3FFFF) >> 4) << 32);
}

// d (64 x COUT per warpgroup) = or += a * b; this thread's part of d in mma.sync's m16n8
// accumulator layout, n block by n block: rows 16 * warp + g and + 8, columns n * 8 + 2q, + 1
template <int COUT>
__device__ __forceinline__ void wgmma_64(float (&d)[COUT / 8][4], uint64_t a, uint64_t b,
                                         int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (COUT == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
          "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
          "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
          "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
          "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
          "+f"(d[7][2]), "+f"(d[7][3])
        : "l"(a), "l"(b), "r"(accumulate));
  } else if constexpr (COUT == 32) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
          "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
          "+f"(d[3][3])
        : "l"(a), "l"(b), "r"(accumulate));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
        : "l"(a), "l"(b), "r"(accumulate));
  }
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// waits until at most N of this warpgroup's committed wgmma groups are pending
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit_and_wait() {
  wgmma_commit();
  wgmma_wait<0>();
}
// Ties the accumulators to this point of the program: the compiler may not move their reads
// across it (wgmma writes them asynchronously until its wait).
template <int NB>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[NB][4]) {
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
}
// this thread's completed shared-memory writes (stores, cp.async) visible to wgmma's reads
__device__ __forceinline__ void fence_async_shared() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Tile t's halo by TMA: one thread issues a box of 8 channels x (TH + 2) rows x 66 pixels per
// plane (the tensor map's zero fill outside the image is the convolution's padding); it
// completes on `bar` (every thread waits there). One instruction a plane instead of a
// cp.async and its address arithmetic per 16 bytes (the copy loop was a third of the
// kernel's instructions, sixteenth session).
template <int CIN, int COUT, int TH, int TW = 64>
__device__ __forceinline__ void issue_halo_tma(unsigned char* halo, const CUtensorMap* map,
                                               uint64_t* bar, int t, int tiles_w,
                                               int tiles_img) {
  using S = WgmmaShape<CIN, COUT, TH, true, TW>;
  if (threadIdx.x == 0) {
    const int b = t / tiles_img, rem = t % tiles_img;
    const int h0 = (rem / tiles_w) * TH - 1, w0 = (rem % tiles_w) * S::TW - 1;
    mbar_expect_tx(bar, S::CH * S::HALO * 16);
#pragma unroll
    for (int v = 0; v < S::CH; ++v)
      tma_load_4d(smem_addr(halo + v * S::PLANE), map, bar, 8 * v, w0, h0, b);
  }
}

// Tile t's halo into channel-group-major planes by 16-byte cp.async through L1 (zeros outside
// the image; T threads, halo_chunks' order: consecutive threads read one pixel's consecutive
// chunks). Completes with the caller's wait_group.
template <int CIN, int COUT, int TH, int T, int TW = 64>
__device__ __forceinline__ void issue_halo_planes(unsigned char* halo, const half* __restrict__ x,
                                                  int t, int tiles_w, int tiles_img, int H,
                                                  int W) {
  using S = WgmmaShape<CIN, COUT, TH, false, TW>;
  const int b = t / tiles_img, rem = t % tiles_img;
  const int h0 = (rem / tiles_w) * TH - 1, w0 = (rem % tiles_w) * S::TW - 1;
  // this thread's chunk of every pixel, into its plane
  const char* xv = reinterpret_cast<const char*>(x + (size_t)b * H * W * CIN) +
                   threadIdx.x % S::CH * 16;
  const char* xz = reinterpret_cast<const char*>(x);
  const unsigned dst = smem_addr(halo + threadIdx.x % S::CH * S::PLANE);
  auto chunk = [&](int p, int row, int col, int) {
    bool inside;
    const void* src = chunk_source<CIN>(xv, xz, h0 + row, w0 + col, H, W, inside);
    copy_chunk_l1(dst + p * 16, src, inside ? 16 : 0);
  };
  halo_chunks<TH + 2, S::HALO_W, S::CH, T>(threadIdx.x, chunk);
  asm volatile("cp.async.commit_group;\n" ::);
}

// Issues the next tile's halo (if any) into the other buffer, then waits for this tile's
// (the wgmma kernels' cp.async halos; the caller fences and synchronizes).
template <int CIN, int COUT, int TH, int T, int TW = 64>
__device__ __forceinline__ void next_halo_planes(unsigned char* other, const half* __restrict__ x,
                                                 int next, int ntiles, int tiles_w,
                                                 int tiles_img, int H, int W) {
  if (next < ntiles) {
    issue_halo_planes<CIN, COUT, TH, T, TW>(other, x, next, tiles_w, tiles_img, H, W);
    asm volatile("cp.async.wait_group 1;\n" ::);  // this tile's halo, not the next one's
  } else {
    asm volatile("cp.async.wait_group 0;\n" ::);
  }
}

template <int CIN, int COUT, int TH, int WG, bool TMA>
__global__ void __launch_bounds__(128 * WG)
conv3x3_wgmma_kernel(half* __restrict__ out, const half* __restrict__ x,
                     const half* __restrict__ w, const float* __restrict__ bias,
                     float* __restrict__ se_sum, int B, int H, int W, int relu, int has_sum,
                     int pipelined, int skip_mma, const __grid_constant__ CUtensorMap map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgmmaShape<CIN, COUT, TH, TMA>;
  __shared__ __align__(8) uint64_t bars[TMA ? 2 : 1];  // the TMA halos' barriers
  static_assert(TH % WG == 0, "every warpgroup takes TH / WG rows");
  constexpr int ROWS = TH / WG;
  extern __shared__ __align__(128) unsigned char smem[];
  half* wsm = reinterpret_cast<half*>(smem);
  float* sums = reinterpret_cast<float*>(smem + S::W_BYTES);
  unsigned char* halos = smem + S::W_BYTES + S::SUM_BYTES;

  const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  const int tiles_w = (W + S::TW - 1) / S::TW, tiles_img = tiles_w * ((H + TH - 1) / TH);
  const int ntiles = tiles_img * B;
  int t = blockIdx.x;
  if constexpr (TMA) {
    if (tid == 0) {
      mbar_init(&bars[0], 1);
      mbar_init(&bars[1], 1);
    }
    __syncthreads();
    issue_halo_tma<CIN, COUT, TH>(halos, &map, &bars[0], t, tiles_w, tiles_img);
  } else {
    issue_halo_planes<CIN, COUT, TH, 128 * WG>(halos, x, t, tiles_w, tiles_img, H, W);
  }
  // weights: row tap * CIN + c, column n -> [tap][c / 8][n][c % 8]; read 8 columns at a time
  // (one 16-byte load for 8 two-byte stores: a load per value, each store waiting for its
  // load, had 4 % of the kernel's stall samples)
  for (int i = tid; i < 9 * CIN * COUT / 8; i += blockDim.x) {
    const int row = i / (COUT / 8), n0 = i % (COUT / 8) * 8, tap = row / CIN, c = row % CIN;
    const uint4 v = reinterpret_cast<const uint4*>(w)[i];
    const half* h = reinterpret_cast<const half*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j) wsm[((tap * S::CH + c / 8) * COUT + n0 + j) * 8 + c % 8] = h[j];
  }
  if (has_sum)
    for (int i = tid; i < COUT; i += blockDim.x) sums[i] = 0.f;
  float bias_r[S::NB][2], ssum[S::NB][2];
  load_bias<COUT>(bias_r, ssum, bias, lane);
  // B's descriptor for tap 0, channels 0-15; the others are fixed offsets from it. (Offsets
  // are added to the start-address field: no carry out of it, shared memory being < 256 KB.)
  // (as its low 32 bits: the high ones, the stride field, are the same constant in every
  // descriptor here, which lets ptxas leave them in place between wgmma)
  const uint32_t b0 = (uint32_t)wgmma_descriptor(wsm, COUT * 16, 128);
  constexpr uint64_t STRIDE_128 = (uint64_t)(128 >> 4) << 32;  // those high bits

  for (int it = 0; t < ntiles; ++it) {
    const int next = pipelined ? t + gridDim.x : ntiles;
    unsigned char* halo = halos + (it & 1) * S::HALO_BYTES;
    if constexpr (TMA) {
      // the other buffer was last read in the previous tile, before its closing barrier
      if (next < ntiles)
        issue_halo_tma<CIN, COUT, TH>(halos + ((it + 1) & 1) * S::HALO_BYTES, &map,
                                      &bars[(it + 1) & 1], next, tiles_w, tiles_img);
      mbar_wait(&bars[it & 1], (it >> 1) & 1);  // this buffer's (it / 2)-th fill
    } else {
      next_halo_planes<CIN, COUT, TH, 128 * WG>(halos + ((it + 1) & 1) * S::HALO_BYTES, x, next,
                                                ntiles, tiles_w, tiles_img, H, W);
    }
    fence_async_shared();  // this thread's copies (and, first time, weight stores) for wgmma
    __syncthreads();
    const int b = t / tiles_img, rem = t % tiles_img;
    const int h0 = (rem / tiles_w) * TH + wg, w0 = (rem % tiles_w) * S::TW;
    // A's descriptor for this warpgroup's first row, tap 0, channels 0-15
    const uint32_t a0 = (uint32_t)wgmma_descriptor(halo + wg * S::HALO_W * 16, S::PLANE, 128);
    // this warpgroup's row i (tile row wg + WG * i) into accumulator set i % 2; row i + 1's
    // are issued before row i's epilogue, so the tensor cores work while this warpgroup stores
    float d[2][S::NB][4];
    auto issue_row = [&](int i, float (&acc)[S::NB][4]) {
      wgmma_fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int tap = 0; tap < 9; ++tap) {
        const int dh = tap / 3, dw = tap % 3;
#pragma unroll
        for (int k = 0; k < CIN / 16; ++k) {
          const int a_off = 2 * k * S::PLANE + ((WG * i + dh) * S::HALO_W + dw) * 16;
          const int b_off = (tap * S::CH + 2 * k) * COUT * 16;
          wgmma_64<COUT>(acc, STRIDE_128 | (a0 + (a_off >> 4)), STRIDE_128 | (b0 + (b_off >> 4)),
                         tap + k > 0);
        }
      }
      wgmma_commit();  // (no operand fence here: ptxas would serialize the wgmma)
    };
    issue_row(0, d[0]);
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
      if (i + 1 < ROWS) {
        issue_row(i + 1, d[(i + 1) % 2]);
        wgmma_wait<1>();  // row i's group; row i + 1's may still run
      } else {
        wgmma_wait<0>();
      }
      wgmma_fence_operands(d[i % 2]);
      // row i's epilogue: warp w holds its pixels 16w to 16w + 15
      store_segment<COUT>(out, d[i % 2], bias_r, ssum, b, h0 + WG * i, w0 + 16 * warp, H, W,
                          relu, lane);
    }
    if (has_sum && (next >= ntiles || next / tiles_img != b))
      flush_sums<COUT>(ssum, sums, se_sum, b, lane);
    __syncthreads();  // this halo buffer is refilled two tiles on; the sums are zeroed
    t = next;
  }
#endif
}

// wgmma with A from registers (mma.sync's m16n8k16 A layout, warp w of the warpgroup holding
// rows 16 w to 16 w + 15) and B from shared memory: d (64 x COUT) = or += a * b.
template <int COUT>
__device__ __forceinline__ void wgmma_rs(float (&d)[COUT / 8][4], const uint32_t (&a)[4],
                                         uint64_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (COUT == 32) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
          "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
          "+f"(d[3][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  } else {
    static_assert(COUT == 16, "n16 or n32");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
#endif
}

// 16 -> 16 and 32 -> 32 with A from registers (eighteenth session). Nsight Compute had the
// wgmma kernel above bound by shared memory on 16 -> 16 (wavefronts 75 % of peak, tensor pipe
// 11 %): each m64n16k16 reads its 2 KB A operand (64 pixels x 16 channels) from shared memory
// for 0.5 KB of B. Here a warpgroup owns R = TH / WG consecutive output rows and walks its
// R + 2 halo rows: each halo row's A fragments (3 column shifts x CIN / 16, by ldmatrix from
// the same channel-plane halo) are loaded once into registers and used by the up to three
// output rows that read that halo row (taps dh = 0, 1, 2), so A's shared-memory reads fall
// by 3R / (R + 2) (2.7x at R 16). Halo row hr's wgmma are one group; row r is complete
// with group r + 2 and stored (the wgmma kernel's epilogue) while later groups run. The A
// registers are double-buffered across halo rows (a group's registers are reused two groups
// on, after a wait for one). Measured at batch 64: 16 -> 16 16x64x2 174 us against 212 for
// conv3x3_wgmma_kernel; 32 -> 32 no faster (500 against 489 with the TMA halo).
template <int CIN, int COUT, int TH, int WG>
__global__ void __launch_bounds__(128 * WG)
conv3x3_wgmma_rs_kernel(half* __restrict__ out, const half* __restrict__ x,
                        const half* __restrict__ w, const float* __restrict__ bias,
                        float* __restrict__ se_sum, int B, int H, int W, int relu, int has_sum,
                        int pipelined) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgmmaShape<CIN, COUT, TH>;
  static_assert(TH % WG == 0, "every warpgroup takes TH / WG consecutive rows");
  constexpr int R = TH / WG, KS = CIN / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  half* wsm = reinterpret_cast<half*>(smem);
  float* sums = reinterpret_cast<float*>(smem + S::W_BYTES);
  unsigned char* halos = smem + S::W_BYTES + S::SUM_BYTES;

  const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  const int tiles_w = (W + S::TW - 1) / S::TW, tiles_img = tiles_w * ((H + TH - 1) / TH);
  const int ntiles = tiles_img * B;
  int t = blockIdx.x;
  issue_halo_planes<CIN, COUT, TH, 128 * WG>(halos, x, t, tiles_w, tiles_img, H, W);
  for (int i = tid; i < 9 * CIN * COUT / 8; i += blockDim.x) {
    const int row = i / (COUT / 8), n0 = i % (COUT / 8) * 8, tap = row / CIN, c = row % CIN;
    const uint4 v = reinterpret_cast<const uint4*>(w)[i];
    const half* h = reinterpret_cast<const half*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j) wsm[((tap * S::CH + c / 8) * COUT + n0 + j) * 8 + c % 8] = h[j];
  }
  if (has_sum)
    for (int i = tid; i < COUT; i += blockDim.x) sums[i] = 0.f;
  float bias_r[S::NB][2], ssum[S::NB][2];
  load_bias<COUT>(bias_r, ssum, bias, lane);
  const uint32_t b0 = (uint32_t)wgmma_descriptor(wsm, COUT * 16, 128);
  constexpr uint64_t STRIDE_128 = (uint64_t)(128 >> 4) << 32;
  // this lane's ldmatrix row: pixel 16 warp + (0-15) of the 64, channel plane 0 or 1 of a k16
  const int a_byte = operand_half(lane) * S::PLANE + (16 * warp + operand_row(lane)) * 16;

  for (int it = 0; t < ntiles; ++it) {
    const int next = pipelined ? t + gridDim.x : ntiles;
    unsigned char* halo = halos + (it & 1) * S::HALO_BYTES;
    next_halo_planes<CIN, COUT, TH, 128 * WG>(halos + ((it + 1) & 1) * S::HALO_BYTES, x, next,
                                              ntiles, tiles_w, tiles_img, H, W);
    fence_async_shared();
    __syncthreads();
    const int b = t / tiles_img, rem = t % tiles_img;
    const int h0 = (rem / tiles_w) * TH + wg * R, w0 = (rem % tiles_w) * S::TW;
    // this warpgroup's halo rows start at its first output row - 1
    const unsigned char* hb = halo + wg * R * S::HALO_W * 16 + a_byte;
    float acc[R][S::NB][4];
#pragma unroll
    for (int r = 0; r < R; ++r) wgmma_fence_operands(acc[r]);
    uint32_t a[2][3][KS][4];
#pragma unroll
    for (int hr = 0; hr < R + 2; ++hr) {
#pragma unroll
      for (int dw = 0; dw < 3; ++dw)
#pragma unroll
        for (int k = 0; k < KS; ++k)
          ldsm_x4(a[hr % 2][dw][k],
                  reinterpret_cast<const half*>(hb + 2 * k * S::PLANE + (hr * S::HALO_W + dw) * 16));
      wgmma_fence();  // the A registers just loaded, before the wgmma read them
#pragma unroll
      for (int dw = 0; dw < 3; ++dw)
#pragma unroll
        for (int k = 0; k < KS; ++k)
#pragma unroll
          for (int dh = 0; dh < 3; ++dh) {
            const int r = hr - dh;
            if (r < 0 || r >= R) continue;
            const int b_off = ((dh * 3 + dw) * S::CH + 2 * k) * COUT * 16;
            wgmma_rs<COUT>(acc[r], a[hr % 2][dw][k], STRIDE_128 | (b0 + (b_off >> 4)),
                           dh + dw + k > 0);
          }
      wgmma_commit();
      wgmma_wait<1>();  // group hr - 1: its A registers are free, row hr - 3 is complete
      if (hr >= 3) {
        wgmma_fence_operands(acc[hr - 3]);
        store_segment<COUT>(out, acc[hr - 3], bias_r, ssum, b, h0 + hr - 3, w0 + 16 * warp, H,
                            W, relu, lane);
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int r = (R - 1 > 0 ? R - 1 : 0); r < R; ++r) {
      wgmma_fence_operands(acc[r]);
      store_segment<COUT>(out, acc[r], bias_r, ssum, b, h0 + r, w0 + 16 * warp, H, W, relu,
                          lane);
    }
    if (has_sum && (next >= ntiles || next / tiles_img != b))
      flush_sums<COUT>(ssum, sums, se_sum, b, lane);
    __syncthreads();  // this halo buffer is refilled two tiles on; the sums are zeroed
    t = next;
  }
#endif
}

// 64 -> 64 with the output channels as wgmma's M and 128 pixels as N (eighteenth session).
// Nsight Compute had the m64n64k16 kernel above latency-bound on 64 -> 64 (tensor pipe 35 %,
// shared memory 53 %, each wgmma about 85 clocks for 32 of work): here one m64n128k16 does
// twice the work of m64n64k16 for 6 KB of operands instead of 8 KB for two. A is the weights
// (the layout above, K-major: 8 input channels of an output channel in 16 bytes), B the
// halo's channel planes (K-major too: 8 channels of a pixel in 16 bytes), so the descriptors
// are the other kernel's, swapped. The accumulators are then channel-major (rows: output
// channels 16 w + g and + 8; columns: pixels), so the epilogue transposes them through a
// 64-pixel staging buffer a warpgroup (stmatrix .trans, XOR-swizzled 16-byte chunks) and
// stores whole pixels, 128 contiguous bytes each. Tiles: TH rows x 128 pixels; shared memory
// 74 KB of weights, two halos of (TH + 2) x 130 pixels (67 KB at TH 2), 8 KB of staging a
// warpgroup: one block an SM. Measured at batch 64: 2x128x2 1.55 ms against 1.59 for
// conv3x3_wgmma_kernel's 4x64x2; Nsight Compute counts the same shared-memory wavefronts for
// half the instructions (73 a m64n128k16: A read once per 64 columns of N, it seems).
__device__ __forceinline__ void wgmma_64x128(float (&d)[16][4], uint64_t a, uint64_t b,
                                             int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
          "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
          "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
          "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
          "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
          "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),
          "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
          "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]),
          "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]),
          "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]),
          "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
          "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(a), "l"(b), "r"(accumulate));
#endif
}

// Four 8 x 8 FP16 matrices from the accumulator layout (this thread: row lane / 4, columns
// 2 (lane % 4) and + 1 of each) stored transposed: row j of matrix i at the address lane
// 8 i + j gives.
__device__ __forceinline__ void stsm_x4_trans(unsigned addr, uint32_t r0, uint32_t r1,
                                              uint32_t r2, uint32_t r3) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#endif
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// the 128 threads of warpgroup wg (named barrier 1 + wg; 0 is __syncthreads')
__device__ __forceinline__ void warpgroup_sync(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

// One output row's epilogue (a warpgroup's 64 channels x 128 pixels from column w0): + bias,
// the SE sums of this thread's two channels (valid pixels, before ReLU), optional ReLU, FP16,
// through `stage` (64 pixels x 128 bytes, chunk c of pixel p at p * 128 + (c ^ p % 8) * 16,
// so that stmatrix's eight rows and the copy's reads fall on different banks) to whole-pixel
// 16-byte stores.
__device__ __forceinline__ void store_row_n128(half* __restrict__ out, const float (&acc)[16][4],
                                               unsigned char* stage, float bias0, float bias1,
                                               float& sum0, float& sum1, int b, int ho, int w0,
                                               int H, int W, int relu, int wg) {
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, q = lane % 4;
  const unsigned st = smem_addr(stage);
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
    for (int n2 = 0; n2 < 4; ++n2) {
      uint32_t r[4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = 8 * pass + 2 * n2 + j, px = w0 + 8 * n + 2 * q;
        const bool ok0 = ho < H && px < W, ok1 = ho < H && px + 1 < W;
        float v00 = acc[n][0] + bias0, v01 = acc[n][1] + bias0;  // channel 16 w + g
        float v10 = acc[n][2] + bias1, v11 = acc[n][3] + bias1;  // channel 16 w + g + 8
        sum0 += (ok0 ? v00 : 0.f) + (ok1 ? v01 : 0.f);
        sum1 += (ok0 ? v10 : 0.f) + (ok1 ? v11 : 0.f);
        if (relu) {
          v00 = fmaxf(v00, 0.f);
          v01 = fmaxf(v01, 0.f);
          v10 = fmaxf(v10, 0.f);
          v11 = fmaxf(v11, 0.f);
        }
        r[2 * j] = pack_half2(v00, v01);
        r[2 * j + 1] = pack_half2(v10, v11);
      }
      // matrix m = lane / 8: pixels of block 2 n2 + m / 2, channels 16 w + 8 (m % 2) + 0..7
      const int m = lane / 8, pl = 8 * (2 * n2 + m / 2) + lane % 8, chunk = 2 * warp + m % 2;
      stsm_x4_trans(st + pl * 128 + ((chunk ^ (pl & 7)) << 4), r[0], r[1], r[2], r[3]);
    }
    warpgroup_sync(wg);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int k = tid + 128 * j, pl = k / 8, c = k % 8, px = w0 + 64 * pass + pl;
      const uint4 v = *reinterpret_cast<const uint4*>(stage + pl * 128 + ((c ^ (pl & 7)) << 4));
      if (ho < H && px < W)
        *reinterpret_cast<uint4*>(out + (((size_t)b * H + ho) * W + px) * 64 + c * 8) = v;
    }
    warpgroup_sync(wg);  // the staging buffer is free again
  }
}

template <int CIN, int TH, int WG>
struct WgmmaN128Shape {
  using S = WgmmaShape<CIN, 64, TH, false, 128>;
  static constexpr int STAGE_BYTES = 64 * 128;
  static constexpr int SMEM1 = S::SMEM1 + WG * STAGE_BYTES, SMEM2 = S::SMEM2 + WG * STAGE_BYTES;
  static_assert(SMEM2 <= 227 * 1024, "two halos, the weights and the staging fit one block");
};

// TMA (forty-second session, not measured yet): the halo copied by TMA as conv3x3_wgmma_kernel's
// (a box a channel plane, an mbarrier a buffer) instead of cp.async, whose loop is 26
// instructions a 16-byte chunk, ~16 chunks a thread a tile (scripts/sass_loops.py).
template <int CIN, int TH, int WG, bool TMA = false>
__global__ void __launch_bounds__(128 * WG)
conv3x3_wgmma_n128_kernel(half* __restrict__ out, const half* __restrict__ x,
                          const half* __restrict__ w, const float* __restrict__ bias,
                          float* __restrict__ se_sum, int B, int H, int W, int relu, int has_sum,
                          int pipelined, const __grid_constant__ CUtensorMap map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int COUT = 64, TW = 128;
  using S = WgmmaShape<CIN, COUT, TH, TMA, TW>;
  __shared__ __align__(8) uint64_t bars[TMA ? 2 : 1];  // the TMA halos' barriers
  static_assert(TH % WG == 0, "every warpgroup takes TH / WG rows");
  constexpr int ROWS = TH / WG;
  constexpr int STAGE_BYTES = WgmmaN128Shape<CIN, TH, WG>::STAGE_BYTES;
  extern __shared__ __align__(128) unsigned char smem[];
  // the weights, (unused: the SE sums stay in registers), the staging buffers, then one or
  // two halos (SMEM1 or SMEM2)
  half* wsm = reinterpret_cast<half*>(smem);
  unsigned char* halos = smem + S::W_BYTES + S::SUM_BYTES + WG * STAGE_BYTES;

  const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  unsigned char* stage = smem + S::W_BYTES + S::SUM_BYTES + wg * STAGE_BYTES;
  const int tiles_w = (W + TW - 1) / TW, tiles_img = tiles_w * ((H + TH - 1) / TH);
  const int ntiles = tiles_img * B;
  int t = blockIdx.x;
  if constexpr (TMA) {
    if (tid == 0) {
      mbar_init(&bars[0], 1);
      mbar_init(&bars[1], 1);
    }
    __syncthreads();
    issue_halo_tma<CIN, COUT, TH, TW>(halos, &map, &bars[0], t, tiles_w, tiles_img);
  } else {
    issue_halo_planes<CIN, COUT, TH, 128 * WG, TW>(halos, x, t, tiles_w, tiles_img, H, W);
  }
  // the weights as conv3x3_wgmma_kernel lays them out: [tap][c / 8][n][c % 8]
  for (int i = tid; i < 9 * CIN * COUT / 8; i += blockDim.x) {
    const int row = i / (COUT / 8), n0 = i % (COUT / 8) * 8, tap = row / CIN, c = row % CIN;
    const uint4 v = reinterpret_cast<const uint4*>(w)[i];
    const half* h = reinterpret_cast<const half*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j) wsm[((tap * S::CH + c / 8) * COUT + n0 + j) * 8 + c % 8] = h[j];
  }
  const int c0 = 16 * warp + lane / 4;  // this thread's output channels: c0 and c0 + 8
  const float bias0 = bias[c0], bias1 = bias[c0 + 8];
  float sum0 = 0.f, sum1 = 0.f;
  // A (the weights) for tap 0, channels 0-15, and the low 32 bits' fixed offsets as in
  // conv3x3_wgmma_kernel (there it is B)
  const uint32_t a0 = (uint32_t)wgmma_descriptor(wsm, COUT * 16, 128);
  constexpr uint64_t STRIDE_128 = (uint64_t)(128 >> 4) << 32;

  for (int it = 0; t < ntiles; ++it) {
    const int next = pipelined ? t + gridDim.x : ntiles;
    unsigned char* halo = halos + (it & 1) * S::HALO_BYTES;
    if constexpr (TMA) {
      // the other buffer was last read in the previous tile, before its closing barrier
      if (next < ntiles)
        issue_halo_tma<CIN, COUT, TH, TW>(halos + ((it + 1) & 1) * S::HALO_BYTES, &map,
                                          &bars[(it + 1) & 1], next, tiles_w, tiles_img);
      mbar_wait(&bars[it & 1], (it >> 1) & 1);  // this buffer's (it / 2)-th fill
    } else {
      next_halo_planes<CIN, COUT, TH, 128 * WG, TW>(halos + ((it + 1) & 1) * S::HALO_BYTES, x,
                                                    next, ntiles, tiles_w, tiles_img, H, W);
    }
    fence_async_shared();
    __syncthreads();
    const int b = t / tiles_img, rem = t % tiles_img;
    const int h0 = (rem / tiles_w) * TH + wg, w0 = (rem % tiles_w) * TW;
    // B (the halo) for this warpgroup's first row, tap 0, channels 0-15
    const uint32_t b0 = (uint32_t)wgmma_descriptor(halo + wg * S::HALO_W * 16, S::PLANE, 128);
    float d[2][16][4];
    auto issue_row = [&](int i, float (&acc)[16][4]) {
      wgmma_fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int tap = 0; tap < 9; ++tap) {
        const int dh = tap / 3, dw = tap % 3;
#pragma unroll
        for (int k = 0; k < CIN / 16; ++k) {
          const int a_off = (tap * S::CH + 2 * k) * COUT * 16;
          const int b_off = 2 * k * S::PLANE + ((WG * i + dh) * S::HALO_W + dw) * 16;
          wgmma_64x128(acc, STRIDE_128 | (a0 + (a_off >> 4)), STRIDE_128 | (b0 + (b_off >> 4)),
                       tap + k > 0);
        }
      }
      wgmma_commit();
    };
    issue_row(0, d[0]);
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
      if (i + 1 < ROWS) {
        issue_row(i + 1, d[(i + 1) % 2]);
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
      wgmma_fence_operands(d[i % 2]);
      store_row_n128(out, d[i % 2], stage, bias0, bias1, sum0, sum1, b, h0 + WG * i, w0, H, W,
                     relu, wg);
    }
    if (has_sum && (next >= ntiles || next / tiles_img != b)) {
      // this warpgroup's sums of image b: the four lanes of a channel pair, then by atomics
      sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1);
      sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);
      sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1);
      sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);
      if (lane % 4 == 0) {
        atomicAdd(&se_sum[(size_t)b * COUT + c0], sum0);
        atomicAdd(&se_sum[(size_t)b * COUT + c0 + 8], sum1);
      }
      sum0 = sum1 = 0.f;
    }
    __syncthreads();  // this halo buffer is refilled two tiles on
    t = next;
  }
#endif
}

// A residual block's two convolutions in one kernel: mid = relu(conv3x3(x, w1) + b1) is
// computed for the tile and its one-pixel border into shared memory (FP16, zero outside the
// image: conv2's padding), then out = conv3x3(mid, w2) + b2 with optional SE sums and ReLU,
// so mid never goes to global memory. x's halo is two pixels wide. mid's rows are TW + 2
// pixels, covered by ceil((TW + 2) / 16) segments, the last one overlapping its neighbour.
template <int C, int TH, int TW>
struct PairShape {
  static constexpr int IN_W = TW + 4, IN = (TH + 4) * IN_W;      // x's halo pixels
  static constexpr int MID_W = TW + 2, MID = (TH + 2) * MID_W;   // mid's pixels
  static constexpr int SEGS1 = (MID_W + 15) / 16, TASKS1 = (TH + 2) * SEGS1;
  static constexpr int SEGS2 = TW / 16, TASKS2 = TH * SEGS2;
  static constexpr int WARPS = TASKS2 / 2 < 8 ? TASKS2 / 2 : 8;
  static constexpr int IN_BYTES = IN * C * 2, MID_BYTES = MID * C * 2;  // multiples of 32
  static constexpr int W_BYTES = 9 * C * C * 2;                          // a multiple of 128
  static constexpr int SUM_BYTES = (C * 4 + 127) / 128 * 128;
  // both weights, SE sums, mid, then one halo of x (a block per tile) or two (pipelined)
  static constexpr int SMEM1 = 2 * W_BYTES + SUM_BYTES + MID_BYTES + IN_BYTES;
  static constexpr int SMEM2 = SMEM1 + IN_BYTES;
  static_assert(C % 16 == 0 && TW % 16 == 0, "16-wide fragments");
  static_assert(TASKS2 % (2 * WARPS) == 0, "segment pairs split evenly over the warps");
};

template <int C, int TH, int TW>
__global__ void __launch_bounds__(PairShape<C, TH, TW>::WARPS * 32)
conv3x3_pair_kernel(half* __restrict__ out, const half* __restrict__ x,
                    const half* __restrict__ w1, const float* __restrict__ bias1,
                    const half* __restrict__ w2, const float* __restrict__ bias2,
                    float* __restrict__ se_sum, int B, int H, int W, int relu, int has_sum,
                    int pipelined, int skip_mma) {
  using S = PairShape<C, TH, TW>;
  constexpr int NB = C / 8, CH = C / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  half* wsm1 = reinterpret_cast<half*>(smem);
  half* wsm2 = reinterpret_cast<half*>(smem + S::W_BYTES);
  float* sums = reinterpret_cast<float*>(smem + 2 * S::W_BYTES);
  half* mid = reinterpret_cast<half*>(smem + 2 * S::W_BYTES + S::SUM_BYTES);
  half* halos = reinterpret_cast<half*>(smem + 2 * S::W_BYTES + S::SUM_BYTES + S::MID_BYTES);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int tiles_w = (W + TW - 1) / TW, tiles_img = tiles_w * ((H + TH - 1) / TH);
  const int ntiles = tiles_img * B;
  int t = blockIdx.x;
  issue_halo_pad<C, TH, TW, 2, S::WARPS * 32>(halos, x, t, tiles_w, tiles_img, H, W);
  load_weights<C, C>(wsm1, w1);
  load_weights<C, C>(wsm2, w2);
  if (has_sum)
    for (int i = threadIdx.x; i < C; i += blockDim.x) sums[i] = 0.f;
  __syncthreads();
  float bias1_r[NB][2], bias2_r[NB][2], ssum[NB][2];
  load_bias<C>(bias1_r, ssum, bias1, lane);
  load_bias<C>(bias2_r, ssum, bias2, lane);

  for (int it = 0; t < ntiles; ++it) {
    const int next = pipelined ? t + gridDim.x : ntiles;
    const half* halo = halos + (it & 1) * S::IN * C;
    next_halo<C, TH, TW, 2, S::WARPS * 32>(halos + ((it + 1) & 1) * S::IN * C, x, next, ntiles,
                                           tiles_w, tiles_img, H, W);
    const int b = t / tiles_img, rem = t % tiles_img;
    const int h0 = (rem / tiles_w) * TH, w0 = (rem % tiles_w) * TW;
    // conv1 into mid: task j is mid row j / SEGS1 from column min(16 (j % SEGS1), MID_W - 16);
    // the last pair may repeat a task (the same values written twice)
    for (int pair = warp; pair < (S::TASKS1 + 1) / 2; pair += S::WARPS) {
      float acc[2][NB][4];
      zero(acc);
      int base[2], mr[2], mc[2];
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int task = min(2 * pair + p, S::TASKS1 - 1);
        mr[p] = task / S::SEGS1;
        mc[p] = min((task % S::SEGS1) * 16, S::MID_W - 16);
        base[p] = mr[p] * S::IN_W + mc[p];
      }
      if (!skip_mma) conv_segments<C, C, S::IN_W>(acc, halo, base, wsm1, lane);
#pragma unroll
      for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int half8 = 0; half8 < 2; ++half8) {
          const int c = mc[p] + g + 8 * half8, mp = mr[p] * S::MID_W + c;
          const int hh = h0 - 1 + mr[p], ww = w0 - 1 + c;
          const bool inside = hh >= 0 && hh < H && ww >= 0 && ww < W;
#pragma unroll
          for (int n = 0; n < NB; ++n) {
            const float v0 = inside ? fmaxf(acc[p][n][2 * half8] + bias1_r[n][0], 0.f) : 0.f;
            const float v1 = inside ? fmaxf(acc[p][n][2 * half8 + 1] + bias1_r[n][1], 0.f) : 0.f;
            *reinterpret_cast<__half2*>(mid + mp * C + (n ^ swizzle<CH>(mp)) * 8 + 2 * q) =
                __floats2half2_rn(v0, v1);
          }
        }
    }
    __syncthreads();  // mid is complete
    for (int pair = warp; pair < S::TASKS2 / 2; pair += S::WARPS) {
      float acc[2][NB][4];
      zero(acc);
      int base[2];
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int task = 2 * pair + p;
        base[p] = (task / S::SEGS2) * S::MID_W + (task % S::SEGS2) * 16;
      }
      if (!skip_mma) conv_segments<C, C, S::MID_W>(acc, mid, base, wsm2, lane);
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int task = 2 * pair + p;
        store_segment<C>(out, acc[p], bias2_r, ssum, b, h0 + task / S::SEGS2,
                         w0 + (task % S::SEGS2) * 16, H, W, relu, lane);
      }
    }
    if (has_sum && (next >= ntiles || next / tiles_img != b)) flush_sums<C>(ssum, sums, se_sum, b, lane);
    __syncthreads();  // mid and this halo buffer are written again; the sums are zeroed
    t = next;
  }
}

// d (64 x 144 per warpgroup) = or += a * b (m64n144k16), in wgmma_64's accumulator layout
__device__ __forceinline__ void wgmma_144(float (&d)[18][4], uint64_t a, uint64_t b,
                                          int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n144k16.f32.f16.f16 "
      "{" 
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
      "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
      "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71"
      "}, %72, %73, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
        "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]),
        "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3])
      : "l"(a), "l"(b), "r"(accumulate));
#endif
}

// The tap-partials kernel (forty-second session) for transition1's 128 -> 16 at full
// resolution (the network's step 5: 1.63 ms at batch 64 against a 0.63 ms floor). The direct
// kernel's mma.sync runs it at 8 warps an SM with the tensor pipe 33 % busy, each warp waiting
// on its ldmatrix and MMA chains (Nsight Compute, forty-second session): for each 16-channel
// k-step of each of the nine taps it loads a 16 x 16 A operand and runs two m16n8k16 on it
// (N = 16). Here the nine taps are one GEMM's N instead: P (halo pixels x 144) = the halo
// (pixels x 128 channels) times the weights of all nine taps (128 x 9 * 16), one wgmma
// m64n144k16 per 64 halo pixels and 16 channels, A and B from shared memory, so each input
// value is read from shared memory once per tile, not once per tap. The partials go to shared
// memory as FP16 and each output pixel sums its nine shifted 16-channel partials (the tap
// split through DRAM, ninth session, passed the verify gate with FP16 partials emulated on the
// CPU: 0 flips, p99 0.288 px). A tile: TH x TW outputs, a (TH + 2) x (TW + 2) halo of
// 4 x 64 pixels (6 x 30 and 8 x 32: 1.42x the halo's pixels in MMA rows for the outputs);
// WG = 2 warpgroups, each two M tiles of 64 halo pixels, the second's wgmma running while the
// first's partials are stored. Shared memory: the weights (36 KB), one halo (64 KB) and the
// partials (76 KB, rows padded to 152 halves so that neither the accumulators' stores nor the
// sums' 16-byte loads conflict): one block an SM, so the next tile's halo (one buffer) is
// copied while the partials are summed. Persistent (`pipelined`) or a block per tile. Bias
// and ReLU; no SE sums (step 5 has none). sm_90a only, as the wgmma kernel. Measured on an
// H200: 1.45-1.48 ms at batch 64 against the direct kernel's 1.63, issue-bound (the halo's
// cp.async loop a third of its instructions). After that (not measured yet): TMA = the halo
// by TMA (one thread, a box a channel plane, an mbarrier phase a tile), and 6 x 14 outputs
// with WG = 1 (an 8 x 16 halo, 106 KB: two blocks an SM, whose phases interleave).
template <int CIN, int COUT, int TH, int TW, bool TMA = false>
struct TapsShape {
  using H = WgmmaShape<CIN, COUT, TH, TMA, TW>;  // the halo: H::CH planes of H::PLANE bytes
  static constexpr int N = 9 * COUT, NB = N / 8, MT = H::HALO / 64, ROW = N + 8;
  static constexpr int W_BYTES = 9 * CIN * COUT * 2, P_BYTES = H::HALO * ROW * 2;
  static constexpr int SMEM = W_BYTES + H::HALO_BYTES + P_BYTES;
  static_assert(H::HALO % 64 == 0, "the halo is whole M tiles of 64 pixels");
  static_assert(COUT == 16 && CIN % 16 == 0, "n144: nine taps of 16 output channels");
  static_assert(SMEM <= 227 * 1024, "the weights, a halo and the partials fit an SM");
};

template <int CIN, int COUT, int TH, int TW, int WG, bool TMA>
__global__ void __launch_bounds__(128 * WG, 1)
conv3x3_wgmma_taps_kernel(half* __restrict__ out, const half* __restrict__ x,
                          const half* __restrict__ w, const float* __restrict__ bias, int B,
                          int H, int W, int relu, int pipelined,
                          const __grid_constant__ CUtensorMap map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = TapsShape<CIN, COUT, TH, TW, TMA>;
  using HS = typename S::H;
  static_assert(S::MT % WG == 0, "every warpgroup takes MT / WG M tiles");
  constexpr int MW = S::MT / WG;  // M tiles a warpgroup
  static_assert(MW == 2, "two M tiles a warpgroup: the second's wgmma under the first's stores");
  constexpr int T = 128 * WG, ITEMS = (TH * TW + 7) / 8 * 16;  // 8 outputs x 2 halves a group
  extern __shared__ __align__(128) unsigned char smem[];
  half* wsm = reinterpret_cast<half*>(smem);
  unsigned char* halo = smem + S::W_BYTES;
  half* part = reinterpret_cast<half*>(smem + S::W_BYTES + HS::HALO_BYTES);

  const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  const int tiles_w = (W + TW - 1) / TW, tiles_img = tiles_w * ((H + TH - 1) / TH);
  const int ntiles = tiles_img * B;
  int t = blockIdx.x;
  __shared__ __align__(8) uint64_t bar;  // the TMA halo's barrier (one buffer: a phase a tile)
  if constexpr (TMA) {
    if (tid == 0) mbar_init(&bar, 1);
    __syncthreads();
    issue_halo_tma<CIN, COUT, TH, TW>(halo, &map, &bar, t, tiles_w, tiles_img);
  } else {
    issue_halo_planes<CIN, COUT, TH, T, TW>(halo, x, t, tiles_w, tiles_img, H, W);
  }
  // weights: row tap * CIN + c, column n -> [c / 8][tap * COUT + n][c % 8]: B's K-major core
  // matrices (8 columns x 8 channels), the nine taps side by side as N
  for (int i = tid; i < 9 * CIN * COUT / 8; i += blockDim.x) {
    const int row = i / (COUT / 8), n0 = i % (COUT / 8) * 8, tap = row / CIN, c = row % CIN;
    const uint4 v = reinterpret_cast<const uint4*>(w)[i];
    const half* h = reinterpret_cast<const half*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      wsm[((c / 8) * S::N + tap * COUT + n0 + j) * 8 + c % 8] = h[j];
  }
  // the sums' work: item i is output pixel (i % 8) + 8 * (i / 16), channels 8 * ((i / 8) % 2)
  // to + 7 (8 consecutive threads read 8 pixels' same 16 bytes of a tap: 8 rows 304 bytes
  // apart, 8 different bank groups); a thread's channel half is the same for all its items
  const int half8 = (tid / 8) % 2;
  float bias_r[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) bias_r[j] = bias[half8 * 8 + j];
  const uint32_t b0 = (uint32_t)wgmma_descriptor(wsm, S::N * 16, 128);
  const uint32_t a0 = (uint32_t)wgmma_descriptor(halo, HS::PLANE, 128);
  constexpr uint64_t STRIDE_128 = (uint64_t)(128 >> 4) << 32;

  for (int it = 0; t < ntiles; ++it) {
    const int next = pipelined ? t + gridDim.x : ntiles;
    if constexpr (TMA)
      mbar_wait(&bar, it & 1);  // the halo's it-th fill
    else
      asm volatile("cp.async.wait_group 0;\n" ::);
    fence_async_shared();  // this thread's copies (and, first time, weight stores) for wgmma
    __syncthreads();
    float d[MW][S::NB][4];
#pragma unroll
    for (int m = 0; m < MW; ++m) {
      wgmma_fence_operands(d[m]);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < CIN / 16; ++k) {
        const int a_off = 2 * k * HS::PLANE + (wg * MW + m) * 64 * 16;
        const int b_off = 2 * k * S::N * 16;
        wgmma_144(d[m], STRIDE_128 | (a0 + (a_off >> 4)), STRIDE_128 | (b0 + (b_off >> 4)),
                  k > 0);
      }
      wgmma_commit();
    }
    // each M tile's partials as FP16 into rows 64 * tile + 16 * warp + g and + 8
    auto store = [&](int m, const float (&acc)[S::NB][4]) {
      const int g = lane / 4, q = lane % 4, row = (wg * MW + m) * 64 + 16 * warp + g;
#pragma unroll
      for (int n = 0; n < S::NB; ++n) {
        half* p = part + row * S::ROW + n * 8 + 2 * q;
        *reinterpret_cast<__half2*>(p) = __floats2half2_rn(acc[n][0], acc[n][1]);
        *reinterpret_cast<__half2*>(p + 8 * S::ROW) = __floats2half2_rn(acc[n][2], acc[n][3]);
      }
    };
    wgmma_wait<1>();  // the first M tile; the second's may still run
    wgmma_fence_operands(d[0]);
    store(0, d[0]);
    wgmma_wait<0>();
    wgmma_fence_operands(d[1]);
    store(1, d[1]);
    __syncthreads();  // every partial stored; no wgmma reads the halo any more
    if (next < ntiles) {  // the next tile's halo, copied while this one's partials are summed
      if constexpr (TMA)
        issue_halo_tma<CIN, COUT, TH, TW>(halo, &map, &bar, next, tiles_w, tiles_img);
      else
        issue_halo_planes<CIN, COUT, TH, T, TW>(halo, x, next, tiles_w, tiles_img, H, W);
    }
    const int b = t / tiles_img, rem = t % tiles_img;
    const int h0 = (rem / tiles_w) * TH, w0 = (rem % tiles_w) * TW;
    for (int i = tid; i < ITEMS; i += T) {
      const int k = (i % 8) + 8 * (i / 16), r = k / TW, c = k % TW;
      const int ho = h0 + r, wo = w0 + c;
      if (k >= TH * TW || ho >= H || wo >= W) continue;
      float s[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) s[j] = bias_r[j];
#pragma unroll
      for (int tap = 0; tap < 9; ++tap) {
        const int hp = (r + tap / 3) * HS::HALO_W + c + tap % 3;
        const uint4 v = *reinterpret_cast<const uint4*>(part + hp * S::ROW + tap * COUT +
                                                        half8 * 8);
        const __half2* h2 = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __half22float2(h2[j]);
          s[2 * j] += f.x;
          s[2 * j + 1] += f.y;
        }
      }
      uint4 o;
      __half2* o2 = reinterpret_cast<__half2*>(&o);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        o2[j] = relu ? __floats2half2_rn(fmaxf(s[2 * j], 0.f), fmaxf(s[2 * j + 1], 0.f))
                     : __floats2half2_rn(s[2 * j], s[2 * j + 1]);
      *reinterpret_cast<uint4*>(out + (((size_t)b * H + ho) * W + wo) * COUT + half8 * 8) = o;
    }
    t = next;  // (the partials are written again after the next tile's first barrier)
  }
#endif
}

// The grid: one block per tile, or (pipelined) as many as fit on the device at once, at most
// max_blocks if > 0. Sets the kernel's shared-memory limit on the first (uncaptured) call per
// device.
template <typename Kernel>
cudaError_t grid_size(Kernel kernel, int threads, int smem_max, int ntiles, int pipelined,
                      int max_blocks, int* resident, int* blocks) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device >= 64) return cudaErrorInvalidDevice;
  if (!resident[device]) {
    if (smem_max > 48 * 1024) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max);
      if (err != cudaSuccess) return err;
    }
    int per_sm = 0, sms = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_max);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    resident[device] = per_sm * sms > 0 ? per_sm * sms : 1;
  }
  *blocks = ntiles;
  if (pipelined) {
    *blocks = resident[device] < *blocks ? resident[device] : *blocks;
    *blocks = max_blocks > 0 && max_blocks < *blocks ? max_blocks : *blocks;
  }
  return cudaSuccess;
}

// Launches `kernel` over the TH x TW output tiles of B images of H x W: a block per tile, or
// with `pipelined` the persistent grid grid_size sizes. smem: this launch's dynamic shared
// memory; smem_max: the most any launch of the kernel asks for; resident: the caller's cache
// of the kernel's resident blocks per device; args: the kernel's own arguments.
template <int TH, int TW, typename Kernel, typename... Args>
cudaError_t launch_tiles(Kernel kernel, int threads, int smem_max, int smem, int* resident,
                         int B, int H, int W, int pipelined, int max_blocks,
                         cudaStream_t stream, Args... args) {
  int blocks = 0;
  const int ntiles = ((W + TW - 1) / TW) * ((H + TH - 1) / TH) * B;
  cudaError_t err = grid_size(kernel, threads, smem_max, ntiles, pipelined, max_blocks,
                              resident, &blocks);
  if (err != cudaSuccess) return err;
  kernel<<<blocks, threads, smem, stream>>>(args...);
  return cudaGetLastError();
}

template <int CIN, int COUT, int TH, int TW>
cudaError_t launch(half* out, const half* x, const half* w, const float* bias, float* se_sum,
                   int B, int H, int W, int relu, int has_sum, int pipelined, int skip_mma,
                   int max_blocks, cudaStream_t stream) {
  using S = Shape<CIN, COUT, TH, TW>;
  static int resident[64] = {};
  return launch_tiles<TH, TW>(conv3x3_direct_kernel<CIN, COUT, TH, TW>, S::WARPS * 32, S::SMEM2,
                              pipelined ? S::SMEM2 : S::SMEM1, resident, B, H, W, pipelined,
                              max_blocks, stream, out, x, w, bias, se_sum, B, H, W, relu,
                              has_sum, pipelined, skip_mma);
}

// The driver's cuTensorMapEncodeTiled, reached through the runtime (no -lcuda); null if the
// driver has none.
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found;
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                             cudaEnableDefault, &found);
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? (EncodeTiled)p : nullptr;
  }();
  return fn;
}

// x (B, H, W, CIN) FP16 as a 4-D tensor map (channels innermost) whose box is one halo plane:
// 8 channels x (TW + 2) pixels x (TH + 2) rows of one image; outside the tensor it reads zeros.
template <int CIN, int TH, int TW>
cudaError_t halo_map(CUtensorMap* map, const half* x, int B, int H, int W) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  if (reinterpret_cast<uintptr_t>(x) % 16) return cudaErrorMisalignedAddress;
  const cuuint64_t dims[4] = {CIN, (cuuint64_t)W, (cuuint64_t)H, (cuuint64_t)B};
  const cuuint64_t strides[3] = {CIN * 2, (cuuint64_t)W * CIN * 2, (cuuint64_t)H * W * CIN * 2};
  const cuuint32_t box[4] = {8, TW + 2, TH + 2, 1}, unit[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, const_cast<half*>(x), dims,
                            strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <int CIN, int COUT, int TH, int WG, bool TMA>
cudaError_t launch_wgmma(half* out, const half* x, const half* w, const float* bias,
                         float* se_sum, int B, int H, int W, int relu, int has_sum, int pipelined,
                         int skip_mma, int max_blocks, cudaStream_t stream) {
  using S = WgmmaShape<CIN, COUT, TH, TMA>;
  static int resident[64] = {};
  CUtensorMap map = {};  // (unused without TMA)
  if constexpr (TMA) {
    const cudaError_t err = halo_map<CIN, TH, S::TW>(&map, x, B, H, W);
    if (err != cudaSuccess) return err;
  }
  return launch_tiles<TH, S::TW>(conv3x3_wgmma_kernel<CIN, COUT, TH, WG, TMA>, 128 * WG,
                                 S::SMEM2, pipelined ? S::SMEM2 : S::SMEM1, resident, B, H, W,
                                 pipelined, max_blocks, stream, out, x, w, bias, se_sum, B, H, W,
                                 relu, has_sum, pipelined, skip_mma, map);
}

template <int CIN, int COUT, int TH, int WG>
cudaError_t launch_wgmma_rs(half* out, const half* x, const half* w, const float* bias,
                            float* se_sum, int B, int H, int W, int relu, int has_sum,
                            int pipelined, int max_blocks, cudaStream_t stream) {
  using S = WgmmaShape<CIN, COUT, TH>;
  static int resident[64] = {};
  return launch_tiles<TH, S::TW>(conv3x3_wgmma_rs_kernel<CIN, COUT, TH, WG>, 128 * WG, S::SMEM2,
                                 pipelined ? S::SMEM2 : S::SMEM1, resident, B, H, W, pipelined,
                                 max_blocks, stream, out, x, w, bias, se_sum, B, H, W, relu,
                                 has_sum, pipelined);
}

template <int CIN, int TH, int WG, bool TMA>
cudaError_t launch_wgmma_n128(half* out, const half* x, const half* w, const float* bias,
                              float* se_sum, int B, int H, int W, int relu, int has_sum,
                              int pipelined, int max_blocks, cudaStream_t stream) {
  using S = WgmmaN128Shape<CIN, TH, WG>;  // (the cp.async halo's sizes: no smaller with TMA)
  static int resident[64] = {};
  CUtensorMap map = {};  // (unused without TMA)
  if constexpr (TMA) {
    const cudaError_t err = halo_map<CIN, TH, 128>(&map, x, B, H, W);
    if (err != cudaSuccess) return err;
  }
  return launch_tiles<TH, 128>(conv3x3_wgmma_n128_kernel<CIN, TH, WG, TMA>, 128 * WG, S::SMEM2,
                               pipelined ? S::SMEM2 : S::SMEM1, resident, B, H, W, pipelined,
                               max_blocks, stream, out, x, w, bias, se_sum, B, H, W, relu,
                               has_sum, pipelined, map);
}

// The tap-partials kernel: one halo buffer, the same shared memory in either schedule.
template <int CIN, int COUT, int TH, int TW, int WG, bool TMA>
cudaError_t launch_wgmma_taps(half* out, const half* x, const half* w, const float* bias,
                              int B, int H, int W, int relu, int has_sum, int pipelined,
                              int max_blocks, cudaStream_t stream) {
  using S = TapsShape<CIN, COUT, TH, TW, TMA>;
  static int resident[64] = {};
  if (has_sum) return cudaErrorInvalidValue;  // no SE sums (the Python side refuses them)
  CUtensorMap map = {};  // (unused without TMA)
  if constexpr (TMA) {
    const cudaError_t err = halo_map<CIN, TH, TW>(&map, x, B, H, W);
    if (err != cudaSuccess) return err;
  }
  return launch_tiles<TH, TW>(conv3x3_wgmma_taps_kernel<CIN, COUT, TH, TW, WG, TMA>, 128 * WG,
                              S::SMEM, S::SMEM, resident, B, H, W, pipelined, max_blocks,
                              stream, out, x, w, bias, B, H, W, relu, pipelined, map);
}

// The input's kernel: one halo buffer in either schedule.
template <int COUT, int TH, int TW, int SRC_C>
cudaError_t launch_input(half* out, const float* x, const half* w, const float* bias, int B,
                         int H, int W, int relu, int pipelined, int skip_mma, int max_blocks,
                         cudaStream_t stream) {
  using S = Shape<16, COUT, TH, TW>;
  static int resident[64] = {};
  return launch_tiles<TH, TW>(conv3x3_input_kernel<16, COUT, TH, TW, SRC_C>, S::WARPS * 32,
                              S::SMEM1, S::SMEM1, resident, B, H, W, pipelined, max_blocks,
                              stream, out, x, w, bias, B, H, W, relu, pipelined, skip_mma);
}

// x (B, SRC_C, H, W) FP32 as a 4-D tensor map (columns innermost) whose box is one tile's
// input: BOXW columns x (TH + 2) rows x SRC_C planes of one image; outside it reads zeros.
template <int TH, int TW, int SRC_C>
cudaError_t input_map(CUtensorMap* map, const float* x, int B, int H, int W) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  if (reinterpret_cast<uintptr_t>(x) % 16 || W % 4) return cudaErrorMisalignedAddress;
  using St = InputStage<TH, TW, SRC_C>;
  const cuuint64_t dims[4] = {(cuuint64_t)W, (cuuint64_t)H, SRC_C, (cuuint64_t)B};
  const cuuint64_t strides[3] = {(cuuint64_t)W * 4, (cuuint64_t)H * W * 4,
                                 (cuuint64_t)SRC_C * H * W * 4};
  const cuuint32_t box[4] = {St::BOXW, TH + 2, SRC_C, 1}, unit[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, const_cast<float*>(x), dims,
                            strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The input's kernel with its halo staged by TMA: the halo and two stages in either schedule.
template <int COUT, int TH, int TW, int SRC_C>
cudaError_t launch_input_tma(half* out, const float* x, const half* w, const float* bias, int B,
                             int H, int W, int relu, int pipelined, int skip_mma, int max_blocks,
                             cudaStream_t stream) {
  using S = Shape<16, COUT, TH, TW>;
  constexpr int SMEM = S::SMEM1 + 2 * InputStage<TH, TW, SRC_C>::STRIDE;
  static_assert(S::SMEM1 % 128 == 0, "the stages 128-byte aligned");
  static int resident[64] = {};
  CUtensorMap map = {};
  const cudaError_t err = input_map<TH, TW, SRC_C>(&map, x, B, H, W);
  if (err != cudaSuccess) return err;
  return launch_tiles<TH, TW>(conv3x3_input_tma_kernel<16, COUT, TH, TW, SRC_C>, S::WARPS * 32,
                              SMEM, SMEM, resident, B, H, W, pipelined, max_blocks, stream, out,
                              x, w, bias, B, H, W, relu, pipelined, skip_mma, map);
}

template <int C, int TH, int TW>
cudaError_t launch_pair(half* out, const half* x, const half* w1, const float* bias1,
                        const half* w2, const float* bias2, float* se_sum, int B, int H, int W,
                        int relu, int has_sum, int pipelined, int skip_mma, int max_blocks,
                        cudaStream_t stream) {
  using S = PairShape<C, TH, TW>;
  static int resident[64] = {};
  return launch_tiles<TH, TW>(conv3x3_pair_kernel<C, TH, TW>, S::WARPS * 32, S::SMEM2,
                              pipelined ? S::SMEM2 : S::SMEM1, resident, B, H, W, pipelined,
                              max_blocks, stream, out, x, w1, bias1, w2, bias2, se_sum, B, H, W,
                              relu, has_sum, pipelined, skip_mma);
}

}  // namespace ttball_direct

#define TTBALL_TILE(CIN, COUT, TH, TW)                                                     \
  if (cin == CIN && cout == COUT && th == TH && tw == TW && wg == 1 && variant == 0)                \
    return (int)ttball_direct::launch<CIN, COUT, TH, TW>(                                   \
        (half*)out, (const half*)x, (const half*)w, bias, se_sum, B, H, W, relu, has_sum,   \
        pipelined, skip_mma, max_blocks, stream);
#define TTBALL_TILES(CIN, COUT)                                                            \
  TTBALL_TILE(CIN, COUT, 8, 32) TTBALL_TILE(CIN, COUT, 4, 32)                               \
  TTBALL_TILE(CIN, COUT, 16, 16) TTBALL_TILE(CIN, COUT, 8, 16)

// the wgmma kernel's tiles (TH rows x 64 pixels, WG warpgroups; built for sm_90a only, see
// above)
#define TTBALL_WGMMA_TILE(CIN, COUT, TH, WG)                                               \
  if (cin == CIN && cout == COUT && th == TH && tw == 64 && wg == WG && variant == 0)               \
    return (int)ttball_direct::launch_wgmma<CIN, COUT, TH, WG, false>(                      \
        (half*)out, (const half*)x, (const half*)w, bias, se_sum, B, H, W, relu, has_sum,   \
        pipelined, skip_mma, max_blocks, stream);
// the same with the halo copied by TMA
// the wgmma kernel with the pixels as N (TH rows x 128 pixels, WG warpgroups; 64 -> 64 only)
#define TTBALL_WGMMA_N128_TILE(CIN, TH, WG)                                                \
  if (cin == CIN && cout == 64 && th == TH && tw == 128 && wg == WG && variant == 0)                \
    return (int)ttball_direct::launch_wgmma_n128<CIN, TH, WG, false>(                       \
        (half*)out, (const half*)x, (const half*)w, bias, se_sum, B, H, W, relu, has_sum,   \
        pipelined, max_blocks, stream);
// and with its halo copied by TMA (variant 1)
#define TTBALL_WGMMA_N128_TMA_TILE(CIN, TH, WG)                                            \
  if (cin == CIN && cout == 64 && th == TH && tw == 128 && wg == WG && variant == 1)        \
    return (int)ttball_direct::launch_wgmma_n128<CIN, TH, WG, true>(                        \
        (half*)out, (const half*)x, (const half*)w, bias, se_sum, B, H, W, relu, has_sum,   \
        pipelined, max_blocks, stream);
#define TTBALL_WGMMA_TMA_TILE(CIN, COUT, TH, WG)                                           \
  if (cin == CIN && cout == COUT && th == TH && tw == 64 && wg == WG && variant == 1)                \
    return (int)ttball_direct::launch_wgmma<CIN, COUT, TH, WG, true>(                       \
        (half*)out, (const half*)x, (const half*)w, bias, se_sum, B, H, W, relu, has_sum,   \
        pipelined, skip_mma, max_blocks, stream);
// the wgmma kernel with A from registers (variant 2; 16 -> 16 and 32 -> 32)
#define TTBALL_WGMMA_RS_TILE(CIN, COUT, TH, WG)                                            \
  if (cin == CIN && cout == COUT && th == TH && tw == 64 && wg == WG && variant == 2)       \
    return (int)ttball_direct::launch_wgmma_rs<CIN, COUT, TH, WG>(                          \
        (half*)out, (const half*)x, (const half*)w, bias, se_sum, B, H, W, relu, has_sum,   \
        pipelined, max_blocks, stream);
// the tap-partials kernel (variant 3; TH x TW outputs, WG warpgroups; 128 -> 16), and with its
// halo copied by TMA (variant 4)
#define TTBALL_WGMMA_TAPS_TILE(CIN, COUT, TH, TW, WG)                                      \
  if (cin == CIN && cout == COUT && th == TH && tw == TW && wg == WG && variant == 3)       \
    return (int)ttball_direct::launch_wgmma_taps<CIN, COUT, TH, TW, WG, false>(             \
        (half*)out, (const half*)x, (const half*)w, bias, B, H, W, relu, has_sum,           \
        pipelined, max_blocks, stream);
#define TTBALL_WGMMA_TAPS_TMA_TILE(CIN, COUT, TH, TW, WG)                                  \
  if (cin == CIN && cout == COUT && th == TH && tw == TW && wg == WG && variant == 4)       \
    return (int)ttball_direct::launch_wgmma_taps<CIN, COUT, TH, TW, WG, true>(              \
        (half*)out, (const half*)x, (const half*)w, bias, B, H, W, relu, has_sum,           \
        pipelined, max_blocks, stream);
#define TTBALL_WGMMA(CIN, COUT)                                                            \
  TTBALL_WGMMA_TILE(CIN, COUT, 2, 1) TTBALL_WGMMA_TILE(CIN, COUT, 4, 1)                     \
  TTBALL_WGMMA_TILE(CIN, COUT, 8, 1) TTBALL_WGMMA_TILE(CIN, COUT, 4, 2)                     \
  TTBALL_WGMMA_TILE(CIN, COUT, 8, 2)

// 0 on success, a cudaError_t otherwise, -1 for a shape or tile not compiled in. wg: the
// wgmma kernels' warpgroups a block (1 for the other tiles); variant: 0 as tiled, 1 the wgmma
// kernel's halo copied by TMA, 2 its A from registers, 3 the tap-partials kernel, 4 that with
// its halo copied by TMA.
extern "C" int ttball_conv3x3_direct(void* out, const void* x, const void* w, const float* bias,
                                     float* se_sum, int B, int H, int W, int cin, int cout,
                                     int th, int tw, int wg, int variant, int relu, int has_sum,
                                     int pipelined, int skip_mma, int max_blocks,
                                     cudaStream_t stream) {
  TTBALL_TILES(16, 16) TTBALL_TILES(32, 32) TTBALL_TILES(16, 32) TTBALL_TILES(32, 16)
  TTBALL_TILE(128, 16, 8, 16) TTBALL_TILE(128, 16, 8, 32) TTBALL_TILE(128, 16, 16, 16)
  TTBALL_WGMMA(16, 16) TTBALL_WGMMA(32, 32) TTBALL_WGMMA(16, 32) TTBALL_WGMMA(32, 16)
  TTBALL_WGMMA_TILE(16, 16, 16, 2)  // a 1.125x halo at 81 KB of shared memory: 2 blocks an SM
  // 64 -> 64 (the stem's second convolution and the branches' third level): 74 KB of weights,
  // 8 halo planes of 34-68 KB at 2-6 rows; one block an SM; wgmma n64, 4x n16's work for the
  // same A operand read from shared memory
  TTBALL_WGMMA_TILE(64, 64, 4, 1) TTBALL_WGMMA_TILE(64, 64, 2, 1)
  TTBALL_WGMMA_TILE(64, 64, 4, 2) TTBALL_WGMMA_TILE(64, 64, 6, 3)
  // and with the pixels as N: 2 rows with one warpgroup (rows overlapped) or two, 1 row
  TTBALL_WGMMA_N128_TILE(64, 2, 1) TTBALL_WGMMA_N128_TILE(64, 2, 2)
  TTBALL_WGMMA_N128_TILE(64, 1, 1)
  // the same with the TMA halo (forty-second session; offered only with TTBALL_DIRECT_NEXT=1
  // until its GPU tests run), and the TMA halo for the 64 -> 64 tiles with the pixels as M
  TTBALL_WGMMA_N128_TMA_TILE(64, 2, 1) TTBALL_WGMMA_N128_TMA_TILE(64, 2, 2)
  TTBALL_WGMMA_N128_TMA_TILE(64, 1, 1)
  TTBALL_WGMMA_TMA_TILE(64, 64, 4, 2) TTBALL_WGMMA_TMA_TILE(64, 64, 6, 3)
  // the TMA halo for the tiles the tuner chose in the seventeenth session (measured in the
  // eighteenth: taken by three of the network's steps)
  TTBALL_WGMMA_TMA_TILE(16, 16, 16, 2) TTBALL_WGMMA_TMA_TILE(16, 16, 8, 2)
  TTBALL_WGMMA_TMA_TILE(32, 32, 8, 2) TTBALL_WGMMA_TMA_TILE(32, 32, 4, 2)
  // A from registers, each halo row's fragments used by up to three output rows
  TTBALL_WGMMA_RS_TILE(16, 16, 16, 1) TTBALL_WGMMA_RS_TILE(16, 16, 16, 2)
  TTBALL_WGMMA_RS_TILE(16, 16, 8, 1) TTBALL_WGMMA_RS_TILE(16, 16, 8, 2)
  TTBALL_WGMMA_RS_TILE(32, 32, 8, 1) TTBALL_WGMMA_RS_TILE(32, 32, 8, 2)
  TTBALL_WGMMA_RS_TILE(32, 32, 4, 2)
  // the nine taps as one wgmma's N, their partials summed from shared memory (transition1)
  TTBALL_WGMMA_TAPS_TILE(128, 16, 6, 30, 2) TTBALL_WGMMA_TAPS_TMA_TILE(128, 16, 6, 30, 2)
  // and 6 x 14 with one warpgroup: 106 KB, two blocks an SM; 14 x 14 (a 16 x 16 halo, 1.31x
  // the outputs in MMA rows against 6 x 30's 1.42x), one block an SM as 6 x 30
  TTBALL_WGMMA_TAPS_TILE(128, 16, 6, 14, 1) TTBALL_WGMMA_TAPS_TMA_TILE(128, 16, 6, 14, 1)
  TTBALL_WGMMA_TAPS_TILE(128, 16, 14, 14, 2) TTBALL_WGMMA_TAPS_TMA_TILE(128, 16, 14, 14, 2)
  return -1;
}

#define TTBALL_INPUT_TILE(SRC_C, COUT, TH, TW)                                            \
  if (src_c == SRC_C && cout == COUT && th == TH && tw == TW && tma == 0)                   \
    return (int)ttball_direct::launch_input<COUT, TH, TW, SRC_C>(                           \
        (half*)out, (const float*)x, (const half*)w, bias, B, H, W, relu, pipelined,        \
        skip_mma, max_blocks, stream);
// and with its halo staged by TMA (sm_90a; forty-fourth session, not measured yet)
#define TTBALL_INPUT_TMA_TILE(SRC_C, COUT, TH, TW)                                        \
  if (src_c == SRC_C && cout == COUT && th == TH && tw == TW && tma == 1)                   \
    return (int)ttball_direct::launch_input_tma<COUT, TH, TW, SRC_C>(                       \
        (half*)out, (const float*)x, (const half*)w, bias, B, H, W, relu, pipelined,        \
        skip_mma, max_blocks, stream);

// The stem's first convolution from the network's input: x (B, src_c, H, W) FP32, channels
// padded to 16 on chip; w as above with 16 rows per tap. No SE sums. tma: 1 for the halo
// staged by TMA (W a multiple of 4, x 16-byte aligned). Returns as above.
extern "C" int ttball_conv3x3_direct_input(void* out, const void* x, const void* w,
                                           const float* bias, int B, int H, int W, int src_c,
                                           int cout, int th, int tw, int tma, int relu,
                                           int pipelined, int skip_mma, int max_blocks,
                                           cudaStream_t stream) {
  TTBALL_INPUT_TILE(9, 64, 8, 16) TTBALL_INPUT_TILE(9, 64, 4, 32)
  TTBALL_INPUT_TMA_TILE(9, 64, 8, 16) TTBALL_INPUT_TMA_TILE(9, 64, 4, 32)
  return -1;
}

#define TTBALL_PAIR(C, TH, TW)                                                             \
  if (c == C && th == TH && tw == TW)                                                       \
    return (int)ttball_direct::launch_pair<C, TH, TW>(                                      \
        (half*)out, (const half*)x, (const half*)w1, bias1, (const half*)w2, bias2, se_sum, \
        B, H, W, relu, has_sum, pipelined, skip_mma, max_blocks, stream);

// The residual block's two convolutions (conv3x3_pair_kernel); returns as above.
extern "C" int ttball_conv3x3_pair(void* out, const void* x, const void* w1,
                                   const float* bias1, const void* w2, const float* bias2,
                                   float* se_sum, int B, int H, int W, int c, int th, int tw,
                                   int relu, int has_sum, int pipelined, int skip_mma,
                                   int max_blocks, cudaStream_t stream) {
  TTBALL_PAIR(16, 8, 32) TTBALL_PAIR(16, 8, 64) TTBALL_PAIR(32, 8, 32) TTBALL_PAIR(32, 8, 16)
  return -1;
}

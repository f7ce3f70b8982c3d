// Probe for a wgmma direct convolution (issue 9; fifteenth session): can Hopper's
// warpgroup MMA read a convolution tap's operand straight from a shared-memory halo at a
// one-pixel offset, and how fast is its tensor-core side for 32 -> 32 channels?
//
// The direct kernel (ttball/kernels/direct.cu) loads every tap's A fragment with ldmatrix
// and runs mma.sync; Nsight Compute and three experiments of the fifteenth session put it at
// 42 % of the tensor pipe, insensitive to 8-24 warps an SM and to 25 % fewer shared-memory
// bytes per MMA. wgmma reads A and B from shared memory through descriptors. In NHWC a
// pixel's 32 channels are 64 bytes, and wgmma's core matrices (8 rows x 16 bytes) need
// 16-byte rows 16 bytes apart without a swizzle. Stored channel-group-major instead (per 8
// channels: every halo pixel's 16 bytes), 8 consecutive pixels x 8 channels are one
// contiguous core matrix, and a tap's one-pixel shift is a 16-byte offset of the
// descriptor's start address.
//
// 1. Correctness: out[m][n] = sum_{s<3} sum_{c<32} x[m + s][c] * w[s][c][n] for m < 64 (a
//    1 x 3 convolution along a row, the shifted operand of a 3 x 3 one), as 6 wgmma
//    m64n32k16 (3 shifts x 2 K steps), with the K direction's core-matrix offset in the
//    descriptor's "leading" field and the M/N direction's in "stride" (with any argument,
//    also the other way round, which faults); the maximum error against the host's float
//    sum is printed.
// 2. Throughput of the tensor-core side alone: blocks of one or two warpgroups, each
//    repeating a 3 x 3 tap loop (18 wgmma m64n32k16 per 64 output pixels) over a halo in
//    shared memory, the accumulators waited for once per 64 pixels; ns per 64 pixels per SM,
//    against the direct kernel's measured all-in 606 ns (step 3 at batch 64: 678 us for
//    9.44 M pixels on 132 SMs).
//
// Build and run (sm_90a: wgmma needs the architecture-specific target):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a scripts/probe_wgmma.cu \
//     -o /tmp/probe_wgmma && /tmp/probe_wgmma

#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../ttball/kernels/direct.cu"

#define CHECK(call)                                                             \
  do {                                                                          \
    cudaError_t e = (call);                                                     \
    if (e != cudaSuccess) {                                                     \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, \
                  __LINE__);                                                    \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

constexpr int C = 32, N = 32, HP = 80;  // channels in and out; halo pixels of the probe row
constexpr int PLANE = HP * 16;           // bytes of one 8-channel group's plane

// the kernel library's wgmma helpers, so that the probe checks the descriptors and
// instructions the kernel uses (the run recorded in docs/benchmarks/h200-2026-12-01g/probe/
// was of afab1d1, whose probe had its own copies of them)
using ttball_direct::fence_async_shared;
using ttball_direct::wgmma_commit_and_wait;
using ttball_direct::wgmma_descriptor;
using ttball_direct::wgmma_fence;

// x: HP x C (pixel-major, as NHWC); w: 3 x C x N; out: 64 x N. One warpgroup.
// swap: the K-direction offset in the descriptor's "stride" field instead of "leading".
__global__ void probe_kernel(const half* x, const half* w, float* out, int swap) {
  __shared__ __align__(128) half xs[C / 8][HP][8];    // channel-group-major halo
  __shared__ __align__(128) half ws[3][C / 8][N][8];  // per shift and k group: n rows of 8 k
  for (int i = threadIdx.x; i < HP * C; i += blockDim.x) {
    const int p = i / C, c = i % C;
    xs[c / 8][p][c % 8] = x[i];
  }
  for (int i = threadIdx.x; i < 3 * C * N; i += blockDim.x) {
    const int s = i / (C * N), c = (i / N) % C, n = i % N;
    ws[s][c / 8][n][c % 8] = w[i];
  }
  fence_async_shared();
  __syncthreads();
  float d[N / 8][4] = {};
  wgmma_fence();
  for (int s = 0; s < 3; ++s)
    for (int k = 0; k < C / 16; ++k) {
      // A: 64 pixels from halo pixel s, channels 16k..16k+15: K-direction core matrices one
      // plane apart, M-direction ones 128 bytes apart. B: n rows of 16-byte k chunks, the
      // K-direction ones N * 16 bytes apart, N-direction ones 128.
      const uint64_t a = swap ? wgmma_descriptor(&xs[2 * k][s][0], 128, PLANE)
                              : wgmma_descriptor(&xs[2 * k][s][0], PLANE, 128);
      const uint64_t b = swap ? wgmma_descriptor(&ws[s][2 * k][0][0], 128, N * 16)
                              : wgmma_descriptor(&ws[s][2 * k][0][0], N * 16, 128);
      ttball_direct::wgmma_64<N>(d, a, b, s + k > 0);
    }
  wgmma_commit_and_wait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  for (int n = 0; n < N / 8; ++n)
    for (int e = 0; e < 4; ++e)
      out[(warp * 16 + g + 8 * (e / 2)) * N + n * 8 + 2 * q + e % 2] = d[n][e];
}

// The tensor-core side of a 3 x 3 convolution, 32 -> 32: each warpgroup of the block repeats
// 64-pixel groups, 9 taps x 2 K steps each, over a halo of 3 rows of HALO_W pixels, and
// waits for its accumulators once a group. sink keeps the result live.
constexpr int HALO_W = 66, ROWS = 3, TPLANE = ROWS * HALO_W * 16;
__global__ void __launch_bounds__(256) throughput_kernel(float* sink, int groups) {
  __shared__ __align__(128) half xs[C / 8][ROWS * HALO_W][8];
  __shared__ __align__(128) half ws[9][C / 8][N][8];
  for (int i = threadIdx.x; i < C / 8 * ROWS * HALO_W * 8; i += blockDim.x)
    (&xs[0][0][0])[i] = __float2half(0.01f * (i % 7));
  for (int i = threadIdx.x; i < 9 * C / 8 * N * 8; i += blockDim.x)
    (&ws[0][0][0][0])[i] = __float2half(0.01f * (i % 5));
  fence_async_shared();
  __syncthreads();
  float d[N / 8][4] = {};
  float total = 0.f;
  for (int it = 0; it < groups; ++it) {
    wgmma_fence();
#pragma unroll
    for (int tap = 0; tap < 9; ++tap)
#pragma unroll
      for (int k = 0; k < C / 16; ++k) {
        const int start = (tap / 3) * HALO_W + tap % 3;
        ttball_direct::wgmma_64<N>(d, wgmma_descriptor(&xs[2 * k][start][0], TPLANE, 128),
                                   wgmma_descriptor(&ws[tap][2 * k][0][0], N * 16, 128),
                                   tap + k > 0);
      }
    wgmma_commit_and_wait();
    total += d[0][0];
  }
  if (total == 12345.f) sink[threadIdx.x] = total;
}

int main(int argc, char**) {
  std::vector<half> x(HP * C), w(3 * C * N);
  std::vector<float> xf(HP * C), wf(3 * C * N);
  for (int i = 0; i < HP * C; ++i) {
    xf[i] = __half2float(__float2half(std::sin(0.37f * i) * 0.5f));
    x[i] = __float2half(xf[i]);
  }
  for (int i = 0; i < 3 * C * N; ++i) {
    wf[i] = __half2float(__float2half(std::cos(0.11f * i) * 0.25f));
    w[i] = __float2half(wf[i]);
  }
  std::vector<float> want(64 * N, 0.f);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n)
      for (int s = 0; s < 3; ++s)
        for (int c = 0; c < C; ++c)
          want[m * N + n] += xf[(m + s) * C + c] * wf[(s * C + c) * N + n];
  half *dx, *dw;
  float *dout, *sink;
  CHECK(cudaMalloc(&dx, x.size() * 2));
  CHECK(cudaMalloc(&dw, w.size() * 2));
  CHECK(cudaMalloc(&dout, 64 * N * 4));
  CHECK(cudaMalloc(&sink, 1024 * 4));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  // the other reading of the offsets (K direction in "stride") is tried only with an
  // argument: it reads outside shared memory (an illegal address that ends the process, as
  // on an H200 in the fifteenth session), so the correct one comes first
  for (int swap = 0; swap < (argc > 1 ? 2 : 1); ++swap) {
    CHECK(cudaMemset(dout, 0, 64 * N * 4));
    probe_kernel<<<1, 128>>>(dx, dw, dout, swap);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> got(64 * N);
    CHECK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
    double err = 0, scale = 0;
    for (int i = 0; i < 64 * N; ++i) {
      err = std::fmax(err, std::fabs(got[i] - want[i]));
      scale = std::fmax(scale, std::fabs(want[i]));
    }
    std::printf("correctness %s: max abs error %.3g (max |out| %.3g) -> %s\n",
                swap ? "K offset in 'stride'" : "K offset in 'leading'", err, scale,
                err < 2e-2 * scale ? "OK" : "WRONG");
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  const int groups = 4096;
  for (int threads : {128, 256})
    for (int per_sm : {1, 2, 3}) {
      const int blocks = sms * per_sm;
      throughput_kernel<<<blocks, threads>>>(sink, 16);  // warm-up
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(t0));
      throughput_kernel<<<blocks, threads>>>(sink, groups);
      CHECK(cudaEventRecord(t1));
      CHECK(cudaEventSynchronize(t1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, t0, t1));
      const double groups_per_sm = (double)groups * per_sm * (threads / 128);
      const double tflops = groups_per_sm * sms * 18.0 * 64 * 32 * 16 * 2 / (ms * 1e-3) / 1e12;
      std::printf("throughput: %d threads a block, %d blocks an SM: %.1f ns per 64 pixels "
                  "per SM (%.0f TFLOP/s)\n",
                  threads, per_sm, ms * 1e6 / groups_per_sm, tflops);
    }
  return 0;
}

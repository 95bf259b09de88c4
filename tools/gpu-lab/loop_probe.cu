// Lab probe (issue 19, 16-64 MiB): which data-loop shape reaches a lone
// copy's bandwidth. The 2-rank two-shot all-reduce's data movement in its
// fused form (o0[i] = o1[i] = a[i] + b[i], float32: traffic 4S for S bytes a
// buffer) and the all-gather's copy (o[i] = a[i]: 2S), in loop variants, next
// to cudaMemcpyAsync of the same traffic. No barriers, no protocol: the loop
// alone. make_gpu_bundle.sh builds it into bin/ where nvcc is installed.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "probe_check.h"

constexpr int kThreads = 512;

__device__ __forceinline__ float4 Add(float4 x, float4 y) { return {x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w}; }

template <int kLoad>
__device__ __forceinline__ float4 Ld(const float4* p) {
  if constexpr (kLoad == 0) return *p;
  if constexpr (kLoad == 1) return __ldcs(p);  // evict-first
  if constexpr (kLoad == 2) return __ldg(p);   // read-only path
  return __ldlu(p);                            // last use
}
template <int kStore>
__device__ __forceinline__ void St(float4* p, float4 v) {
  if constexpr (kStore == 0) *p = v;
  if constexpr (kStore == 1) __stcs(p, v);
  if constexpr (kStore == 2) __stwt(p, v);
}

// Grid-stride, kU packs of each input in flight (the shape of ReduceRange).
template <int kU, int kLoad, int kStore>
__global__ void __launch_bounds__(kThreads, 2)
    ReduceGrid(const float4* a, const float4* b, float4* o0, float4* o1, size_t packs, size_t first, size_t last) {
  const size_t tid = first + size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t n = size_t(gridDim.x) * blockDim.x;
  size_t p = tid;
  for (; p + (kU - 1) * n < last; p += n * kU) {
    float4 x[kU], y[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) x[u] = Ld<kLoad>(a + p + u * n);
#pragma unroll
    for (int u = 0; u < kU; ++u) y[u] = Ld<kLoad>(b + p + u * n);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const float4 s = Add(x[u], y[u]);
      St<kStore>(o0 + p + u * n, s);
      St<kStore>(o1 + p + u * n, s);
    }
  }
  for (; p < last; p += n) {
    const float4 s = Add(a[p], b[p]);
    o0[p] = s;
    o1[p] = s;
  }
  (void)packs;
}

// Tiled: each block takes whole tiles of kThreads * kU contiguous packs.
template <int kU, int kLoad, int kStore>
__global__ void __launch_bounds__(kThreads, 2)
    ReduceTiled(const float4* a, const float4* b, float4* o0, float4* o1, size_t packs, size_t first, size_t last) {
  constexpr size_t kTile = size_t(kThreads) * kU;
  for (size_t t = first + blockIdx.x * kTile; t < last; t += gridDim.x * kTile) {
    float4 x[kU], y[kU];
    if (t + kTile <= last) {
#pragma unroll
      for (int u = 0; u < kU; ++u) x[u] = Ld<kLoad>(a + t + u * kThreads + threadIdx.x);
#pragma unroll
      for (int u = 0; u < kU; ++u) y[u] = Ld<kLoad>(b + t + u * kThreads + threadIdx.x);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const float4 s = Add(x[u], y[u]);
        St<kStore>(o0 + t + u * kThreads + threadIdx.x, s);
        St<kStore>(o1 + t + u * kThreads + threadIdx.x, s);
      }
    } else {
      for (size_t p = t + threadIdx.x; p < last; p += kThreads) {
        const float4 s = Add(a[p], b[p]);
        o0[p] = s;
        o1[p] = s;
      }
    }
  }
  (void)packs;
}

// Copy, grid-stride with kU packs in flight (BroadcastPacks' shape).
template <int kU, int kLoad, int kStore>
__global__ void __launch_bounds__(kThreads, 2) CopyGrid(const float4* a, float4* o, size_t packs) {
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t n = size_t(gridDim.x) * blockDim.x;
  size_t p = tid;
  for (; p + (kU - 1) * n < packs; p += n * kU) {
    float4 x[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) x[u] = Ld<kLoad>(a + p + u * n);
#pragma unroll
    for (int u = 0; u < kU; ++u) St<kStore>(o + p + u * n, x[u]);
  }
  for (; p < packs; p += n) o[p] = a[p];
}

template <int kU, int kLoad, int kStore>
__global__ void __launch_bounds__(kThreads, 2) CopyTiled(const float4* a, float4* o, size_t packs) {
  constexpr size_t kTile = size_t(kThreads) * kU;
  for (size_t t = blockIdx.x * kTile; t < packs; t += gridDim.x * kTile) {
    if (t + kTile <= packs) {
      float4 x[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) x[u] = Ld<kLoad>(a + t + u * kThreads + threadIdx.x);
#pragma unroll
      for (int u = 0; u < kU; ++u) St<kStore>(o + t + u * kThreads + threadIdx.x, x[u]);
    } else {
      for (size_t p = t + threadIdx.x; p < packs; p += kThreads) o[p] = a[p];
    }
  }
}

int main(int argc, char** argv) {
  const int iters = 20, warm = 3;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s[2];
  for (auto& x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, j;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreate(&j));
  std::vector<size_t> sizes = {16u << 20, 32u << 20, 64u << 20, 256u << 20};
  if (argc > 1) sizes = {size_t(std::atoll(argv[1])) << 20};
  const size_t max = sizes.back();
  float *a, *b, *o0, *o1;
  CK(cudaMalloc(&a, max));
  CK(cudaMalloc(&b, max));
  CK(cudaMalloc(&o0, max));
  CK(cudaMalloc(&o1, max));
  CK(cudaMemset(a, 0x3c, max));
  CK(cudaMemset(b, 0x3d, max));
  // Times `run` (enqueues one op on the streams it likes, given s[0] is
  // where the timing events go), us per op.
  auto time = [&](const std::function<void()>& run) {
    for (int i = 0; i < warm; ++i) run();
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(e0, s[0]));
    CK(cudaStreamWaitEvent(s[1], e0));
    for (int i = 0; i < iters; ++i) run();
    CK(cudaEventRecord(j, s[1]));
    CK(cudaStreamWaitEvent(s[0], j));
    CK(cudaEventRecord(e1, s[0]));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1000.0 / iters;
  };
  std::printf("# %d SMs, %d threads a block; us per op, GB/s of traffic, %% of a cudaMemcpyAsync of the same traffic\n",
              sms, kThreads);
  for (size_t S : sizes) {
    const size_t packs = S / 16;
    auto A = reinterpret_cast<const float4*>(a);
    auto B = reinterpret_cast<const float4*>(b);
    auto O0 = reinterpret_cast<float4*>(o0);
    auto O1 = reinterpret_cast<float4*>(o1);
    // Reduce: traffic 4S; its yardstick a copy of 2S bytes. Copy: 2S; a copy of S.
    const double memcpy_r = time([&] { CK(cudaMemcpyAsync(o0, a, 2 * S <= max ? 2 * S : S, cudaMemcpyDeviceToDevice, s[0])); });
    const bool r_exact = 2 * S <= max;
    const double memcpy_c = time([&] { CK(cudaMemcpyAsync(o0, a, S, cudaMemcpyDeviceToDevice, s[0])); });
    std::printf("## %zu MiB a buffer: memcpy %zu MiB %.2f us (%.0f GB/s), memcpy %zu MiB %.2f us (%.0f GB/s)\n", S >> 20,
                (r_exact ? 2 * S : S) >> 20, memcpy_r, (r_exact ? 4.0 : 2.0) * S / memcpy_r / 1e3, S >> 20, memcpy_c,
                2.0 * S / memcpy_c / 1e3);
    auto row = [&](const char* name, bool reduce, const std::function<void()>& run) {
      const double us = time(run);
      const double traffic = (reduce ? 4.0 : 2.0) * S;
      const double ref = reduce ? (r_exact ? memcpy_r : 2 * memcpy_r) : memcpy_c;
      std::printf("%-44s %9.2f us %7.0f GB/s %6.1f %%\n", name, us, traffic / us / 1e3, 100.0 * ref / us);
    };
    const int g1 = sms, g2 = 2 * sms;
#define RED(K, U, L, St_, G) \
  row(#K "<" #U "," #L "," #St_ "> grid " #G, true, [&] { K<U, L, St_><<<G, kThreads, 0, s[0]>>>(A, B, O0, O1, packs, 0, packs); })
    RED(ReduceGrid, 4, 0, 0, g1);
    RED(ReduceGrid, 4, 0, 0, g2);
    RED(ReduceGrid, 8, 0, 0, g1);
    RED(ReduceGrid, 4, 1, 0, g1);
    RED(ReduceGrid, 4, 2, 0, g1);
    RED(ReduceGrid, 4, 0, 1, g1);
    RED(ReduceGrid, 4, 1, 1, g1);
    RED(ReduceTiled, 4, 0, 0, g1);
    RED(ReduceTiled, 4, 0, 0, g2);
    RED(ReduceTiled, 8, 0, 0, g1);
    RED(ReduceTiled, 4, 1, 1, g1);
    RED(ReduceTiled, 8, 1, 0, g1);
    RED(ReduceTiled, 2, 0, 0, g2);
    // The per-rank split of two-shot: two kernels on two streams, half the
    // SMs and half the packs each (no barriers).
    row("ReduceGrid<4,0,0> split over 2 streams", true, [&] {
      ReduceGrid<4, 0, 0><<<g1 / 2, kThreads, 0, s[0]>>>(A, B, O0, O1, packs, 0, packs / 2);
      ReduceGrid<4, 0, 0><<<g1 / 2, kThreads, 0, s[1]>>>(A, B, O0, O1, packs, packs / 2, packs);
    });
    row("ReduceTiled<4,0,0> split over 2 streams", true, [&] {
      ReduceTiled<4, 0, 0><<<g1 / 2, kThreads, 0, s[0]>>>(A, B, O0, O1, packs, 0, packs / 2);
      ReduceTiled<4, 0, 0><<<g1 / 2, kThreads, 0, s[1]>>>(A, B, O0, O1, packs, packs / 2, packs);
    });
#define CP(K, U, L, St_, G) \
  row(#K "<" #U "," #L "," #St_ "> grid " #G, false, [&] { K<U, L, St_><<<G, kThreads, 0, s[0]>>>(A, O0, packs); })
    CP(CopyGrid, 8, 0, 1, g1);  // BroadcastPacks today
    CP(CopyGrid, 8, 0, 0, g1);
    CP(CopyGrid, 4, 0, 0, g1);
    CP(CopyGrid, 8, 0, 1, g2);
    CP(CopyGrid, 8, 1, 1, g1);
    CP(CopyTiled, 8, 0, 1, g1);
    CP(CopyTiled, 8, 0, 0, g1);
    CP(CopyTiled, 4, 0, 0, g2);
    CP(CopyTiled, 8, 1, 1, g1);
    CP(CopyTiled, 16, 0, 0, g1);
  }
  return 0;
}

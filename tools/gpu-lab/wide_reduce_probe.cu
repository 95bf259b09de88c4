// Lab probe (issue 19, the 8-rank all-reduce at 16 MiB): which data-loop
// shape carries the two-shot push's traffic at n ranks on one GPU fastest.
// Rank r's blocks reduce chunk r of n inputs and store it into all n
// outputs (float32 sum), as TwoShotPushKernel does, without barriers or the
// op protocol; one launch holds every rank's blocks (blocks / rank as the
// product's residency rule gives: SMs / n). Beside it, in the same run, a
// cudaMemcpyAsync of the same traffic (n * S bytes copied: 2nS of traffic),
// the yardstick issue 19's 90 % refers to. Every variant's outputs are
// poisoned before and checked after (inputs of known sum).
//   wide_reduce_probe [ranks...]   (default 8 4; buffers 16 and 64 MiB)
#include <cuda_runtime.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <vector>

#include "probe_check.h"

constexpr int kMaxRanks = 8;

struct Bufs {
  const float4* in[kMaxRanks];
  float4* out[kMaxRanks];
  int n;
  size_t chunk;  // packs a rank
  int blocks;    // a rank
};

__device__ __forceinline__ float4 Add(float4 x, float4 y) { return {x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w}; }

// kLd: 0 plain, 1 evict-first (the product's streaming loads), 2 evict-first
// with a 256-byte L2 prefetch. kSt: 0 plain, 1 evict-first.
template <int kLd>
__device__ __forceinline__ float4 Ld(const float4* p) {
  if constexpr (kLd == 0) return *p;
  if constexpr (kLd == 1) return __ldcs(p);
  float4 v;
  asm volatile("ld.global.cs.L2::256B.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}
template <int kSt>
__device__ __forceinline__ void St(float4* p, float4 v) {
  if constexpr (kSt == 0) *p = v;
  if constexpr (kSt == 1) __stcs(p, v);
}

struct Span {
  size_t first, last, tid, nt;
};
__device__ __forceinline__ Span RankSpan(const Bufs& b) {
  const int rank = blockIdx.x / b.blocks, bid = blockIdx.x % b.blocks;
  const size_t first = size_t(rank) * b.chunk;
  return {first, first + b.chunk, first + size_t(bid) * blockDim.x + threadIdx.x, size_t(b.blocks) * blockDim.x};
}

__device__ __forceinline__ float4 ReduceOne(const Bufs& b, size_t p) {
  float4 s = b.in[0][p];
  for (int k = 1; k < b.n; ++k) s = Add(s, b.in[k][p]);
  return s;
}

// The product's shape (ReduceRange): kU packs of inputs 0 and 1 in flight,
// then inputs 2..n-1 one at a time, kU packs each.
template <int kU, int kLd, int kSt>
__device__ __forceinline__ void CurBody(const Bufs& b) {
  const Span s = RankSpan(b);
  size_t p = s.tid;
  for (; p + (kU - 1) * s.nt < s.last; p += s.nt * kU) {
    float4 acc[kU];
    {
      float4 x[kU], y[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) x[u] = Ld<kLd>(b.in[0] + p + u * s.nt);
#pragma unroll
      for (int u = 0; u < kU; ++u) y[u] = Ld<kLd>(b.in[1] + p + u * s.nt);
#pragma unroll
      for (int u = 0; u < kU; ++u) acc[u] = Add(x[u], y[u]);
    }
#pragma unroll 1
    for (int k = 2; k < b.n; ++k) {
      float4 x[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) x[u] = Ld<kLd>(b.in[k] + p + u * s.nt);
#pragma unroll
      for (int u = 0; u < kU; ++u) acc[u] = Add(acc[u], x[u]);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      for (int k = 0; k < b.n; ++k) St<kSt>(b.out[k] + p + u * s.nt, acc[u]);
    }
  }
  for (; p < s.last; p += s.nt) {
    const float4 v = ReduceOne(b, p);
    for (int k = 0; k < b.n; ++k) b.out[k][p] = v;
  }
}
template <int kU, int kLd, int kSt>
__global__ void __launch_bounds__(512, 2) Cur(Bufs b) {
  CurBody<kU, kLd, kSt>(b);
}
// The product's shape with each block's first and last instant (globaltimer)
// in stamps[2 * block]: how far apart blocks of one launch finish, the time
// an end barrier waits on the slowest.
__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void __launch_bounds__(512, 2) CurStamped(Bufs b, unsigned long long* stamps) {
  __syncthreads();
  if (threadIdx.x == 0) stamps[2 * blockIdx.x] = Now();
  CurBody<4, 1, 1>(b);
  __syncthreads();
  if (threadIdx.x == 0) stamps[2 * blockIdx.x + 1] = Now();
}
// Work claimed from a counter every block shares: any block may reduce any
// pack (a pack's sum has the same order whoever computes it), so blocks on
// faster SMs take more and all end together. A unit is kU packs a thread of
// a warp (kWarp) or of the block; the next claim is in flight during a unit.
// kAllIn: all N inputs' packs loaded at once; else the product's shape.
template <int N, int kU, bool kAllIn>
__device__ __forceinline__ void DoUnit(const Bufs& b, size_t p0, unsigned stride, size_t total) {
  if (p0 + (kU - 1) * stride < total) {
    float4 acc[kU];
    if constexpr (kAllIn) {
      float4 x[N][kU];
#pragma unroll
      for (int k = 0; k < N; ++k) {
#pragma unroll
        for (int u = 0; u < kU; ++u) x[k][u] = __ldcs(b.in[k] + p0 + u * stride);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        acc[u] = x[0][u];
#pragma unroll
        for (int k = 1; k < N; ++k) acc[u] = Add(acc[u], x[k][u]);
      }
    } else {
      {
        float4 x[kU], y[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) x[u] = __ldcs(b.in[0] + p0 + u * stride);
#pragma unroll
        for (int u = 0; u < kU; ++u) y[u] = __ldcs(b.in[1] + p0 + u * stride);
#pragma unroll
        for (int u = 0; u < kU; ++u) acc[u] = Add(x[u], y[u]);
      }
#pragma unroll 1
      for (int k = 2; k < N; ++k) {
        float4 x[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) x[u] = __ldcs(b.in[k] + p0 + u * stride);
#pragma unroll
        for (int u = 0; u < kU; ++u) acc[u] = Add(acc[u], x[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#pragma unroll
      for (int k = 0; k < N; ++k) __stcs(b.out[k] + p0 + u * stride, acc[u]);
    }
  } else {
    for (int u = 0; u < kU; ++u) {
      const size_t p = p0 + u * stride;
      if (p < total) {
        const float4 v = ReduceOne(b, p);
        for (int k = 0; k < N; ++k) b.out[k][p] = v;
      }
    }
  }
}
template <int N, int kU, bool kAllIn, bool kWarp>
__global__ void __launch_bounds__(512, 2) Dyn(Bufs b, unsigned* ctr, unsigned long long* stamps) {
  __syncthreads();
  if (threadIdx.x == 0) stamps[2 * blockIdx.x] = Now();
  const size_t total = size_t(b.n) * b.chunk;
  const unsigned width = kWarp ? 32u : blockDim.x;
  const size_t unit = size_t(width) * kU;
  const size_t units = (total + unit - 1) / unit;
  if constexpr (kWarp) {
    const unsigned lane = threadIdx.x % 32;
    unsigned u = 0;
    if (lane == 0) u = atomicAdd(ctr, 1u);
    u = __shfl_sync(~0u, u, 0);
    while (u < units) {
      unsigned next = 0;
      if (lane == 0) next = atomicAdd(ctr, 1u);
      DoUnit<N, kU, kAllIn>(b, u * unit + lane, width, total);
      u = __shfl_sync(~0u, next, 0);
    }
  } else {
    __shared__ unsigned slot[2];
    if (threadIdx.x == 0) slot[0] = atomicAdd(ctr, 1u);
    __syncthreads();
    int i = 0;
    unsigned u = slot[0];
    while (u < units) {
      unsigned next = 0;
      if (threadIdx.x == 0) next = atomicAdd(ctr, 1u);
      DoUnit<N, kU, kAllIn>(b, u * unit + threadIdx.x, width, total);
      if (threadIdx.x == 0) slot[i ^ 1] = next;
      __syncthreads();
      i ^= 1;
      u = slot[i];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) stamps[2 * blockIdx.x + 1] = Now();
}
template <int kU, int kLd, int kSt>
__global__ void __launch_bounds__(1024, 1) Cur1024(Bufs b) {
  CurBody<kU, kLd, kSt>(b);
}

// Every input's kU packs in flight at once (N inputs, known at compile time).
template <int N, int kU, int kLd, int kSt>
__device__ __forceinline__ void AllInBody(const Bufs& b) {
  const Span s = RankSpan(b);
  size_t p = s.tid;
  for (; p + (kU - 1) * s.nt < s.last; p += s.nt * kU) {
    float4 x[N][kU];
#pragma unroll
    for (int k = 0; k < N; ++k) {
#pragma unroll
      for (int u = 0; u < kU; ++u) x[k][u] = Ld<kLd>(b.in[k] + p + u * s.nt);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float4 acc = x[0][u];
#pragma unroll
      for (int k = 1; k < N; ++k) acc = Add(acc, x[k][u]);
#pragma unroll
      for (int k = 0; k < N; ++k) St<kSt>(b.out[k] + p + u * s.nt, acc);
    }
  }
  for (; p < s.last; p += s.nt) {
    const float4 v = ReduceOne(b, p);
    for (int k = 0; k < N; ++k) b.out[k][p] = v;
  }
}
template <int N, int kU, int kLd, int kSt>
__global__ void __launch_bounds__(512, 2) AllIn(Bufs b) {
  AllInBody<N, kU, kLd, kSt>(b);
}
template <int N, int kU, int kLd, int kSt>
__global__ void __launch_bounds__(512, 1) AllInWide(Bufs b) {
  AllInBody<N, kU, kLd, kSt>(b);
}

// Inputs staged through shared memory with cp.async (no registers held while
// in flight): kStages groups of one pack of every input a thread, kStages - 1
// of them in flight while the oldest is reduced. Each thread reads back only
// what it copied itself, so cp.async.wait_group is the only wait.
__device__ __forceinline__ void CpAsync16(void* smem, const void* g) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g) : "memory");
}
__device__ __forceinline__ void CpCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kLeft>
__device__ __forceinline__ void CpWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kLeft) : "memory");
}

template <int N, int kStages, int kSt>
__global__ void __launch_bounds__(512, 1) Staged(Bufs b) {
  extern __shared__ float4 sm[];  // [kStages][N][blockDim]
  const Span s = RankSpan(b);
  const size_t iters = s.tid < s.last ? (s.last - s.tid + s.nt - 1) / s.nt : 0;
  auto slot = [&](size_t i, int k) { return sm + ((i % kStages) * N + k) * blockDim.x + threadIdx.x; };
  auto issue = [&](size_t i) {
    if (i < iters) {
#pragma unroll
      for (int k = 0; k < N; ++k) CpAsync16(slot(i, k), b.in[k] + s.tid + i * s.nt);
    }
    CpCommit();  // empty past the end: keeps the group count fixed
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i);
  for (size_t i = 0; i < iters; ++i) {
    issue(i + kStages - 1);
    CpWait<kStages - 1>();
    float4 acc = *slot(i, 0);
#pragma unroll
    for (int k = 1; k < N; ++k) acc = Add(acc, *slot(i, k));
    const size_t p = s.tid + i * s.nt;
#pragma unroll
    for (int k = 0; k < N; ++k) St<kSt>(b.out[k] + p, acc);
  }
  CpWait<0>();
}

__global__ void Fill(float* p, size_t n, float base) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = base + float(i % 7);
  }
}
// Counts elements of out that differ from the exact sum of n inputs.
__global__ void Check(const float* out, size_t n_elems, int n, unsigned long long* bad) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_elems; i += size_t(gridDim.x) * blockDim.x) {
    float want = 0;
    for (int k = 0; k < n; ++k) want += float(k + 1) + float(i % 7);
    if (out[i] != want) atomicAdd(bad, 1ull);
  }
}

int main(int argc, char** argv) {
  std::vector<int> ranks_list = {8, 4};
  if (argc > 1) {
    ranks_list.clear();
    for (int i = 1; i < argc; ++i) ranks_list.push_back(std::atoi(argv[i]));
  }
  const std::vector<size_t> sizes = {16u << 20, 64u << 20};
  const int iters = 20, warm = 3;
  int sms = 0, smem_optin = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const size_t max = sizes.back();
  float *in_all, *out_all;
  CK(cudaMalloc(&in_all, kMaxRanks * max));
  CK(cudaMalloc(&out_all, kMaxRanks * max));
  unsigned long long* bad;
  CK(cudaMalloc(&bad, sizeof(*bad)));
  auto time = [&](const std::function<void()>& run) {
    for (int i = 0; i < warm; ++i) run();
    CK(cudaStreamSynchronize(st));
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < iters; ++i) run();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1000.0 / iters;
  };
  std::printf("# %d SMs; us per op (20 back to back, 3 warm), GB/s of traffic, %% of a cudaMemcpyAsync of the same traffic; "
              "bad = elements of any output not the exact sum\n",
              sms);
  for (int n : ranks_list) {
    if (n < 2 || n > kMaxRanks) {
      std::fprintf(stderr, "ranks %d: 2..%d\n", n, kMaxRanks);
      return 2;
    }
    const int blocks = sms / n;  // the product's residency rule: one block a rank an SM
    for (size_t S : sizes) {
      const size_t packs = S / 16, elems = S / 4;
      Bufs b{};
      b.n = n;
      b.blocks = blocks;
      b.chunk = packs / n;
      for (int k = 0; k < n; ++k) {
        b.in[k] = reinterpret_cast<const float4*>(in_all) + k * packs;
        b.out[k] = reinterpret_cast<float4*>(out_all) + k * packs;
        Fill<<<sms * 4, 256, 0, st>>>(in_all + k * elems, elems, float(k + 1));
      }
      CK(cudaStreamSynchronize(st));
      const double copy = time([&] { CK(cudaMemcpyAsync(out_all, in_all, n * S, cudaMemcpyDeviceToDevice, st)); });
      const double traffic = 2.0 * n * S;
      std::printf("## %d ranks, %zu MiB a buffer, %d blocks a rank: memcpy of %zu MiB %.2f us (%.0f GB/s)\n", n, S >> 20,
                  blocks, (n * S) >> 20, copy, traffic / copy / 1e3);
      auto row = [&](const char* name, int threads, size_t smem, const std::function<void(int, size_t)>& launch) {
        CK(cudaMemsetAsync(out_all, 0xff, n * S, st));  // poison: NaN
        const double us = time([&] { launch(threads, smem); });
        CK(cudaMemsetAsync(bad, 0, sizeof(*bad), st));
        for (int k = 0; k < n; ++k) Check<<<sms * 4, 256, 0, st>>>(out_all + k * elems, elems, n, bad);
        unsigned long long h = 0;
        CK(cudaMemcpyAsync(&h, bad, sizeof(h), cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        std::printf("%-40s %9.2f us %7.0f GB/s %6.1f %%  bad %llu\n", name, us, traffic / us / 1e3, 100.0 * copy / us, h);
      };
      const int g = blocks * n;
#define ROW(NAME, T, SMEM, ...) \
  row(NAME, T, SMEM, [&](int t, size_t sm) { __VA_ARGS__<<<g, t, sm, st>>>(b); })
      ROW("cur<4,cs,cs> (the product)", 512, 0, Cur<4, 1, 1>);
      ROW("cur<4,plain,cs>", 512, 0, Cur<4, 0, 1>);
      ROW("cur<4,cs+L2::256B,cs>", 512, 0, Cur<4, 2, 1>);
      ROW("cur<4,cs,plain>", 512, 0, Cur<4, 1, 0>);
      ROW("cur<2,cs,cs>", 512, 0, Cur<2, 1, 1>);
      ROW("cur1024<4,cs,cs>", 1024, 0, Cur1024<4, 1, 1>);
      // Two blocks of 512 a rank an SM (past the product's residency rule).
      row("cur<4,cs,cs> x2 blocks", 512, 0, [&](int t, size_t) {
        Bufs b2 = b;
        b2.blocks = 2 * blocks;
        Cur<4, 1, 1><<<2 * g, t, 0, st>>>(b2);
      });
      if (n == 8) {
        ROW("allin<8,1,cs,cs>", 512, 0, AllIn<8, 1, 1, 1>);
        ROW("allin<8,2,cs,cs> (128 regs)", 512, 0, AllInWide<8, 2, 1, 1>);
        ROW("allin<8,4,cs,cs> (128 regs)", 512, 0, AllInWide<8, 4, 1, 1>);
      } else if (n == 4) {
        ROW("allin<4,2,cs,cs>", 512, 0, AllIn<4, 2, 1, 1>);
        ROW("allin<4,4,cs,cs> (128 regs)", 512, 0, AllInWide<4, 4, 1, 1>);
      }
      // Block timing: per launch, the spread of block ends (last - first)
      // and of starts, and the mean and longest block; medians over the
      // timed launches. `launch(stamps, counter)` launches once.
      {
        unsigned long long* stamps;
        unsigned* counters;
        CK(cudaMalloc(&stamps, sizeof(unsigned long long) * 2 * g * iters));
        CK(cudaMalloc(&counters, sizeof(unsigned) * (iters + warm)));
        auto timed = [&](const char* name, const std::function<void(unsigned long long*, unsigned*)>& launch) {
          CK(cudaMemset(counters, 0, sizeof(unsigned) * (iters + warm)));
          int l = 0;
          row(name, 512, 0, [&](int, size_t) {
            launch(stamps + 2 * g * (l % iters), counters + l);
            ++l;
          });
          std::vector<unsigned long long> h(2 * g * iters);
          CK(cudaMemcpy(h.data(), stamps, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
          std::vector<double> end_spread, start_spread, mean_block, max_block;
          for (int k = 0; k < iters; ++k) {
            const unsigned long long* st = h.data() + 2 * g * k;
            unsigned long long s0 = ~0ull, s1 = 0, e0 = ~0ull, e1 = 0;
            double sum = 0, mx = 0;
            for (int j = 0; j < g; ++j) {
              s0 = std::min(s0, st[2 * j]), s1 = std::max(s1, st[2 * j]);
              e0 = std::min(e0, st[2 * j + 1]), e1 = std::max(e1, st[2 * j + 1]);
              const double d = double(st[2 * j + 1] - st[2 * j]) / 1e3;
              sum += d, mx = std::max(mx, d);
            }
            end_spread.push_back(double(e1 - e0) / 1e3), start_spread.push_back(double(s1 - s0) / 1e3);
            mean_block.push_back(sum / g), max_block.push_back(mx);
          }
          auto med = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
          };
          std::printf("%-40s ends spread %.2f us, starts spread %.2f us, block mean %.2f us, longest %.2f us (medians)\n",
                      "  block timing", med(end_spread), med(start_spread), med(mean_block), med(max_block));
        };
        timed("cur<4,cs,cs> stamped", [&](unsigned long long* sp, unsigned*) { CurStamped<<<g, 512, 0, st>>>(b, sp); });
        if (n == 8) {
#define DYN(NAME, U, ALLIN, WARP) \
  timed(NAME, [&](unsigned long long* sp, unsigned* c) { Dyn<8, U, ALLIN, WARP><<<g, 512, 0, st>>>(b, c, sp); })
          DYN("dyn block, cur<4>", 4, false, false);
          DYN("dyn warp, cur<4>", 4, false, true);
          DYN("dyn warp, cur<2>", 2, false, true);
          DYN("dyn block, allin<8,1>", 1, true, false);
          DYN("dyn warp, allin<8,1>", 1, true, true);
#undef DYN
        }
        CK(cudaFree(stamps));
        CK(cudaFree(counters));
      }
      auto staged = [&](const char* name, auto kernel, int stages_times_n) {
        const size_t smem = size_t(stages_times_n) * 512 * 16;
        if (smem > size_t(smem_optin)) {
          std::printf("%-40s skipped: %zu bytes of shared memory\n", name, smem);
          return;
        }
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        row(name, 512, smem, [&](int t, size_t sm) { kernel<<<g, t, sm, st>>>(b); });
      };
      if (n == 8) {
        staged("staged<8, 2 stages>", Staged<8, 2, 1>, 16);
        staged("staged<8, 3 stages>", Staged<8, 3, 1>, 24);
      } else if (n == 4) {
        staged("staged<4, 3 stages>", Staged<4, 3, 1>, 12);
        staged("staged<4, 6 stages>", Staged<4, 6, 1>, 24);
      }
    }
  }
  return 0;
}

// Lab probe (issue 19): what the op protocol's memory operations cost on
// this GPU, to tell which round trips a small op's path pays (docs/latency.md).
// One thread chases a chain of loads of each flavour (each load's address
// depends on the value before, so each is a full round trip); a store-release
// followed by a load; bar.sync of a 512-thread block; and a ping-pong of flags
// between two blocks (the start barrier's round trip). ns per operation over
// many, from %globaltimer around the whole loop.
//   nvcc -O2 -arch=sm_90 -o load_latency_probe load_latency_probe.cu && ./load_latency_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "probe_check.h"

__device__ __forceinline__ uint64_t Now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

enum Kind { kPlain, kVolatile, kRelaxedGpu, kRelaxedSys, kAcquireGpu, kAcquireSys, kKinds };
const char* kNames[] = {"ld (weak)", "ld.volatile", "ld.relaxed.gpu", "ld.relaxed.sys", "ld.acquire.gpu",
                        "ld.acquire.sys"};

template <int K>
__device__ __forceinline__ uint64_t Load(const uint64_t* p) {
  uint64_t v;
  if constexpr (K == kPlain) {
    v = *p;
  } else if constexpr (K == kVolatile) {
    v = *static_cast<const volatile uint64_t*>(p);
  } else if constexpr (K == kRelaxedGpu) {
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (K == kRelaxedSys) {
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (K == kAcquireGpu) {
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else {
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  }
  return v;
}

// chain[i] holds the index of the next word to read (a 64-line cycle).
template <int K>
__global__ void Chase(const uint64_t* chain, int hops, uint64_t* out) {
  uint64_t i = 0;
  const uint64_t t0 = Now();
  for (int h = 0; h < hops; ++h) i = Load<K>(chain + i);
  const uint64_t t1 = Now();
  out[0] = t1 - t0;
  out[1] = i;
}

// A release store, then an acquire load of another line (the end barrier's
// publisher: its flag, then the abort word), the load's value feeding the
// next store's address so iterations do not overlap.
__global__ void StoreThenLoad(uint64_t* flag, const uint64_t* chain, int iters, uint64_t* out) {
  uint64_t i = 0;
  const uint64_t t0 = Now();
  for (int h = 0; h < iters; ++h) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag + (i & 1) * 16), "l"((uint64_t)h) : "memory");
    i = Load<kAcquireSys>(chain + i);
  }
  out[0] = Now() - t0;
  out[1] = i;
}

__global__ void BarSync(int iters, uint64_t* out) {
  const uint64_t t0 = Now();
  for (int h = 0; h < iters; ++h) __syncthreads();
  if (threadIdx.x == 0) out[0] = Now() - t0;
}

// Two blocks take turns: block b waits for the other's flag to reach its
// turn, then publishes its own. One round = two one-way latencies.
template <bool kSys>
__global__ void PingPong(uint64_t* flags, int rounds, uint64_t* out) {
  if (threadIdx.x != 0) return;
  uint64_t* mine = flags + blockIdx.x * 16;
  const uint64_t* theirs = flags + (1 - blockIdx.x) * 16;
  const uint64_t t0 = Now();
  for (uint64_t r = 1; r <= static_cast<uint64_t>(rounds); ++r) {
    if (blockIdx.x == 1) {
      while ((kSys ? Load<kAcquireSys>(theirs) : Load<kAcquireGpu>(theirs)) < r) {
      }
    }
    if (kSys) {
      asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(mine), "l"(r) : "memory");
    } else {
      asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(mine), "l"(r) : "memory");
    }
    if (blockIdx.x == 0) {
      while ((kSys ? Load<kAcquireSys>(theirs) : Load<kAcquireGpu>(theirs)) < r) {
      }
    }
  }
  if (blockIdx.x == 0) out[0] = Now() - t0;
}

template <int K>
void RunChase(const uint64_t* chain, uint64_t* out, int hops) {
  uint64_t h[2];
  for (int rep = 0; rep < 2; ++rep) {  // the first warms the lines into L2
    Chase<K><<<1, 1>>>(chain, hops, out);
    CK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
  }
  printf("chase %-16s %7.1f ns per dependent load\n", kNames[K], static_cast<double>(h[0]) / hops);
}

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  CK(cudaSetDevice(0));
  constexpr int kLines = 64, kStride = 16;  // 128-byte lines
  uint64_t host[kLines * kStride] = {};
  for (int l = 0; l < kLines; ++l) host[l * kStride] = static_cast<uint64_t>(((l * 17 + 5) % kLines) * kStride);
  uint64_t *chain, *out, *flags;
  CK(cudaMalloc(&chain, sizeof(host)));
  CK(cudaMalloc(&out, 64));
  CK(cudaMalloc(&flags, 4096));
  CK(cudaMemcpy(chain, host, sizeof(host), cudaMemcpyHostToDevice));
  const int hops = 20000;
  RunChase<kPlain>(chain, out, hops);
  RunChase<kVolatile>(chain, out, hops);
  RunChase<kRelaxedGpu>(chain, out, hops);
  RunChase<kRelaxedSys>(chain, out, hops);
  RunChase<kAcquireGpu>(chain, out, hops);
  RunChase<kAcquireSys>(chain, out, hops);
  uint64_t h[2];
  for (int rep = 0; rep < 2; ++rep) StoreThenLoad<<<1, 1>>>(flags, chain, hops, out);
  CK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
  printf("st.release.sys then ld.acquire.sys %7.1f ns per pair\n", static_cast<double>(h[0]) / hops);
  for (int rep = 0; rep < 2; ++rep) BarSync<<<1, 512>>>(hops, out);
  CK(cudaMemcpy(h, out, 8, cudaMemcpyDeviceToHost));
  printf("bar.sync, 512 threads %7.1f ns each\n", static_cast<double>(h[0]) / hops);
  for (int sys = 0; sys < 2; ++sys) {
    for (int rep = 0; rep < 2; ++rep) {
      CK(cudaMemset(flags, 0, 4096));
      if (sys) {
        PingPong<true><<<2, 32>>>(flags, hops, out);
      } else {
        PingPong<false><<<2, 32>>>(flags, hops, out);
      }
      CK(cudaDeviceSynchronize());
    }
    CK(cudaMemcpy(h, out, 8, cudaMemcpyDeviceToHost));
    printf("ping-pong between two blocks, %s scope: %7.1f ns one way\n", sys ? "sys" : "gpu",
           static_cast<double>(h[0]) / hops / 2);
  }
  CK(cudaFree(chain));
  CK(cudaFree(out));
  CK(cudaFree(flags));
  return 0;
}

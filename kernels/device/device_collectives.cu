#include "kernels/device/device_collectives.h"

#include "kernels/device/device_reduce.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/gpu/gpu_check.h"
#include "kernels/device/reduce_ops.cuh"
#include "ring/op_ring_device.cuh"

namespace collectived::device {
namespace {

using ring::Barrier;
using ring::BeginOp;
using ring::ClaimCounter;
using ring::EndBarrier;
using ring::FinishOp;
using ring::NowNs;
using ring::RunOp;

constexpr uint32_t kThreads = 512;
// Two blocks of every kernel fit an SM (at most 64 registers a thread), so a
// communicator's one block per SM leaves a slot for another's (or a wait).
constexpr uint32_t kMinBlocksPerSm = 2;

// Debug hook: this rank waits before reading peers (a slow reader, so a race
// window is really open).
__device__ void DebugReadDelay(const DeviceRankArgs& a) {
  if (a.debug_read_delay_ns == 0) return;
  const uint64_t end = NowNs() + a.debug_read_delay_ns;
  while (NowNs() < end) {
  }
}

struct Range {
  uint64_t begin, end;  // elements
};

// ---- kernels ---------------------------------------------------------------------

__global__ void DelayKernel(uint64_t ns) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const uint64_t end = NowNs() + ns;
    while (NowNs() < end) {
    }
  }
}

// Reduces elements [r.begin, r.end) over every input; writes the result to
// the outputs [first_out, last_out]. Packs when `vec` (all pointers 16-byte
// aligned and r.begin a multiple of the pack), scalars otherwise.
//
// kStreaming: the unrolled vector loop loads and stores evict-first
// (LoadPack/StorePack<T, true>). Only where every input element is read once
// and every output written once by the whole op (two-shot, fused; one-shot's
// inputs are read by every rank), and only for ops too big for the L2
// (ExceedsL2): a smaller op's output may be read next from L2 (a staged op's
// copy-out, the caller's next kernel).
//
// Bandwidth comes from loads in flight: each thread issues kUnroll packs of
// the first two inputs before it combines any (one basic block, no guards),
// so a 2-rank op has 2 x kUnroll loads outstanding per thread, not the one or
// two of a pack-at-a-time loop. Packs left over (fewer than a full group of
// the grid) go one at a time.
//
// Registers: every kernel is held to 64 a thread (kMinBlocksPerSm). `y` is
// zeroed where declared because its loads are predicated (world > 1), and a
// predicated load keeps the old value where off: uninitialised, ptxas kept
// `y` live across the loop and spilled it. The loop over inputs 2..n-1 is
// not unrolled (unrolled, its copies spilled too). With both, 1 of the 106
// kernels spills (8 bytes) where 70 did; the in-process one-launch
// all-reduce got 0.8-7.6 % faster at 16 MiB-1 GiB, 2-8 ranks, and the
// per-rank kernels through the daemon stayed within 0.5 % (docs/latency.md,
// "Register spills removed").
// Packs a thread reduces together: 16-bit types accumulate in float, twice
// the registers per pack.
template <typename T>
__device__ constexpr int ReduceUnroll() {
  return sizeof(typename Elem<T>::Acc) > sizeof(T) ? 2 : 4;
}

// One thread's group: packs p, p + stride, ... (ReduceUnroll of them) of
// every input, reduced and stored to the outputs [first_out, last_out].
template <typename T, ReduceOp kOp, bool kStreaming>
__device__ __forceinline__ void ReduceGroup(const DeviceRankArgs& a, uint64_t p, uint64_t stride, uint32_t first_out,
                                            uint32_t last_out) {
  using E = Elem<T>;
  using A = typename E::Acc;
  constexpr int kUnroll = ReduceUnroll<T>();
  constexpr uint64_t kN = Pack<T>::kElems;
  A acc[kUnroll][kN];
  {
    Pack<T> x[kUnroll], y[kUnroll] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = LoadPack<T, kStreaming>(a.inputs[0], p + u * stride);
    if (a.world > 1) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) y[u] = LoadPack<T, kStreaming>(a.inputs[1], p + u * stride);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (uint64_t i = 0; i < kN; ++i) {
        acc[u][i] = E::Load(x[u].v[i]);
        if (a.world > 1) acc[u][i] = Combine<A, kOp>(acc[u][i], E::Load(y[u].v[i]));
      }
    }
  }
#pragma unroll 1
  for (uint32_t k = 2; k < a.world; ++k) {
    Pack<T> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = LoadPack<T, kStreaming>(a.inputs[k], p + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (uint64_t i = 0; i < kN; ++i) acc[u][i] = Combine<A, kOp>(acc[u][i], E::Load(x[u].v[i]));
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    Pack<T> out;
#pragma unroll
    for (uint64_t i = 0; i < kN; ++i) {
      if constexpr (kOp == ReduceOp::kAvg) acc[u][i] = acc[u][i] / static_cast<A>(a.world);
      out.v[i] = E::Store(acc[u][i]);
    }
    for (uint32_t k = first_out; k <= last_out; ++k) {
      StorePack<T, kStreaming>(a.outputs[k], p + u * stride, out);
    }
  }
}

// Reduces elements [r.begin, r.end) over every input; writes the result to
// the outputs [first_out, last_out]. Packs when `vec` (all pointers 16-byte
// aligned and r.begin a multiple of the pack), scalars otherwise.
//
// kStreaming: the unrolled vector loop loads and stores evict-first
// (LoadPack/StorePack<T, true>). Only where every input element is read once
// and every output written once by the whole op (two-shot, fused; one-shot's
// inputs are read by every rank), and only for ops too big for the L2
// (ExceedsL2): a smaller op's output may be read next from L2 (a staged op's
// copy-out, the caller's next kernel).
//
// Bandwidth comes from loads in flight: each thread issues ReduceUnroll
// packs of the first two inputs before it combines any (one basic block, no
// guards), so a 2-rank op has 2 x ReduceUnroll loads outstanding per thread,
// not the one or two of a pack-at-a-time loop (ReduceGroup). Packs left over
// (fewer than a full group of the grid) go one at a time.
//
// Registers: every kernel is held to 64 a thread (kMinBlocksPerSm). `y` is
// zeroed where declared because its loads are predicated (world > 1), and a
// predicated load keeps the old value where off: uninitialised, ptxas kept
// `y` live across the loop and spilled it. The loop over inputs 2..n-1 is
// not unrolled (unrolled, its copies spilled too). With both, 1 of the 106
// kernels spills (8 bytes) where 70 did; the in-process one-launch
// all-reduce got 0.8-7.6 % faster at 16 MiB-1 GiB, 2-8 ranks, and the
// per-rank kernels through the daemon stayed within 0.5 % (docs/latency.md,
// "Register spills removed").
template <typename T, ReduceOp kOp, bool kStreaming = false>
__device__ void ReduceRange(const DeviceRankArgs& a, Range r, uint32_t first_out, uint32_t last_out, bool vec) {
  constexpr int kUnroll = ReduceUnroll<T>();
  constexpr uint64_t kN = Pack<T>::kElems;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t scalar_begin = r.begin;
  if (vec && r.end > r.begin) {
    const uint64_t p0 = r.begin / kN, p1 = r.end / kN;
    uint64_t p = p0 + tid;
    for (; p + (kUnroll - 1) * nthreads < p1; p += nthreads * kUnroll) {
      ReduceGroup<T, kOp, kStreaming>(a, p, nthreads, first_out, last_out);
    }
    for (; p < p1; p += nthreads) {
      const Pack<T> v = ReducePack<T, kOp>(a.inputs, a.world, p);
      for (uint32_t k = first_out; k <= last_out; ++k) StorePack<T>(a.outputs[k], p, v);
    }
    scalar_begin = p1 * kN > r.begin ? p1 * kN : r.begin;
  }
  for (uint64_t j = scalar_begin + tid; j < r.end; j += nthreads) {
    const T v = ReduceOne<T, kOp>(a.inputs, a.world, j);
    for (uint32_t k = first_out; k <= last_out; ++k) static_cast<T*>(a.outputs[k])[j] = v;
  }
}

// Two-shot push's data where its work is claimed (DeviceOpArgs::claims):
// the whole op's packs in units of one block's group (ReduceUnroll packs a
// thread), each reduced over every input and stored to every output by
// whichever block of whichever rank claims it. Thread 0 claims the next
// unit while the block reduces one, and the block meets once a unit to
// learn it. Units of a warp instead were slower (their atomics; 16 MiB at 2
// and 4 ranks 7-27 % slower than the static split, docs/latency.md,
// "Claimed work"). The elements after the last whole pack go to rank 0's
// grid. REQUIRES: `vec`; every rank runs gridDim.x blocks.
template <typename T, ReduceOp kOp, bool kStreaming>
__device__ void ReduceClaimed(const DeviceRankArgs& a, uint32_t* counter) {
  constexpr int kUnroll = ReduceUnroll<T>();
  constexpr uint64_t kN = Pack<T>::kElems;
  const uint64_t packs = a.count / kN;
  const uint64_t unit = uint64_t{blockDim.x} * kUnroll;
  const uint64_t units = (packs + unit - 1) / unit;
  // A block's first unit is its place in the op's grids (every rank runs as
  // many blocks: the barriers pair block b with its peers' block b), so no
  // block waits on the counter to start; the counter hands out the rest.
  const uint32_t grids = a.world * gridDim.x;
  __shared__ uint32_t claimed[2];  // this unit's and the next: the next is written while this one is read
  uint32_t u = a.rank * gridDim.x + blockIdx.x;
  for (int i = 0; u < units; i ^= 1) {
    uint32_t next = 0;
    if (threadIdx.x == 0) next = grids + atomicAdd(counter, 1u);
    const uint64_t p = u * unit + threadIdx.x;
    if (p + (kUnroll - 1) * blockDim.x < packs) {
      ReduceGroup<T, kOp, kStreaming>(a, p, blockDim.x, 0, a.world - 1);
    } else {
      for (uint64_t q = p; q < packs; q += blockDim.x) {
        const Pack<T> v = ReducePack<T, kOp>(a.inputs, a.world, q);
        for (uint32_t k = 0; k < a.world; ++k) StorePack<T>(a.outputs[k], q, v);
      }
    }
    if (threadIdx.x == 0) claimed[i ^ 1] = next;
    __syncthreads();
    u = claimed[i ^ 1];
  }
  if (a.rank == 0) ReduceRange<T, kOp>(a, Range{packs * kN, a.count}, 0, a.world - 1, /*vec=*/false);
}

template <typename T, ReduceOp kOp>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) OneShotKernel(DeviceRankArgs a, bool vec) {
  RunOp(a, [&] {
    DebugReadDelay(a);
    ReduceRange<T, kOp>(a, Range{0, a.count}, a.rank, a.rank, vec);
  });
}

template <typename T, ReduceOp kOp>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    TwoShotPushKernel(DeviceRankArgs a, bool vec, bool streaming) {
  RunOp</*kPushesReduced=*/true>(a, [&](uint64_t gen) {
    // Chunks are whole packs, so every rank's range starts aligned.
    constexpr uint64_t kN = Pack<T>::kElems;
    const uint64_t chunk = ((a.count + a.world - 1) / a.world + kN - 1) / kN * kN;
    const uint64_t begin = min(a.count, chunk * a.rank);
    const uint64_t end = min(a.count, begin + chunk);
    DebugReadDelay(a);
    if (a.claims != nullptr && a.claim_work && vec) {
      uint32_t* counter = ClaimCounter(a, gen);
      if (streaming) {
        ReduceClaimed<T, kOp, true>(a, counter);
      } else {
        ReduceClaimed<T, kOp, false>(a, counter);
      }
    } else if (streaming) {
      ReduceRange<T, kOp, true>(a, Range{begin, end}, 0, a.world - 1, vec);
    } else {
      ReduceRange<T, kOp, false>(a, Range{begin, end}, 0, a.world - 1, vec);
    }
  });
}

template <typename T, ReduceOp kOp>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) FusedKernel(DeviceRankArgs a, bool vec, bool streaming) {
  if (streaming) {
    ReduceRange<T, kOp, true>(a, Range{0, a.count}, 0, a.world - 1, vec);
  } else {
    ReduceRange<T, kOp, false>(a, Range{0, a.count}, 0, a.world - 1, vec);
  }
}

// Element-size copy type for all-gather (a pure copy).
template <int kSize>
struct CopyType;
template <>
struct CopyType<2> { using T = uint16_t; };
template <>
struct CopyType<4> { using T = uint32_t; };
template <>
struct CopyType<8> { using T = uint64_t; };

constexpr uint32_t kSkipNone = UINT32_MAX;

// Copies `packs` 16-byte packs of `in` to byte offset `at` of each of the
// `nout` outputs but output `skip` (in place: the input already is its chunk
// there, so writing it again is traffic for nothing). Loads of kCopyUnroll
// packs are issued before any store, for the same reason as in ReduceRange.
// Outputs are written once and not read back by this kernel: streaming
// stores, which keep them from pushing the inputs, read by every rank, out of
// L2. kReadOnce: the unrolled loop's loads stream too, where no other rank
// reads `in` in this op (push, fused) and the op's inputs could not stay in
// L2 anyway (ExceedsL2): a small input, which a producer kernel just wrote,
// is an L2 hit (measured on the H100: 16 MiB all-gathers 2-7 % slower with
// them, 64 MiB 0.4-4 % faster; docs/latency.md, "The 16-64 MiB range").
// kGroupedTail: the packs left over after the whole groups go in guarded
// half groups instead of one at a time (below).
template <bool kReadOnce, bool kGroupedTail>
__device__ void BroadcastPacks(const uint4* in, uint64_t packs, void* const* outs, uint32_t nout, uint64_t at,
                               uint32_t skip) {
  constexpr int kCopyUnroll = 8;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t p = tid;
  for (; p + (kCopyUnroll - 1) * nthreads < packs; p += nthreads * kCopyUnroll) {
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      v[u] = kReadOnce ? LoadStreaming(in + p + u * nthreads) : in[p + u * nthreads];
    }
    for (uint32_t j = 0; j < nout; ++j) {
      if (j == skip) continue;
      uint4* out = reinterpret_cast<uint4*>(static_cast<uint8_t*>(outs[j]) + at);
#pragma unroll
      for (int u = 0; u < kCopyUnroll; ++u) StoreStreaming(out + p + u * nthreads, v[u]);
    }
  }
  // The packs left over, fewer than a whole group of the grid. One at a
  // time, half the threads of a 2-rank 16 MiB all-gather took seven serial
  // round trips here; kGroupedTail: guarded half groups, whose packs are in
  // flight together (a whole guarded group spilled registers). Measured on
  // the H100 (docs/latency.md, "The twelfth cut"): 16 MiB all-gathers 0.7-2.0
  // us faster at 2 and 4 ranks, and 64 MiB ones, whose loads stream, 2-4 %
  // slower: push and fused take it where their inputs stay in L2.
  if constexpr (kGroupedTail) {
    static_assert(!kReadOnce, "grouped tails load plainly");
    constexpr int kTailUnroll = kCopyUnroll / 2;
    for (; p < packs; p += nthreads * kTailUnroll) {
      uint4 v[kTailUnroll];
#pragma unroll
      for (int u = 0; u < kTailUnroll; ++u) {
        if (p + u * nthreads < packs) v[u] = in[p + u * nthreads];
      }
      for (uint32_t j = 0; j < nout; ++j) {
        if (j == skip) continue;
        uint4* out = reinterpret_cast<uint4*>(static_cast<uint8_t*>(outs[j]) + at);
#pragma unroll
        for (int u = 0; u < kTailUnroll; ++u) {
          if (p + u * nthreads < packs) StoreStreaming(out + p + u * nthreads, v[u]);
        }
      }
    }
  } else {
    for (; p < packs; p += nthreads) {
      const uint4 v = in[p];
      for (uint32_t j = 0; j < nout; ++j) {
        if (j != skip) StoreStreaming(reinterpret_cast<uint4*>(static_cast<uint8_t*>(outs[j]) + at) + p, v);
      }
    }
  }
}

// Copies `count` elements of `in` to element `at` of each of the `nout`
// outputs with the grid (16-byte packs when `vec`). An output that `in`
// already is (in place) is not written again. kReadOnce: see BroadcastPacks;
// the packs left over go in groups where the inputs stay in L2 (push, fused)
// and one at a time otherwise, and in pull (kPull), where a guarded group
// spilled registers.
template <typename T, bool kReadOnce, bool kPull = false>
__device__ void BroadcastElements(const T* in, uint64_t count, void* const* outs, uint32_t nout, uint64_t at,
                                  bool vec) {
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint32_t skip = kSkipNone;
  for (uint32_t j = 0; j < nout; ++j) {
    if (static_cast<const T*>(outs[j]) + at == in) skip = j;
  }
  uint64_t scalar_begin = 0;
  if (vec) {
    constexpr uint64_t kN = 16 / sizeof(T);
    BroadcastPacks<kReadOnce, !kReadOnce && !kPull>(reinterpret_cast<const uint4*>(in), count / kN, outs, nout,
                                                     at * sizeof(T), skip);
    scalar_begin = count / kN * kN;
  }
  for (uint64_t i = scalar_begin + tid; i < count; i += nthreads) {
    const T v = in[i];
    for (uint32_t j = 0; j < nout; ++j) {
      if (j != skip) static_cast<T*>(outs[j])[at + i] = v;
    }
  }
}

// Rank r reads every rank's input and writes only its own output: peers'
// outputs need not be mapped (staged ops through the communicator's slots).
template <typename T>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) AllGatherPullKernel(DeviceRankArgs a, bool vec) {
  RunOp(a, [&] {
    void* const own[1] = {a.outputs[a.rank]};
    DebugReadDelay(a);
    for (uint32_t k = 0; k < a.world; ++k) {
      BroadcastElements<T, false, /*kPull=*/true>(static_cast<const T*>(a.inputs[k]), a.count, own, 1, k * a.count,
                                                  vec);
    }
  });
}

template <typename T>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    FusedAllGatherKernel(DeviceRankArgs a, bool vec, bool stream_inputs) {
  for (uint32_t k = 0; k < a.world; ++k) {
    const T* in = static_cast<const T*>(a.inputs[k]);
    if (stream_inputs) {
      BroadcastElements<T, true>(in, a.count, a.outputs, a.world, k * a.count, vec);
    } else {
      BroadcastElements<T, false>(in, a.count, a.outputs, a.world, k * a.count, vec);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    AllGatherPushKernel(DeviceRankArgs a, bool vec, bool stream_inputs) {
  RunOp(a, [&] {
    const T* in = static_cast<const T*>(a.inputs[a.rank]);
    if (stream_inputs) {
      BroadcastElements<T, true>(in, a.count, a.outputs, a.world, a.rank * a.count, vec);
    } else {
      BroadcastElements<T, false>(in, a.count, a.outputs, a.world, a.rank * a.count, vec);
    }
  });
}

// ---- host side -------------------------------------------------------------------

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

Status CheckArgs(const DeviceRankArgs& a, uint32_t blocks, bool barriers) {
  if (a.world == 0 || a.world > kMaxDeviceRanks) {
    return Status::InvalidArgument("world " + std::to_string(a.world) + " outside [1, " +
                                   std::to_string(kMaxDeviceRanks) + "]");
  }
  if (a.rank >= a.world) return Status::InvalidArgument("rank outside world");
  if (blocks == 0 || blocks > kMaxBlocks) {
    return Status::InvalidArgument("blocks " + std::to_string(blocks) + " outside [1, " + std::to_string(kMaxBlocks) +
                                   "]");
  }
  if (a.count == 0) return Status::InvalidArgument("count must be positive");
  for (uint32_t k = 0; k < a.world; ++k) {
    if (a.inputs[k] == nullptr || (a.outputs[k] == nullptr && (k == a.rank || !a.own_output_only))) {
      return Status::InvalidArgument("null buffer");
    }
  }
  if (barriers && (a.flags == nullptr || a.abort_word == nullptr || a.error_word == nullptr || a.timeout_ns == 0 ||
                   (a.op_index == nullptr && (a.done == nullptr || a.finished == nullptr)))) {
    return Status::InvalidArgument(
        "flags, abort/error words, a timeout, and an op index (or done and finished words) are required");
  }
  return Status::Ok();
}

bool Overlap(const void* a, uint64_t an, const void* b, uint64_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bn && y < x + an;
}

// Every rank's input is its output (in place) or disjoint from it, and no
// buffer overlaps another rank's: kernels read and write them concurrently.
// `in_at` gives where an in-place input sits inside its own output.
Status CheckPlacement(const DeviceRankArgs& a, uint64_t in_bytes, uint64_t out_bytes, uint64_t in_at_stride,
                      bool* in_place) {
  *in_place = false;
  for (uint32_t k = 0; k < a.world; ++k) {
    if (a.outputs[k] == nullptr) continue;  // another process's, not mapped here (own_output_only)
    const void* own = static_cast<const uint8_t*>(a.outputs[k]) + k * in_at_stride;
    if (a.inputs[k] == own) {
      *in_place = true;
    } else if (Overlap(a.inputs[k], in_bytes, a.outputs[k], out_bytes)) {
      return Status::InvalidArgument("rank " + std::to_string(k) +
                                     "'s input partially overlaps its output (in place means the same address)");
    }
    for (uint32_t j = 0; j < a.world; ++j) {
      if (j == k) continue;
      if ((a.outputs[j] != nullptr && Overlap(a.outputs[k], out_bytes, a.outputs[j], out_bytes)) ||
          Overlap(a.outputs[k], out_bytes, a.inputs[j], in_bytes)) {
        return Status::InvalidArgument("rank " + std::to_string(k) + "'s output overlaps rank " + std::to_string(j) +
                                       "'s buffers");
      }
    }
  }
  return Status::Ok();
}

// Whether `bytes` (what an op streams through) exceed the current device's
// L2, so that none of it could stay there anyway: then the data loops use
// evict-first accesses (ReduceRange's kStreaming, BroadcastPacks'
// kReadOnce). Ops under 16 MiB skip the query (launch latency) and keep
// plain accesses, whatever the L2. A failed query means plain accesses, and
// its error is cleared so the launch's own check does not report it.
bool ExceedsL2(uint64_t bytes) {
  if (bytes < (16u << 20)) return false;
  int device = 0, l2 = 0;
  if (gpuGetDevice(&device) != gpuSuccess || gpuDeviceGetAttribute(&l2, gpuDevAttrL2CacheSize, device) != gpuSuccess) {
    (void)gpuGetLastError();
    return false;
  }
  return bytes > static_cast<uint64_t>(l2);
}

// Launches one of the op kernels (those that run RunOp) on `stream`: as a
// programmatic dependent launch where ProgrammaticLaunches() (RunOp then
// waits for the grids before it first), unless the bench bit
// ring::kBenchPlainLaunch asks for a plain one. Errors surface through
// gpuGetLastError, as a <<<>>> launch's do.
template <typename... Params, typename... Args>
void LaunchOpKernel(void (*kernel)(Params...), uint32_t blocks, gpuStream_t stream, const DeviceRankArgs& a,
                    const Args&... args) {
#if !defined(COLLECTIVED_USE_HIP) && !defined(__HIP_PLATFORM_AMD__)
  if ((a.bench_skip & ring::kBenchPlainLaunch) == 0 && ProgrammaticLaunches()) {
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    (void)cudaLaunchKernelEx(&config, kernel, a, args...);
    return;
  }
#endif
  kernel<<<blocks, kThreads, 0, stream>>>(a, args...);
}

bool AllAligned(const DeviceRankArgs& a) {
  for (uint32_t k = 0; k < a.world; ++k) {
    if (!Aligned16(a.inputs[k]) || (a.outputs[k] != nullptr && !Aligned16(a.outputs[k]))) return false;
  }
  return true;
}

}  // namespace

Status PreloadKernels() {
  COLLECTIVED_RETURN_IF_ERROR(PreloadReduceKernels());
  COLLECTIVED_RETURN_IF_ERROR(ring::PreloadOpRingKernels());
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(DelayKernel));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(AllGatherPushKernel<uint16_t>));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(AllGatherPushKernel<uint32_t>));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(AllGatherPushKernel<uint64_t>));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(AllGatherPullKernel<uint16_t>));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(AllGatherPullKernel<uint32_t>));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(AllGatherPullKernel<uint64_t>));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(FusedAllGatherKernel<uint16_t>));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(FusedAllGatherKernel<uint32_t>));
  COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(FusedAllGatherKernel<uint64_t>));
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                      DataType::kInt32, DataType::kInt64, DataType::kUint32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      if (!IsValidReduction(dt, op)) continue;
      COLLECTIVED_RETURN_IF_ERROR(DispatchReduction(dt, op, []<typename T, ReduceOp kOp>() -> Status {
        COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(OneShotKernel<T, kOp>));
        COLLECTIVED_RETURN_IF_ERROR(gpu::PreloadKernel(TwoShotPushKernel<T, kOp>));
        return gpu::PreloadKernel(FusedKernel<T, kOp>);
      }));
    }
  }
  return Status::Ok();
}

bool ProgrammaticLaunches() {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  return false;
#else
  // Per device, asked once: 0 unknown, 1 no, 2 yes. A device numbered
  // past these launches plainly.
  constexpr int kMaxDevicesAsked = 64;
  static std::atomic<uint8_t> known[kMaxDevicesAsked] = {};
  int device = 0;
  if (gpuGetDevice(&device) != gpuSuccess || device < 0 || device >= static_cast<int>(kMaxDevicesAsked)) {
    (void)gpuGetLastError();
    return false;
  }
  uint8_t k = known[device].load(std::memory_order_relaxed);
  if (k == 0) {
    // The device must run programmatic launches (compute capability 9.0 on)
    // and the kernels' code must hold the wait: it is compiled only for
    // __CUDA_ARCH__ >= 900, so code JIT-compiled from older PTX has none.
    // COLLECTIVED_PROGRAMMATIC_LAUNCH=0 turns them off (docs/operating.md).
    const char* env = std::getenv("COLLECTIVED_PROGRAMMATIC_LAUNCH");
    const bool off = env != nullptr && std::string(env) == "0";
    int major = 0;
    cudaFuncAttributes fa = {};
    bool yes = !off;
    if (yes && (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
                cudaFuncGetAttributes(&fa, OneShotKernel<float, ReduceOp::kSum>) != cudaSuccess)) {
      (void)cudaGetLastError();  // a failed query means plain launches; the launch's own check must not see it
      yes = false;
    }
    yes = yes && major >= 9 && fa.ptxVersion >= 90;
    k = yes ? 2 : 1;
    known[device].store(k, std::memory_order_relaxed);
  }
  return k == 2;
#endif
}

Status LaunchDelay(uint64_t ns, gpuStream_t stream) {
  DelayKernel<<<1, 32, 0, stream>>>(ns);
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

namespace {

// The launchers' checks; *algo becomes what runs (in place forces two-shot).
Status CheckAllReduce(DataType dtype, ReduceOp op, DeviceAlgorithm* algo, const DeviceRankArgs& args,
                      uint32_t blocks) {
  if (!IsValidReduction(dtype, op)) {
    return Status::InvalidArgument(std::string("reduction ") + ReduceOpName(op) + " is not allowed on " +
                                   DataTypeName(dtype));
  }
  COLLECTIVED_RETURN_IF_ERROR(CheckArgs(args, blocks, true));
  const uint64_t bytes = args.count * DataTypeSize(dtype);
  bool in_place = false;
  COLLECTIVED_RETURN_IF_ERROR(CheckPlacement(args, bytes, bytes, 0, &in_place));
  // One-shot in place would overwrite rank r's input while peers still read
  // it; two-shot push is in-place safe (only rank r touches chunk r of any
  // buffer), so in-place ops take it.
  if (in_place) *algo = DeviceAlgorithm::kTwoShotPush;
  if (args.own_output_only && *algo != DeviceAlgorithm::kOneShot) {
    return Status::InvalidArgument("two-shot push writes every rank's output; with only this rank's output mapped, "
                                   "run one-shot out of place");
  }
  return Status::Ok();
}

Status CheckAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, bool barriers,
                      GatherAlgorithm algo) {
  COLLECTIVED_RETURN_IF_ERROR(CheckArgs(args, blocks, barriers));
  const size_t es = DataTypeSize(dtype);
  if (es == 0) return Status::InvalidArgument("unknown data type");
  if (args.own_output_only && algo == GatherAlgorithm::kPush) {
    return Status::InvalidArgument("push all-gather writes every rank's output; with only this rank's output mapped, "
                                   "pull");
  }
  bool in_place = false;  // rank r's input is chunk r of its own output: safe, it is copied onto itself
  return CheckPlacement(args, args.count * es, args.world * args.count * es, args.count * es, &in_place);
}

}  // namespace

Status ValidateAllReduce(DataType dtype, ReduceOp op, DeviceAlgorithm algo, const DeviceRankArgs& args,
                         uint32_t blocks) {
  return CheckAllReduce(dtype, op, &algo, args, blocks);
}

Status ValidateAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, GatherAlgorithm algo) {
  return CheckAllGather(dtype, args, blocks, true, algo);
}

Status ValidateFusedAllGather(DataType dtype, const DeviceRankArgs& args) {
  return CheckAllGather(dtype, args, 1, false, GatherAlgorithm::kPush);
}

Status ValidateFusedAllReduce(DataType dtype, ReduceOp op, const DeviceRankArgs& args) {
  if (!IsValidReduction(dtype, op)) return Status::InvalidArgument("reduction not allowed on this type");
  COLLECTIVED_RETURN_IF_ERROR(CheckArgs(args, 1, false));
  const uint64_t bytes = args.count * DataTypeSize(dtype);
  bool in_place = false;  // safe either way: each element is read from every input before any output is written
  return CheckPlacement(args, bytes, bytes, 0, &in_place);
}

Status LaunchAllReduce(DataType dtype, ReduceOp op, DeviceAlgorithm algo, const DeviceRankArgs& args, uint32_t blocks,
                       gpuStream_t stream) {
  COLLECTIVED_RETURN_IF_ERROR(CheckAllReduce(dtype, op, &algo, args, blocks));
  const bool vec = AllAligned(args);
  // Two-shot reads every input once and writes every output once.
  const bool streaming = algo != DeviceAlgorithm::kOneShot &&
                         ExceedsL2(2 * uint64_t{args.world} * args.count * DataTypeSize(dtype));
  DispatchReduction(dtype, op, [&]<typename T, ReduceOp kOp>() {
    if (algo == DeviceAlgorithm::kOneShot) {
      LaunchOpKernel(OneShotKernel<T, kOp>, blocks, stream, args, vec);
    } else {
      LaunchOpKernel(TwoShotPushKernel<T, kOp>, blocks, stream, args, vec, streaming);
    }
  });
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

Status LaunchFusedAllReduce(DataType dtype, ReduceOp op, const DeviceRankArgs& args, uint32_t blocks,
                            gpuStream_t stream) {
  COLLECTIVED_RETURN_IF_ERROR(ValidateFusedAllReduce(dtype, op, args));
  COLLECTIVED_RETURN_IF_ERROR(CheckArgs(args, blocks, false));
  const bool vec = AllAligned(args);
  const bool streaming = ExceedsL2(2 * uint64_t{args.world} * args.count * DataTypeSize(dtype));
  DispatchReduction(dtype, op, [&]<typename T, ReduceOp kOp>() {
    FusedKernel<T, kOp><<<blocks, kThreads, 0, stream>>>(args, vec, streaming);
  });
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

Status LaunchFusedAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, gpuStream_t stream) {
  COLLECTIVED_RETURN_IF_ERROR(CheckAllGather(dtype, args, blocks, false, GatherAlgorithm::kPush));
  const size_t es = DataTypeSize(dtype);
  const bool vec = AllAligned(args) && (args.count * es) % 16 == 0;
  const bool si = ExceedsL2(uint64_t{args.world} * args.count * es);  // the inputs
  switch (es) {
    case 2: FusedAllGatherKernel<uint16_t><<<blocks, kThreads, 0, stream>>>(args, vec, si); break;
    case 4: FusedAllGatherKernel<uint32_t><<<blocks, kThreads, 0, stream>>>(args, vec, si); break;
    default: FusedAllGatherKernel<uint64_t><<<blocks, kThreads, 0, stream>>>(args, vec, si); break;
  }
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

Status LaunchAllGather(DataType dtype, const DeviceRankArgs& args, uint32_t blocks, gpuStream_t stream,
                       GatherAlgorithm algo) {
  COLLECTIVED_RETURN_IF_ERROR(CheckAllGather(dtype, args, blocks, true, algo));
  const size_t es = DataTypeSize(dtype);
  const bool vec = AllAligned(args) && (args.count * es) % 16 == 0;
  const bool push = algo == GatherAlgorithm::kPush;
  const bool si = push && ExceedsL2(uint64_t{args.world} * args.count * es);  // the inputs
  switch (es) {
    case 2:
      push ? LaunchOpKernel(AllGatherPushKernel<uint16_t>, blocks, stream, args, vec, si)
           : LaunchOpKernel(AllGatherPullKernel<uint16_t>, blocks, stream, args, vec);
      break;
    case 4:
      push ? LaunchOpKernel(AllGatherPushKernel<uint32_t>, blocks, stream, args, vec, si)
           : LaunchOpKernel(AllGatherPullKernel<uint32_t>, blocks, stream, args, vec);
      break;
    default:
      push ? LaunchOpKernel(AllGatherPushKernel<uint64_t>, blocks, stream, args, vec, si)
           : LaunchOpKernel(AllGatherPullKernel<uint64_t>, blocks, stream, args, vec);
      break;
  }
  COLLECTIVED_GPU_CHECK(gpuGetLastError());
  return Status::Ok();
}

}  // namespace collectived::device

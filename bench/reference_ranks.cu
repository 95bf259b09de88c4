// The yardstick for small-op latency (collective-bench -r 1): a plain
// one-shot float32 sum over n virtual ranks on one GPU, each rank's kernel on
// its own stream reading every input and writing its own output, between a
// start and an end barrier (one flag per block per rank, released and
// acquired at system scope). Nothing else: no op index, descriptor check,
// deadline, abort word or trace, which is what the project's kernels add per
// op. Blocks per rank as the plain reference's latency mode (SMs / n). Each
// block keeps its generation in device memory, so a captured graph replays
// without the host (the project's kernels must too).
#include <algorithm>
#include <memory>
#include <string>

#include "base/gpu/gpu_check.h"
#include "bench/rank_set.h"
#include "tests/support/virtual_ranks.h"

namespace collectived::bench {
namespace {

constexpr int kMaxRanks = 8;
constexpr int kFlagStride = 16;  // words between ranks' flags of one block: a 128-byte line each
constexpr int kThreads = 512;

__device__ __forceinline__ void StoreRelease(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long LoadAcquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Every rank's block b arrives at phase `phase` of generation `gen`. A spin
// that passes kStuckNs gives up and leaves what it waited for in `stuck`
// (the bench then stops with it, instead of hanging: on an H100, 2026-12-05,
// -r 1 hung with no hint). The clock is read every 1024 polls: a barrier of
// a small op ends within far fewer, so the yardstick pays nothing for it.
constexpr unsigned long long kStuckNs = 10'000'000'000ull;
struct Stuck {
  unsigned long long hit, phase, rank_waited, block, seen, gen, waiter;
};

__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// `shared_gen` is the block's generation in shared memory, read after the
// first __syncthreads, which publishes thread 0's write of it. (Passed by
// value it was read before that barrier: threads other than 0 spun for a
// stale shared value, a leftover of whatever kernel ran there before. On the
// H100, 2026-12-05, that was a generation far ahead, and -r 1 hung.)
__device__ void Barrier(unsigned long long* flags, int phase, int rank, int n, const unsigned long long* shared_gen,
                        Stuck* stuck) {
  unsigned long long* base = flags + (static_cast<size_t>(phase) * gridDim.x + blockIdx.x) * kMaxRanks * kFlagStride;
  __syncthreads();
  const unsigned long long gen = *shared_gen;
  if (threadIdx.x == 0) StoreRelease(base + rank * kFlagStride, gen);
  if (threadIdx.x < n) {
    unsigned long long seen, start = 0;
    for (unsigned spins = 0; (seen = LoadAcquire(base + threadIdx.x * kFlagStride)) < gen;) {
      if ((++spins & 1023) != 0) continue;
      // One stuck spin ends the rest at once: their ranks' generations no
      // longer agree, and each would wait its own 10 s, op after op.
      if (*reinterpret_cast<volatile unsigned long long*>(&stuck->hit) != 0) break;
      const unsigned long long now = GlobalTimerNs();
      if (start == 0) start = now;
      if (now - start > kStuckNs) {
        if (atomicCAS(&stuck->hit, 0ull, 1ull) == 0) {
          stuck->phase = phase, stuck->rank_waited = threadIdx.x, stuck->block = blockIdx.x;
          stuck->seen = seen, stuck->gen = gen, stuck->waiter = rank;
        }
        break;
      }
    }
  }
  __syncthreads();
}

struct RefArgs {
  const float* in[kMaxRanks];
  float* out;
  unsigned long long* flags;
  unsigned long long* gens;  // per rank, per block: ops this block ran
  Stuck* stuck;
  int rank;
  unsigned long long count;
};

template <int N>
__global__ void __launch_bounds__(kThreads, 2) RefOneShot(RefArgs a) {
  __shared__ unsigned long long gen;
  unsigned long long* mine = a.gens + static_cast<size_t>(a.rank) * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) gen = *mine + 1;
  Barrier(a.flags, 0, a.rank, N, &gen, a.stuck);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t n4 = a.count / 4;
  for (size_t i = first; i < n4; i += stride) {
    float4 acc = reinterpret_cast<const float4*>(a.in[0])[i];
#pragma unroll
    for (int r = 1; r < N; ++r) {
      const float4 v = reinterpret_cast<const float4*>(a.in[r])[i];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    reinterpret_cast<float4*>(a.out)[i] = acc;
  }
  for (size_t i = n4 * 4 + first; i < a.count; i += stride) {
    float acc = a.in[0][i];
#pragma unroll
    for (int r = 1; r < N; ++r) acc += a.in[r][i];
    a.out[i] = acc;
  }
  Barrier(a.flags, 1, a.rank, N, &gen, a.stuck);  // nobody leaves while a peer may still read its input
  if (threadIdx.x == 0) *mine = gen;
}

class ReferenceRanks : public RankSet {
 public:
  ~ReferenceRanks() override {
    if (flags_ != nullptr) gpuFree(flags_);
    if (gens_ != nullptr) gpuFree(gens_);
    if (stuck_ != nullptr) gpuFree(stuck_);
  }

  Status Init(uint32_t n, uint64_t in_bytes, uint64_t out_bytes) {
    if (n < 2 || n > kMaxRanks) return Status::InvalidArgument("the reference runs 2 to 8 ranks");
    COLLECTIVED_RETURN_IF_ERROR(vr_.Init(n, in_bytes, out_bytes));
    int sms = 0;
    COLLECTIVED_GPU_CHECK(gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, 0));
    blocks_ = std::max<uint32_t>(1, static_cast<uint32_t>(sms) / n);
    const size_t flag_words = 2ull * blocks_ * kMaxRanks * kFlagStride;
    COLLECTIVED_GPU_CHECK(gpuMalloc(reinterpret_cast<void**>(&flags_), flag_words * 8));
    COLLECTIVED_GPU_CHECK(gpuMemset(flags_, 0, flag_words * 8));
    COLLECTIVED_GPU_CHECK(gpuMalloc(reinterpret_cast<void**>(&gens_), size_t{n} * blocks_ * 8));
    COLLECTIVED_GPU_CHECK(gpuMemset(gens_, 0, size_t{n} * blocks_ * 8));
    COLLECTIVED_GPU_CHECK(gpuMalloc(reinterpret_cast<void**>(&stuck_), sizeof(Stuck)));
    COLLECTIVED_GPU_CHECK(gpuMemset(stuck_, 0, sizeof(Stuck)));
    COLLECTIVED_GPU_CHECK(gpuDeviceSynchronize());
    for (uint32_t r = 0; r < n; ++r) local_.push_back(r);
    return Status::Ok();
  }
  uint32_t world() const override { return vr_.world(); }
  const std::vector<uint32_t>& local() const override { return local_; }
  gpuStream_t stream(uint32_t r) const override { return vr_.stream(r); }
  Status Prepare(const OpSpec& spec, uint64_t seed, uint64_t count, bool in_place) override {
    COLLECTIVED_RETURN_IF_ERROR(Supported(spec, in_place));
    return vr_.Prepare(spec.dtype, spec.op, false, seed, count, false);
  }
  Status Enqueue(const OpSpec& spec, uint64_t count, bool in_place) override {
    COLLECTIVED_RETURN_IF_ERROR(Supported(spec, in_place));
    const uint32_t n = vr_.world();
    for (uint32_t r = 0; r < n; ++r) {
      RefArgs a{};
      for (uint32_t k = 0; k < n; ++k) a.in[k] = static_cast<const float*>(vr_.in(k));
      a.out = static_cast<float*>(vr_.out(r));
      a.flags = flags_;
      a.gens = gens_;
      a.stuck = stuck_;
      a.rank = static_cast<int>(r);
      a.count = count;
      switch (n) {
        case 2: RefOneShot<2><<<blocks_, kThreads, 0, vr_.stream(r)>>>(a); break;
        case 3: RefOneShot<3><<<blocks_, kThreads, 0, vr_.stream(r)>>>(a); break;
        case 4: RefOneShot<4><<<blocks_, kThreads, 0, vr_.stream(r)>>>(a); break;
        case 5: RefOneShot<5><<<blocks_, kThreads, 0, vr_.stream(r)>>>(a); break;
        case 6: RefOneShot<6><<<blocks_, kThreads, 0, vr_.stream(r)>>>(a); break;
        case 7: RefOneShot<7><<<blocks_, kThreads, 0, vr_.stream(r)>>>(a); break;
        default: RefOneShot<8><<<blocks_, kThreads, 0, vr_.stream(r)>>>(a); break;
      }
      COLLECTIVED_GPU_CHECK(gpuGetLastError());
    }
    return Status::Ok();
  }
  Status Sync() override {
    COLLECTIVED_RETURN_IF_ERROR(vr_.Sync());
    Stuck st{};
    COLLECTIVED_GPU_CHECK(gpuMemcpy(&st, stuck_, sizeof(st), gpuMemcpyDeviceToHost));
    if (st.hit == 0) return Status::Ok();
    return Status::DeadlineExceeded(
        "reference kernel: rank " + std::to_string(st.waiter) + " block " + std::to_string(st.block) + " waited " +
        std::to_string(kStuckNs / 1'000'000'000) + " s in the " + (st.phase == 0 ? "start" : "end") +
        " barrier for rank " + std::to_string(st.rank_waited) + "'s flag to reach " + std::to_string(st.gen) +
        "; it held " + std::to_string(st.seen) + " (" + std::to_string(blocks_) + " blocks per rank)");
  }
  uint64_t Wrong(const OpSpec& spec, uint64_t seed, uint64_t count) override {
    return vr_.Wrong(spec.dtype, spec.op, false, seed, count);
  }
  std::string Describe() const override {
    return "reference: plain one-shot, " + std::to_string(vr_.world()) + " virtual ranks on one GPU, " +
           std::to_string(blocks_) + " blocks per rank";
  }

 private:
  static Status Supported(const OpSpec& spec, bool in_place) {
    if (spec.gather || spec.dtype != DataType::kFloat32 || spec.op != ReduceOp::kSum || in_place) {
      return Status::InvalidArgument("the reference is an out-of-place float32 sum all-reduce only");
    }
    return Status::Ok();
  }

  testing::VirtualRanks vr_;
  std::vector<uint32_t> local_;
  uint32_t blocks_ = 1;
  unsigned long long* flags_ = nullptr;
  unsigned long long* gens_ = nullptr;
  Stuck* stuck_ = nullptr;
};

}  // namespace

Status MakeReferenceRanks(uint32_t n, uint64_t in_bytes, uint64_t out_bytes, std::unique_ptr<RankSet>* out) {
  auto r = std::make_unique<ReferenceRanks>();
  COLLECTIVED_RETURN_IF_ERROR(r->Init(n, in_bytes, out_bytes));
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace collectived::bench

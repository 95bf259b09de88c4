// n ranks on one GPU inside one process, each with its own stream, sharing a
// communicator's flags: the in-process baseline for the GPU kernels (tests
// and collective-bench). No daemon involved.
#ifndef COLLECTIVED_TESTS_SUPPORT_VIRTUAL_RANKS_H_
#define COLLECTIVED_TESTS_SUPPORT_VIRTUAL_RANKS_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/device/device_collectives.h"
#include "base/gpu/gpu_check.h"
#include "tests/support/exact_data.h"
#include "tests/support/gpu_upload.h"

namespace collectived::testing {

class VirtualRanks {
 public:
  // Per-rank device buffers of `in_bytes` (input) and `out_bytes` (output).
  Status Init(uint32_t world, uint64_t in_bytes, uint64_t out_bytes, uint64_t timeout_ns = 2'000'000'000) {
    world_ = world;
    timeout_ns_ = timeout_ns;
    COLLECTIVED_RETURN_IF_ERROR(device::PreloadKernels());
    const uint64_t words = ring::kFlagWords + 8 * 64 + uint64_t{ring::kMaxDeviceRanks} * ring::kMaxBlocks +
                           2 * ring::kClaimStrideWords;
    COLLECTIVED_GPU_CHECK(gpuMalloc(reinterpret_cast<void**>(&words_), words * 8));
    COLLECTIVED_GPU_CHECK(gpuMemset(words_, 0, words * 8));
    void* mapped = nullptr;
    COLLECTIVED_GPU_CHECK(gpuHostAlloc(&mapped, world * 4 * 8, gpuHostAllocMapped));
    std::memset(mapped, 0, world * 4 * 8);
    host_alloc_ = mapped;
    void* dev = nullptr;
    COLLECTIVED_GPU_CHECK(gpuHostGetDevicePointer(&dev, mapped, 0));
    host_words_ = static_cast<uint64_t*>(dev);
    streams_.resize(world);
    in_.resize(world);
    out_.resize(world);
    for (uint32_t r = 0; r < world; ++r) {
      COLLECTIVED_GPU_CHECK(gpuStreamCreate(&streams_[r]));
      COLLECTIVED_GPU_CHECK(gpuMalloc(&in_[r], in_bytes));
      COLLECTIVED_GPU_CHECK(gpuMalloc(&out_[r], out_bytes));
    }
    return Status::Ok();
  }
  ~VirtualRanks() {
    for (auto s : streams_) gpuStreamDestroy(s);
    for (auto p : in_) gpuFree(p);
    for (auto p : out_) gpuFree(p);
    if (words_) gpuFree(words_);
    if (host_alloc_) gpuFreeHost(host_alloc_);
  }

  uint32_t world() const { return world_; }
  gpuStream_t stream(uint32_t r) const { return streams_[r]; }
  void* in(uint32_t r) const { return in_[r]; }
  void* out(uint32_t r) const { return out_[r]; }
  // Device words: flags, then per rank: counter, op index, done; abort; error.
  uint64_t* flags() const { return words_; }
  uint64_t* counter(uint32_t r) const { return words_ + ring::kFlagWords + r * 8; }
  uint64_t* op_index(uint32_t r) const { return words_ + ring::kFlagWords + r * 8 + 1; }
  uint64_t* done(uint32_t r) const { return words_ + ring::kFlagWords + r * 8 + 2; }
  uint32_t* finished(uint32_t r) const { return reinterpret_cast<uint32_t*>(words_ + ring::kFlagWords + r * 8 + 3); }
  // Single-launch mode: the verdict the kernel copies from the error word when it completes an op.
  int32_t* status_mirror(uint32_t r) const { return reinterpret_cast<int32_t*>(words_ + ring::kFlagWords + r * 8 + 4); }
  // Host-mapped, as the client library keeps them (device views): rank r's
  // failure record (DeviceOpArgs::failed_gen, rank_error; every op records
  // into it) and, in gen-mirror mode, the word each op's block 0 stores its
  // generation in (DeviceOpArgs::gen_mirror).
  uint64_t* gen_mirror(uint32_t r) const { return host_words_ + r * 4; }
  uint64_t* failed_gen(uint32_t r) const { return host_words_ + r * 4 + 1; }
  int32_t* rank_error(uint32_t r) const { return reinterpret_cast<int32_t*>(host_words_ + r * 4 + 2); }
  uint64_t* abort_word() const { return words_ + ring::kFlagWords + 8 * 60; }
  // Rank r's block completion words (DeviceOpArgs::block_done), after the above.
  uint64_t* block_done(uint32_t r) const { return words_ + ring::kFlagWords + 8 * 64 + r * ring::kMaxBlocks; }
  // The claim counters (DeviceOpArgs::claims), after the block words.
  uint32_t* claims() const {
    return reinterpret_cast<uint32_t*>(words_ + ring::kFlagWords + 8 * 64 + uint64_t{ring::kMaxDeviceRanks} * ring::kMaxBlocks);
  }
  // Two-shot push claims its work (DeviceOpArgs::claims), as the client
  // library runs ranks that share a GPU, which these do; off: the static split
  // (--gpu-static-two-shot).
  void SetClaims(bool on) { claims_on_ = on; }
  // With claims on: whether the next ops claim their work (claim_work), as
  // the client library decides op by op (ring::TwoShotClaimsPay); the
  // counters stay in every op's arguments either way.
  void SetClaimWork(bool on) { claim_work_ = on; }
  // Single launch with a completion word per block (as the client library
  // runs its ops) instead of done; every op must then run the same blocks.
  void SetPerBlockCompletion(bool on) { per_block_ = on; }
  // Single launch: whether the kernel copies its verdict to status_mirror
  // (eager ops of the client library do; captured ones do not).
  void SetStatusMirror(bool on) { status_mirror_on_ = on; }
  // Single launch: the op's generation to gen_mirror instead of its
  // verdict to status_mirror (the client library's eager zero-copy ops).
  void SetGenMirror(bool on) { gen_mirror_on_ = on; }
  // Start flags published with a release (DeviceOpArgs::start_flag_release).
  void SetStartFlagRelease(bool on) { start_flag_release_ = on; }
  // The end flag's fence at GPU scope (DeviceOpArgs::end_fence_gpu_scope):
  // on by default, as the client library runs ranks that share a GPU, which
  // these do; off puts system scope back (--gpu-system-end-fence).
  void SetEndFenceGpuScope(bool on) { end_fence_gpu_scope_ = on; }
  // Ops of rank r completed, as a reader of the window counts them
  // (ring::CompletedOps over `blocks` block words).
  uint64_t Completed(uint32_t r, uint32_t blocks) const {
    std::vector<uint64_t> b(ring::kMaxBlocks);
    if (gpuMemcpy(b.data(), block_done(r), b.size() * 8, gpuMemcpyDeviceToHost) != gpuSuccess) return UINT64_MAX;
    return ring::CompletedOps(Word(done(r)), b.data(), blocks);
  }
  // Single launch: no post/complete kernels; the collective kernel takes its
  // generation from done and publishes done itself.
  void SetSingleLaunch(bool on) { single_launch_ = on; }
  // The latency breakdown (collective-bench -S): ring::kSkip* bits on every
  // kernel, plus kBenchSkipEndBarrier for the end barrier (timing only).
  static constexpr uint32_t kBenchSkipEndBarrier = 32;
  void SetBenchSkip(uint32_t bits) { bench_skip_ = bits; }
  int32_t* error_word() const { return reinterpret_cast<int32_t*>(words_ + ring::kFlagWords + 8 * 61); }
  // All-gathers pull (each rank writes only its own output) instead of push.
  void SetGatherPull(bool on) { gather_pull_ = on; }
  // Rank r's kernel describes its op with `count + skew` (a rank that
  // disagrees with its peers, for the device-side matcher's test).
  void SetDescriptorSkew(uint32_t rank, uint64_t skew) { skew_rank_ = rank, skew_ = skew; }

  device::DeviceRankArgs Args(uint32_t rank, uint64_t count, bool in_place) const {
    device::DeviceRankArgs a;
    a.rank = rank;
    a.world = world_;
    a.count = count;
    for (uint32_t k = 0; k < world_; ++k) {
      a.inputs[k] = in_place ? out_[k] : in_[k];
      a.outputs[k] = out_[k];
    }
    a.flags = flags();
    a.op_index = single_launch_ ? nullptr : op_index(rank);
    a.index_word = single_launch_ ? op_index(rank) : nullptr;  // as the client library passes them
    a.status_mirror = single_launch_ && status_mirror_on_ && !gen_mirror_on_ ? status_mirror(rank) : nullptr;
    a.gen_mirror = single_launch_ && gen_mirror_on_ ? gen_mirror(rank) : nullptr;
    a.failed_gen = failed_gen(rank);
    a.rank_error = rank_error(rank);
    a.block_done = per_block_ ? block_done(rank) : nullptr;
    a.done = done(rank);
    a.finished = finished(rank);
    a.counter = counter(rank);
    a.abort_word = abort_word();
    a.error_word = error_word();
    a.timeout_ns = timeout_ns_;
    a.match_descriptors = true;
    a.desc[0] = count + (rank == skew_rank_ ? skew_ : 0);
    a.bench_skip = bench_skip_ & ~kBenchSkipEndBarrier;
    a.unsafe_skip_end_barrier = (bench_skip_ & kBenchSkipEndBarrier) != 0;
    a.start_flag_release = start_flag_release_;
    a.end_fence_gpu_scope = end_fence_gpu_scope_;
    a.claims = claims_on_ ? claims() : nullptr;
    a.claim_work = claims_on_ && claim_work_;  // at every size unless told: the tests' ops are small
    return a;
  }

  // Enqueues rank r's all-reduce on its stream (post, kernel, complete; or the
  // kernel alone in single-launch mode).
  Status AllReduceOn(uint32_t r, DataType dt, ReduceOp op, device::DeviceAlgorithm algo, uint64_t count,
                     bool in_place, uint32_t blocks) {
    if (!single_launch_) COLLECTIVED_RETURN_IF_ERROR(ring::LaunchPost(counter(r), op_index(r), streams_[r]));
    COLLECTIVED_RETURN_IF_ERROR(device::LaunchAllReduce(dt, op, algo, Args(r, count, in_place), blocks, streams_[r]));
    if (!single_launch_) COLLECTIVED_RETURN_IF_ERROR(ring::LaunchComplete(op_index(r), done(r), streams_[r]));
    return Status::Ok();
  }
  // Every rank's all-reduce, each on its own stream.
  Status AllReduce(DataType dt, ReduceOp op, device::DeviceAlgorithm algo, uint64_t count, bool in_place,
                   uint32_t blocks) {
    for (uint32_t r = 0; r < world_; ++r) {
      COLLECTIVED_RETURN_IF_ERROR(AllReduceOn(r, dt, op, algo, count, in_place, blocks));
    }
    return Status::Ok();
  }
  // Rank r's all-gather arguments. In place: rank k's input is its output's
  // k-th chunk.
  device::DeviceRankArgs GatherArgs(uint32_t r, DataType dt, uint64_t count, bool in_place) const {
    device::DeviceRankArgs a = Args(r, count, false);
    for (uint32_t k = 0; k < world_; ++k) {
      a.inputs[k] = in_place ? static_cast<uint8_t*>(out_[k]) + k * count * DataTypeSize(dt) : in_[k];
    }
    return a;
  }
  // In place: rank r's input is its output's r-th chunk.
  Status AllGather(DataType dt, uint64_t count, bool in_place, uint32_t blocks) {
    for (uint32_t r = 0; r < world_; ++r) {
      device::DeviceRankArgs a = GatherArgs(r, dt, count, in_place);
      if (!single_launch_) COLLECTIVED_RETURN_IF_ERROR(ring::LaunchPost(counter(r), op_index(r), streams_[r]));
      if (gather_pull_) {
        a.own_output_only = true;
        for (uint32_t k = 0; k < world_; ++k) {
          if (k != r) a.outputs[k] = nullptr;
        }
      }
      COLLECTIVED_RETURN_IF_ERROR(device::LaunchAllGather(
          dt, a, blocks, streams_[r], gather_pull_ ? device::GatherAlgorithm::kPull : device::GatherAlgorithm::kPush));
      if (!single_launch_) COLLECTIVED_RETURN_IF_ERROR(ring::LaunchComplete(op_index(r), done(r), streams_[r]));
    }
    return Status::Ok();
  }
  // Exact inputs (seeded) for every rank, outputs poisoned. In place, the
  // input goes into the output (all-reduce) or its rank-th chunk (all-gather).
  Status Prepare(DataType dt, ReduceOp op, bool gather, uint64_t seed, uint64_t count, bool in_place) {
    const size_t es = DataTypeSize(dt);
    const uint64_t out_count = gather ? world_ * count : count;
    std::vector<uint8_t> host(out_count * es);
    for (uint32_t r = 0; r < world_; ++r) {
      testing::Poison(dt, host.data(), out_count);
      COLLECTIVED_RETURN_IF_ERROR(UploadToDevice(out_[r], host.data(), out_count * es));
      testing::FillInput(dt, gather ? ReduceOp::kUnspecified : op, r, seed, host.data(), count);
      void* dst = in_[r];
      if (in_place) dst = gather ? static_cast<uint8_t*>(out_[r]) + r * count * es : out_[r];
      COLLECTIVED_RETURN_IF_ERROR(UploadToDevice(dst, host.data(), count * es));
    }
    return Status::Ok();
  }
  // Wrong elements over every rank's output (every element when the device
  // reported an error).
  uint64_t Wrong(DataType dt, ReduceOp op, bool gather, uint64_t seed, uint64_t count) {
    const size_t es = DataTypeSize(dt);
    const uint64_t out_count = gather ? world_ * count : count;
    if (Error() != 0) return out_count * world_;
    std::vector<uint8_t> host(out_count * es);
    uint64_t wrong = 0;
    for (uint32_t r = 0; r < world_; ++r) {
      if (gpuMemcpy(host.data(), out_[r], out_count * es, gpuMemcpyDeviceToHost) != gpuSuccess) return out_count * world_;
      wrong += gather ? testing::CountWrongAllGather(dt, world_, seed, host.data(), count)
                      : testing::CountWrongAllReduce(dt, op, world_, seed, host.data(), count);
    }
    return wrong;
  }

  Status Sync() {
    for (auto s : streams_) COLLECTIVED_GPU_CHECK(gpuStreamSynchronize(s));
    return Status::Ok();
  }
  int32_t Error() const {
    int32_t e = 0;
    gpuMemcpy(&e, error_word(), sizeof(e), gpuMemcpyDeviceToHost);
    return e;
  }
  int32_t Word32(const int32_t* p) const {
    int32_t v = 0;
    gpuMemcpy(&v, p, sizeof(v), gpuMemcpyDeviceToHost);
    return v;
  }
  uint64_t Word(const uint64_t* p) const {
    uint64_t v = 0;
    gpuMemcpy(&v, p, sizeof(v), gpuMemcpyDeviceToHost);
    return v;
  }

 private:
  uint32_t world_ = 0;
  bool single_launch_ = false;
  bool per_block_ = false;
  bool status_mirror_on_ = true;
  bool gen_mirror_on_ = false;
  bool start_flag_release_ = false;
  bool end_fence_gpu_scope_ = true;
  bool claims_on_ = true;
  bool claim_work_ = true;
  bool gather_pull_ = false;
  uint32_t skew_rank_ = UINT32_MAX;
  uint64_t skew_ = 0;
  uint64_t timeout_ns_ = 0;
  uint32_t bench_skip_ = 0;
  uint64_t* words_ = nullptr;
  void* host_alloc_ = nullptr;       // the host-mapped words (host view)
  uint64_t* host_words_ = nullptr;   // and their device view
  std::vector<gpuStream_t> streams_;
  std::vector<void*> in_, out_;
};

}  // namespace collectived::testing

#endif  // COLLECTIVED_TESTS_SUPPORT_VIRTUAL_RANKS_H_

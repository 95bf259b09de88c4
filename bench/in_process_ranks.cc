// The in-process baseline: VirtualRanks straight on the kernels.
#include "bench/rank_set.h"
#include "base/gpu/gpu_check.h"
#include "tests/support/virtual_ranks.h"

namespace collectived::bench {
namespace {

class InProcessRanks : public RankSet {
 public:
  Status Init(uint32_t n, uint64_t in_bytes, uint64_t out_bytes, bool single_launch, int blocks_per_sm,
              uint32_t blocks, uint32_t bench_skip) {
    COLLECTIVED_RETURN_IF_ERROR(vr_.Init(n, in_bytes, out_bytes));
    vr_.SetSingleLaunch(single_launch);
    vr_.SetBenchSkip(bench_skip);
    bench_skip_ = bench_skip;
    int sms = 0;
    COLLECTIVED_GPU_CHECK(gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, 0));
    blocks_ = std::max<uint32_t>(1, std::min<uint32_t>(device::kMaxBlocks, blocks_per_sm * sms / n));
    if (blocks != 0) blocks_ = std::min<uint32_t>(device::kMaxBlocks, blocks);
    for (uint32_t r = 0; r < n; ++r) local_.push_back(r);
    single_launch_ = single_launch;
    return Status::Ok();
  }
  // 1: block completion words instead of done, and no verdict copy (the
  // client library's captured ops); 2: and the generation copied (its eager
  // zero-copy ops); every op runs blocks_ blocks.
  void SetPerBlockCompletion(int mode) {
    vr_.SetPerBlockCompletion(mode != 0);
    vr_.SetStatusMirror(mode == 0);
    vr_.SetGenMirror(mode == 2);
    per_block_ = mode;
  }
  uint32_t world() const override { return vr_.world(); }
  const std::vector<uint32_t>& local() const override { return local_; }
  gpuStream_t stream(uint32_t r) const override { return vr_.stream(r); }
  Status Prepare(const OpSpec& spec, uint64_t seed, uint64_t count, bool in_place) override {
    return vr_.Prepare(spec.dtype, spec.op, spec.gather, seed, count, in_place);
  }
  Status Enqueue(const OpSpec& spec, uint64_t count, bool in_place) override {
    if (spec.gather && spec.algo == "fused") {  // one launch for every rank, no barriers
      return device::LaunchFusedAllGather(spec.dtype, vr_.GatherArgs(0, spec.dtype, count, in_place),
                                          device::kMaxBlocks, vr_.stream(0));
    }
    if (spec.gather) return vr_.AllGather(spec.dtype, count, in_place, blocks_);
    if (spec.algo == "fused") {
      return device::LaunchFusedAllReduce(spec.dtype, spec.op, vr_.Args(0, count, in_place), device::kMaxBlocks,
                                          vr_.stream(0));
    }
    const uint64_t bytes = count * DataTypeSize(spec.dtype);
    device::DeviceAlgorithm algo = bytes <= (256u << 10) ? device::DeviceAlgorithm::kOneShot
                                                         : device::DeviceAlgorithm::kTwoShotPush;
    if (spec.algo == "oneshot") algo = device::DeviceAlgorithm::kOneShot;
    if (spec.algo == "twoshot") algo = device::DeviceAlgorithm::kTwoShotPush;
    return vr_.AllReduce(spec.dtype, spec.op, algo, count, in_place, blocks_);
  }
  Status Sync() override {
    COLLECTIVED_RETURN_IF_ERROR(vr_.Sync());
    if (vr_.Error() != 0) return Status::Internal("device error " + std::to_string(vr_.Error()));
    return Status::Ok();
  }
  uint64_t Wrong(const OpSpec& spec, uint64_t seed, uint64_t count) override {
    return vr_.Wrong(spec.dtype, spec.op, spec.gather, seed, count);
  }
  std::string Describe() const override {
    return "in-process baseline: " + std::to_string(vr_.world()) + " virtual ranks on one GPU, " +
           std::to_string(blocks_) + " blocks per rank, " + (single_launch_ ? "single launch" : "post/complete") +
           (bench_skip_ != 0 ? ", parts left out (-S) " + std::to_string(bench_skip_) : "") +
           (per_block_ == 1 ? ", a completion word per block (-P 1)"
            : per_block_ == 2 ? ", a completion word per block, the generation copied (-P 2)"
                              : "");
  }

 private:
  testing::VirtualRanks vr_;
  std::vector<uint32_t> local_;
  uint32_t blocks_ = 1;
  bool single_launch_ = true;
  uint32_t bench_skip_ = 0;
  int per_block_ = 0;
};

}  // namespace

Status MakeInProcessRanks(uint32_t n, uint64_t in_bytes, uint64_t out_bytes, bool single_launch, int blocks_per_sm,
                          uint32_t blocks, uint32_t bench_skip, int per_block, std::unique_ptr<RankSet>* out) {
  auto r = std::make_unique<InProcessRanks>();
  COLLECTIVED_RETURN_IF_ERROR(r->Init(n, in_bytes, out_bytes, single_launch, blocks_per_sm, blocks, bench_skip));
  r->SetPerBlockCompletion(per_block);
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace collectived::bench

// GPU tests of the device collectives with n virtual ranks on one GPU (label
// gpu; skipped without a GPU): every dtype x op x algorithm, in and out of
// place, all-gather, ops larger than the L2 (streaming accesses), deadlines
// and aborts, graph replay with changing sizes and values, a delayed rank,
// ops under the programmatic-launch bench bit, and cross-stream waits after a
// delayed epilogue.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/device/device_collectives.h"
#include "base/gpu/gpu_check.h"
#include "tests/support/exact_data.h"
#include "tests/support/virtual_ranks.h"

namespace collectived::device {
namespace {

// The op protocol's launchers, beside the data kernels under test.
using ring::LaunchComplete;
using ring::LaunchPost;
using ring::LaunchWait;

using testing::VirtualRanks;

bool HaveGpu() {
  int n = 0;
  return gpuGetDeviceCount(&n) == gpuSuccess && n > 0;
}
#define REQUIRE_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine"

uint32_t BlocksFor(uint32_t world) {
  int dev = 0, sms = 0;
  gpuGetDevice(&dev);
  gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, dev);
  // Every rank's kernel must be resident at once: share the SMs' block slots.
  return std::max<uint32_t>(1, std::min<uint32_t>(kMaxBlocks, kResidentBlocksPerSm * sms / world));
}

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                               DataType::kInt32,   DataType::kInt64,   DataType::kUint32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};

TEST(DeviceCollectivesTest, LaunchersRefuseBadArguments) {
  DeviceRankArgs a;
  a.world = 2;
  a.rank = 2;
  a.count = 4;
  EXPECT_EQ(LaunchAllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, a, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  a.rank = 0;  // null buffers and flags
  EXPECT_EQ(LaunchAllGather(DataType::kFloat32, a, 4, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchAllReduce(DataType::kInt32, ReduceOp::kAvg, DeviceAlgorithm::kOneShot, a, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchWait(nullptr, nullptr, nullptr, nullptr, 0, nullptr).code(), StatusCode::kInvalidArgument);
  // Partially overlapping buffers are refused before anything is launched.
  static uint64_t fake[64];
  uint64_t words[4] = {};
  DeviceRankArgs b;
  b.world = 2;
  b.count = 8;
  b.flags = words;
  b.op_index = words;
  b.abort_word = words;
  b.error_word = reinterpret_cast<int32_t*>(words + 1);
  b.timeout_ns = 1;
  b.inputs[0] = fake;
  b.outputs[0] = fake + 1;  // input and output of rank 0 overlap by 7 words
  b.inputs[1] = fake + 20;
  b.outputs[1] = fake + 30;
  Status s = LaunchAllReduce(DataType::kInt64, ReduceOp::kSum, DeviceAlgorithm::kOneShot, b, 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("partially overlaps"), std::string::npos) << s.message();
  b.outputs[0] = fake + 24;  // rank 0's output overlaps rank 1's input
  s = LaunchAllReduce(DataType::kInt64, ReduceOp::kSum, DeviceAlgorithm::kOneShot, b, 1, nullptr);
  EXPECT_NE(s.message().find("overlaps rank 1"), std::string::npos) << s.message();
}

// Two-shot with its work claimed (the default for ranks sharing a GPU) and
// split statically (--gpu-static-two-shot); one-shot ops between two-shot
// ones, so a claim counter is zeroed by ops of the other kind too.
TEST(DeviceCollectivesTest, AllReduceEveryTypeOpAlgorithmAndPlacement) {
  REQUIRE_GPU();
  struct Case {
    uint32_t n;
    bool claims;
  };
  for (Case c : {Case{2, true}, Case{2, false}, Case{3, true}, Case{3, false}, Case{8, true}, Case{8, false}}) {
    const uint32_t n = c.n;
    const bool claims = c.claims;
    const uint64_t max_count = 100003;
    VirtualRanks vr;
    ASSERT_TRUE(vr.Init(n, max_count * 8, max_count * 8).ok());
    vr.SetSingleLaunch(n == 3);  // post/complete launches for 2 and 8 ranks, single launch for 3
    vr.SetClaims(claims);
    uint64_t seed = 100;
    for (DataType dt : kTypes) {
      for (ReduceOp op : kOps) {
        if (!IsValidReduction(dt, op)) continue;
        for (DeviceAlgorithm algo : {DeviceAlgorithm::kOneShot, DeviceAlgorithm::kTwoShotPush}) {
          for (uint64_t count : {uint64_t{7}, max_count}) {
            for (bool in_place : {false, true}) {
              ++seed;
              ASSERT_TRUE(vr.Prepare(dt, op, false, seed, count, in_place).ok());
              ASSERT_TRUE(vr.AllReduce(dt, op, algo, count, in_place, BlocksFor(n)).ok());
              ASSERT_TRUE(vr.Sync().ok());
              ASSERT_EQ(vr.Error(), kDeviceOk);
              EXPECT_EQ(vr.Wrong(dt, op, false, seed, count), 0u)
                  << "n=" << n << " " << DataTypeName(dt) << " " << ReduceOpName(op)
                  << (algo == DeviceAlgorithm::kOneShot ? " one-shot" : " two-shot") << " count=" << count
                  << (in_place ? " in place" : "") << (claims ? " claimed" : " static");
            }
          }
        }
      }
    }
  }
}

// As the client library runs them: claimed and static two-shot ops on one
// set of counters, decided op by op, in every order (claimed after claimed,
// after static, and both after one-shot), at sizes below and above the L2
// (streaming accesses) and with a scalar tail.
TEST(DeviceCollectivesTest, ClaimedAndStaticTwoShotOpsInOneSequence) {
  REQUIRE_GPU();
  const uint64_t big = uint64_t{4} << 20;  // 16 MiB of float32 a rank: 2 x n x 16 MiB exceeds an H100 or H200 L2
  const bool claim[] = {true, true, false, true, false, false, true, true, false};
  for (uint32_t n : {2u, 8u}) {
    VirtualRanks vr;
    ASSERT_TRUE(vr.Init(n, big * 4, big * 4).ok());
    vr.SetSingleLaunch(n == 2);  // single launch for 2 ranks, post/complete launches for 8
    uint64_t seed = 900;
    int step = 0;
    for (uint64_t count : {uint64_t{100003}, big, big - 3}) {
      for (bool work : claim) {
        ++seed;
        ++step;
        const DeviceAlgorithm algo = step % 5 == 0 ? DeviceAlgorithm::kOneShot : DeviceAlgorithm::kTwoShotPush;
        const bool in_place = step % 3 == 0;
        vr.SetClaimWork(work);
        ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, seed, count, in_place).ok());
        ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, algo, count, in_place, BlocksFor(n)).ok());
        ASSERT_TRUE(vr.Sync().ok());
        ASSERT_EQ(vr.Error(), kDeviceOk);
        EXPECT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, seed, count), 0u)
            << "n=" << n << " step " << step << " count=" << count << (in_place ? " in place" : "")
            << (algo == DeviceAlgorithm::kOneShot ? " one-shot" : work ? " claimed" : " static");
      }
    }
  }
}

// One all-gather of `count` elements per rank in each form: push and pull
// (each rank writes only its own output, peers' unmapped), in and out of
// place; every element checked. `blocks` per rank, BlocksFor(n) where 0.
// Leaves the ranks pushing.
void ExpectAllGathersExact(VirtualRanks* vr, uint32_t n, DataType dt, uint64_t count, uint64_t* seed,
                           uint32_t blocks = 0) {
  for (int variant = 0; variant < 4; ++variant) {
    const bool in_place = variant & 1;
    const bool pull = variant & 2;
    vr->SetGatherPull(pull);
    ++*seed;
    ASSERT_TRUE(vr->Prepare(dt, ReduceOp::kUnspecified, true, *seed, count, in_place).ok());
    ASSERT_TRUE(vr->AllGather(dt, count, in_place, blocks != 0 ? blocks : BlocksFor(n)).ok());
    ASSERT_TRUE(vr->Sync().ok());
    ASSERT_EQ(vr->Error(), kDeviceOk);
    EXPECT_EQ(vr->Wrong(dt, ReduceOp::kUnspecified, true, *seed, count), 0u)
        << "n=" << n << " " << DataTypeName(dt) << " count=" << count << (in_place ? " in place" : "")
        << (pull ? " pull" : " push");
  }
  vr->SetGatherPull(false);
}

TEST(DeviceCollectivesTest, AllGatherEveryElementSize) {
  REQUIRE_GPU();
  for (uint32_t n : {2u, 3u, 8u}) {
    const uint64_t max_count = 65539;
    VirtualRanks vr;
    ASSERT_TRUE(vr.Init(n, max_count * 8, n * max_count * 8).ok());
    vr.SetSingleLaunch(n != 3);
    uint64_t seed = 7;
    for (DataType dt : {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64}) {
      for (uint64_t count : {uint64_t{5}, uint64_t{65536}, max_count}) {
        ASSERT_NO_FATAL_FAILURE(ExpectAllGathersExact(&vr, n, dt, count, &seed));
      }
    }
  }
}

// The data loops take packs in groups a grid's width apart and finish with
// the packs left over (ReduceRange: one at a time; BroadcastPacks: in
// guarded half groups where the inputs stay in L2, push and fused). With two
// blocks the grid is small, so these counts give whole groups and then a
// rest that some threads have and others not, at several lengths; odd counts
// leave scalar elements too. Every element checked, every algorithm, in and
// out of place, push and pull.
TEST(DeviceCollectivesTest, RaggedLastGroupsAreExact) {
  REQUIRE_GPU();
  constexpr uint32_t kBlocks = 2;
  constexpr uint64_t kGrid = kBlocks * 512;  // threads, as the kernels launch them
  for (uint32_t n : {2u, 3u, 8u}) {
    // Packs: two whole groups of four (float32's reduce unroll), then 0.3,
    // 3.9, 5.5 and 7.7 grids of packs; the all-gather's group is eight
    // packs, so its rest takes one or two half groups.
    const uint64_t max_count = 16 * kGrid * 4 * n + 64;
    VirtualRanks vr;
    ASSERT_TRUE(vr.Init(n, max_count * 4, n * max_count * 4).ok());
    vr.SetSingleLaunch(true);
    uint64_t seed = 900;
    for (uint64_t tail : {kGrid * 3 / 10, kGrid * 39 / 10, kGrid * 55 / 10, kGrid * 77 / 10}) {
      for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
        const uint64_t per_pack = dt == DataType::kFloat32 ? 4 : 8;
        const uint64_t packs = 2 * 4 * kGrid + tail;
        // Two-shot: each rank's chunk is `packs`; one-shot: the whole range.
        for (DeviceAlgorithm algo : {DeviceAlgorithm::kOneShot, DeviceAlgorithm::kTwoShotPush}) {
          const uint64_t count = packs * per_pack * (algo == DeviceAlgorithm::kTwoShotPush ? n : 1) - 3;
          for (bool in_place : {false, true}) {
            ++seed;
            ASSERT_TRUE(vr.Prepare(dt, ReduceOp::kSum, false, seed, count, in_place).ok());
            ASSERT_TRUE(vr.AllReduce(dt, ReduceOp::kSum, algo, count, in_place, kBlocks).ok());
            ASSERT_TRUE(vr.Sync().ok());
            ASSERT_EQ(vr.Error(), kDeviceOk);
            EXPECT_EQ(vr.Wrong(dt, ReduceOp::kSum, false, seed, count), 0u)
                << "n=" << n << " " << DataTypeName(dt) << " tail=" << tail
                << (algo == DeviceAlgorithm::kOneShot ? " one-shot" : " two-shot") << (in_place ? " in place" : "");
          }
        }
        // All-gather: two whole groups of eight, then the tail in halves.
        const uint64_t count = (2 * 8 * kGrid + tail) * per_pack - 3;
        ASSERT_NO_FATAL_FAILURE(ExpectAllGathersExact(&vr, n, dt, count, &seed, kBlocks)) << "tail=" << tail;
      }
    }
  }
}

TEST(DeviceCollectivesTest, FusedAllReduceServesEveryRankInOneLaunch) {
  REQUIRE_GPU();
  const uint32_t n = 8;
  const uint64_t count = 1 << 20;
  VirtualRanks vr;
  ASSERT_TRUE(vr.Init(n, count * 4, count * 4).ok());
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
    for (bool in_place : {false, true}) {
      ASSERT_TRUE(vr.Prepare(dt, ReduceOp::kSum, false, 3, count, in_place).ok());
      ASSERT_TRUE(
          LaunchFusedAllReduce(dt, ReduceOp::kSum, vr.Args(0, count, in_place), kMaxBlocks, vr.stream(0)).ok());
      ASSERT_TRUE(vr.Sync().ok());
      EXPECT_EQ(vr.Wrong(dt, ReduceOp::kSum, false, 3, count), 0u) << DataTypeName(dt);
    }
  }
}

// Ops whose buffers exceed the L2 take the data loops' streaming (evict-first)
// accesses (ExceedsL2 in device_collectives.cu); smaller ones the plain path
// the tests above cover. Counts are odd, so packs and scalar tails both run.
// Each case fills and checks hundreds of MiB on the host (82 s on an H100 with
// every type x op x rank count): one type and op per rank count.
TEST(DeviceCollectivesTest, OpsLargerThanTheL2StreamAndStayExact) {
  REQUIRE_GPU();
  int dev = 0, l2 = 0;
  ASSERT_EQ(gpuGetDevice(&dev), gpuSuccess);
  ASSERT_EQ(gpuDeviceGetAttribute(&l2, gpuDevAttrL2CacheSize, dev), gpuSuccess);
  struct Case {
    uint32_t n;
    DataType dt;
    ReduceOp op;
  };
  for (const Case& c : {Case{2, DataType::kFloat32, ReduceOp::kSum}, Case{4, DataType::kBFloat16, ReduceOp::kMax}}) {
    const uint32_t n = c.n;
    const DataType dt = c.dt;
    const ReduceOp op = c.op;
    // Every rank's input alone is above L2 / n: inputs (and outputs) together exceed it.
    const uint64_t count = static_cast<uint64_t>(l2) / (n * 2) + 4099;  // 16-bit elements, the smallest here
    VirtualRanks vr;
    ASSERT_TRUE(vr.Init(n, count * 4, n * count * 4).ok());
    vr.SetSingleLaunch(true);
    uint64_t seed = 500;
    for (bool in_place : {false, true}) {
      ++seed;
      ASSERT_TRUE(vr.Prepare(dt, op, false, seed, count, in_place).ok());
      ASSERT_TRUE(vr.AllReduce(dt, op, DeviceAlgorithm::kTwoShotPush, count, in_place, BlocksFor(n)).ok());
      ASSERT_TRUE(vr.Sync().ok());
      ASSERT_EQ(vr.Error(), kDeviceOk);
      EXPECT_EQ(vr.Wrong(dt, op, false, seed, count), 0u)
          << "two-shot n=" << n << " " << DataTypeName(dt) << " " << ReduceOpName(op) << (in_place ? " in place" : "");
      ++seed;
      ASSERT_TRUE(vr.Prepare(dt, op, false, seed, count, in_place).ok());
      ASSERT_TRUE(LaunchFusedAllReduce(dt, op, vr.Args(0, count, in_place), kMaxBlocks, vr.stream(0)).ok());
      ASSERT_TRUE(vr.Sync().ok());
      EXPECT_EQ(vr.Wrong(dt, op, false, seed, count), 0u)
          << "fused n=" << n << " " << DataTypeName(dt) << " " << ReduceOpName(op) << (in_place ? " in place" : "");
    }
    // Pull reads every input from every rank: plain loads.
    ASSERT_NO_FATAL_FAILURE(ExpectAllGathersExact(&vr, n, dt, count, &seed));
    ++seed;
    ASSERT_TRUE(vr.Prepare(dt, ReduceOp::kUnspecified, true, seed, count, false).ok());
    ASSERT_TRUE(LaunchFusedAllGather(dt, vr.Args(0, count, false), kMaxBlocks, vr.stream(0)).ok());
    ASSERT_TRUE(vr.Sync().ok());
    EXPECT_EQ(vr.Wrong(dt, ReduceOp::kUnspecified, true, seed, count), 0u)
        << "fused all-gather n=" << n << " " << DataTypeName(dt);
  }
}

TEST(DeviceCollectivesTest, MissingRankEndsInDeadlineNotHang) {
  REQUIRE_GPU();
  VirtualRanks vr;
  ASSERT_TRUE(vr.Init(2, 4096, 4096, /*timeout_ns=*/50'000'000).ok());
  const auto t0 = std::chrono::steady_clock::now();
  // Only rank 0 launches; rank 1 never arrives.
  ASSERT_TRUE(LaunchPost(vr.counter(0), vr.op_index(0), vr.stream(0)).ok());
  ASSERT_TRUE(LaunchAllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, vr.Args(0, 64, false), 4,
                              vr.stream(0)).ok());
  ASSERT_EQ(gpuStreamSynchronize(vr.stream(0)), gpuSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(vr.Error(), kDeviceDeadline);
  EXPECT_EQ(vr.Word(vr.abort_word()), 1u);  // peers are released too
}

// Single-launch mode (the client library's zero-copy ops) has no complete
// kernel to run after a failure: the op kernel itself must complete the failed
// op (done, index, verdict), or waiters and the host verdict would see nothing.
// Also with a completion word per block (as the client library runs), with
// the verdict copied, without (captured), and with the generation copied
// instead (eager zero-copy ops: the verdict is the rank's failure record).
TEST(DeviceCollectivesTest, SingleLaunchCompletesAFailedOpWithItsVerdict) {
  REQUIRE_GPU();
  const uint32_t blocks = 4;
  for (int mode = 0; mode < 4; ++mode) {
    const bool per_block = mode > 0, mirror = mode < 2, gen_mirror = mode == 3;
    SCOPED_TRACE(!per_block ? "done"
                 : mirror   ? "block words, verdict copied"
                 : gen_mirror ? "block words, generation copied"
                              : "block words, no verdict copy");
    VirtualRanks vr;
    ASSERT_TRUE(vr.Init(2, 4096, 4096, /*timeout_ns=*/50'000'000).ok());
    vr.SetSingleLaunch(true);
    vr.SetPerBlockCompletion(per_block);
    vr.SetStatusMirror(mirror);
    vr.SetGenMirror(gen_mirror);
    static const int32_t unset = -1;  // poison: neither a verdict nor an index
    static const uint64_t no_index = ~uint64_t{0};
    // Only rank 0 launches; rank 1 never arrives.
    for (uint64_t op = 1; op <= 2; ++op) {
      ASSERT_EQ(gpuMemcpy(vr.status_mirror(0), &unset, sizeof(unset), gpuMemcpyHostToDevice), gpuSuccess);
      ASSERT_EQ(gpuMemcpy(vr.op_index(0), &no_index, sizeof(no_index), gpuMemcpyHostToDevice), gpuSuccess);
      ASSERT_EQ(gpuMemcpy(vr.gen_mirror(0), &no_index, sizeof(no_index), gpuMemcpyHostToDevice), gpuSuccess);
      const auto t0 = std::chrono::steady_clock::now();
      ASSERT_TRUE(LaunchAllGather(DataType::kFloat32, vr.Args(0, 64, false), blocks, vr.stream(0)).ok());
      ASSERT_EQ(gpuStreamSynchronize(vr.stream(0)), gpuSuccess);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
      EXPECT_EQ(vr.Completed(0, blocks), op);      // completed, though it failed
      EXPECT_EQ(vr.Word(vr.done(0)), per_block ? 0u : op);  // block words instead of done
      EXPECT_EQ(vr.Word(vr.op_index(0)), op - 1);  // what LaunchWait reads
      EXPECT_EQ(vr.Word(vr.counter(0)), op);       // posted count, for the daemon's stats
      EXPECT_EQ(vr.Word32(reinterpret_cast<int32_t*>(vr.finished(0))), 0);  // ready for the next op
      // The first op ran into its deadline; the second found the communicator
      // aborted. The verdict is the error word, which keeps the first error.
      EXPECT_EQ(vr.Word32(vr.status_mirror(0)), mirror ? kDeviceDeadline : unset) << "op " << op;
      EXPECT_EQ(vr.Word(vr.gen_mirror(0)), gen_mirror ? op : no_index) << "op " << op;
      // The rank's record keeps the first failed op: the second failed
      // after it (GenVerdict: failed, as failed_gen <= 2).
      EXPECT_EQ(vr.Word(vr.failed_gen(0)), 1u) << "op " << op;
      EXPECT_EQ(vr.Word32(vr.rank_error(0)), kDeviceDeadline) << "op " << op;
    }
    EXPECT_EQ(vr.Error(), kDeviceDeadline);
    EXPECT_EQ(vr.Word(vr.abort_word()), 1u);
  }
}

// Eager zero-copy ops as the client library runs them (block words, the
// generation copied): ops that succeed leave the rank's failure record empty
// and their generation in their word; a later failure records its own
// generation, not an earlier op's, so those earlier ops stay OK
// (GenVerdict). Then the peer fails its next op the same way: each rank's
// record names its own first failed op.
TEST(DeviceCollectivesTest, EagerOpsCarryTheirGenerationAndFailuresTheirOwn) {
  REQUIRE_GPU();
  const uint32_t n = 2, blocks = 4;
  const uint64_t count = 1000;
  VirtualRanks vr;
  ASSERT_TRUE(vr.Init(n, count * 4, count * 4, /*timeout_ns=*/50'000'000).ok());
  vr.SetSingleLaunch(true);
  vr.SetPerBlockCompletion(true);
  vr.SetGenMirror(true);
  static const uint64_t unset = ~uint64_t{0};
  for (uint64_t op = 1; op <= 3; ++op) {
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_EQ(gpuMemcpy(vr.gen_mirror(r), &unset, sizeof(unset), gpuMemcpyHostToDevice), gpuSuccess);
    }
    ASSERT_TRUE(vr.Prepare(DataType::kInt32, ReduceOp::kSum, false, op, count, false).ok());
    ASSERT_TRUE(vr.AllReduce(DataType::kInt32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, count, false, blocks).ok());
    ASSERT_TRUE(vr.Sync().ok());
    EXPECT_EQ(vr.Wrong(DataType::kInt32, ReduceOp::kSum, false, op, count), 0u) << "op " << op;
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(vr.Word(vr.gen_mirror(r)), op) << "rank " << r;
      EXPECT_EQ(vr.Word(vr.failed_gen(r)), 0u) << "rank " << r;
      EXPECT_EQ(vr.Word32(vr.rank_error(r)), kDeviceOk) << "rank " << r;
      EXPECT_EQ(vr.Completed(r, blocks), op) << "rank " << r;
    }
  }
  // Op 4: rank 0 alone; it runs into its deadline.
  ASSERT_TRUE(vr.AllReduceOn(0, DataType::kInt32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, count, false, blocks).ok());
  ASSERT_EQ(gpuStreamSynchronize(vr.stream(0)), gpuSuccess);
  EXPECT_EQ(vr.Word(vr.gen_mirror(0)), 4u);
  EXPECT_EQ(vr.Word(vr.failed_gen(0)), 4u);
  EXPECT_EQ(vr.Word32(vr.rank_error(0)), kDeviceDeadline);
  EXPECT_EQ(vr.Word(vr.failed_gen(1)), 0u);  // rank 1 ran nothing since
  // Rank 1's op 4 finds the communicator aborted at its begin.
  ASSERT_TRUE(vr.AllReduceOn(1, DataType::kInt32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, count, false, blocks).ok());
  ASSERT_EQ(gpuStreamSynchronize(vr.stream(1)), gpuSuccess);
  EXPECT_EQ(vr.Word(vr.gen_mirror(1)), 4u);
  EXPECT_EQ(vr.Word(vr.failed_gen(1)), 4u);
  EXPECT_EQ(vr.Word32(vr.rank_error(1)), kDeviceAborted);
  // Rank 0's op 5 fails too; its record keeps op 4.
  ASSERT_TRUE(vr.AllReduceOn(0, DataType::kInt32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, count, false, blocks).ok());
  ASSERT_EQ(gpuStreamSynchronize(vr.stream(0)), gpuSuccess);
  EXPECT_EQ(vr.Word(vr.gen_mirror(0)), 5u);
  EXPECT_EQ(vr.Word(vr.failed_gen(0)), 4u);
  EXPECT_EQ(vr.Word32(vr.rank_error(0)), kDeviceDeadline);
}

// The op trace of single-launch ops, past the kTraceDepth entries it keeps:
// every op's entry says posted, read, complete, in that order, and no entry
// shows an older op's times (a single launch cannot clear its own entry; the
// op before clears it). Every fourth op runs post/complete, so the modes mix.
TEST(DeviceCollectivesTest, SingleLaunchTraceEntriesStartCleared) {
  REQUIRE_GPU();
  const uint32_t n = 2;
  const uint64_t count = 1024;
  VirtualRanks vr;
  ASSERT_TRUE(vr.Init(n, count * 4, count * 4, /*timeout_ns=*/2'000'000'000).ok());
  const uint64_t words = kTraceDepth * kTraceEntryWords;
  uint64_t* trace = nullptr;
  ASSERT_EQ(gpuMalloc(&trace, n * words * sizeof(uint64_t)), gpuSuccess);
  ASSERT_EQ(gpuMemset(trace, 0, n * words * sizeof(uint64_t)), gpuSuccess);
  std::vector<uint64_t> host(n * words);
  uint64_t last_completed[n] = {};
  for (uint64_t op = 1; op <= kTraceDepth + 24; ++op) {
    const bool single = op % 4 != 0;
    vr.SetSingleLaunch(single);
    ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, op, count, false).ok());
    for (uint32_t r = 0; r < n; ++r) {
      DeviceRankArgs a = vr.Args(r, count, false);
      a.trace = trace + r * words;
      if (!single) {
        ASSERT_TRUE(LaunchPost(vr.counter(r), vr.op_index(r), vr.stream(r), nullptr, a.trace).ok());
      }
      ASSERT_TRUE(LaunchAllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kTwoShotPush, a, 4,
                                  vr.stream(r)).ok());
      if (!single) {
        ASSERT_TRUE(LaunchComplete(vr.op_index(r), vr.done(r), vr.stream(r), nullptr, nullptr, nullptr, a.trace).ok());
      }
    }
    ASSERT_TRUE(vr.Sync().ok());
    ASSERT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, op, count), 0u) << "op " << op;
    ASSERT_EQ(gpuMemcpy(host.data(), trace, host.size() * sizeof(uint64_t), gpuMemcpyDeviceToHost), gpuSuccess);
    for (uint32_t r = 0; r < n; ++r) {
      const uint64_t* e = host.data() + r * words + ((op - 1) % kTraceDepth) * kTraceEntryWords;
      EXPECT_EQ(e[3], op) << "rank " << r << " op " << op;  // posted
      EXPECT_EQ(e[0], op) << "rank " << r << " op " << op;  // complete
      EXPECT_NE(e[1], 0u) << "rank " << r << " op " << op;  // when its reads ended, this op's
      EXPECT_LE(e[1], e[2]) << "rank " << r << " op " << op;  // before it completed
      const uint64_t* next = host.data() + r * words + (op % kTraceDepth) * kTraceEntryWords;
      EXPECT_EQ(next[0] | next[1] | next[2], 0u) << "rank " << r << ": the entry after op " << op;
    }
    // This op's reads ended after the previous op completed (stream order; the
    // clock may tick coarsely, so not earlier): no older op's time survived.
    for (uint32_t r = 0; r < n; ++r) {
      const uint64_t* e = host.data() + r * words + ((op - 1) % kTraceDepth) * kTraceEntryWords;
      EXPECT_GE(e[1], last_completed[r]) << "rank " << r << " op " << op;
      last_completed[r] = e[2];
    }
  }
  gpuFree(trace);
}

TEST(DeviceCollectivesTest, DisagreeingDescriptorFailsEveryRankInsteadOfReducing) {
  REQUIRE_GPU();
  const uint32_t n = 4;
  const uint64_t count = 4096;
  VirtualRanks vr;
  ASSERT_TRUE(vr.Init(n, count * 4, count * 4, /*timeout_ns=*/2'000'000'000).ok());
  ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, 5, count, false).ok());
  ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, count, false, 4).ok());
  ASSERT_TRUE(vr.Sync().ok());
  ASSERT_EQ(vr.Error(), kDeviceOk);  // agreeing ranks pass the device-side matcher
  EXPECT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, 5, count), 0u);
  vr.SetDescriptorSkew(2, 1);  // rank 2 describes a different op
  ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, 6, count, false).ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, count, false, 4).ok());
  ASSERT_TRUE(vr.Sync().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));  // no rank waited for a deadline
  EXPECT_EQ(vr.Error(), kDeviceMismatch);
  EXPECT_EQ(vr.Word(vr.abort_word()), 1u);
}

// Four ranks, one agreeing all-reduce of 4096 elements run: every start
// flag's line holds that op's descriptor words.
void RunOneAgreeingOp(VirtualRanks* vr) {
  ASSERT_TRUE(vr->Init(4, 4096 * 4, 4096 * 4, /*timeout_ns=*/2'000'000'000).ok());
  ASSERT_TRUE(vr->Prepare(DataType::kFloat32, ReduceOp::kSum, false, 5, 4096, false).ok());
  ASSERT_TRUE(vr->AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, 4096, false, 4).ok());
  ASSERT_TRUE(vr->Sync().ok());
  ASSERT_EQ(vr->Error(), kDeviceOk);
}

// The start flag carries no release (the eighth cut): a peer may see it
// before the descriptor words beside it. Here every rank's words go out
// 200 us after its flag (ring::kDelayDescriptorWords), so peers first read
// the previous op's words: their tags must make every peer wait for this
// op's, then compare them exactly (an agreeing op passes with exact results;
// a disagreeing one fails on every rank, within the op, not on a deadline).
TEST(DeviceCollectivesTest, DescriptorWordsLateBehindTheirFlagAreWaitedFor) {
  REQUIRE_GPU();
  VirtualRanks vr;
  ASSERT_NO_FATAL_FAILURE(RunOneAgreeingOp(&vr));
  // Another count: the words peers first see (op 1's) disagree with op 2's.
  vr.SetBenchSkip(ring::kDelayDescriptorWords);
  ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, 6, 2048, false).ok());
  ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, 2048, false, 4).ok());
  ASSERT_TRUE(vr.Sync().ok());
  EXPECT_EQ(vr.Error(), kDeviceOk);
  EXPECT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, 6, 2048), 0u);
  // Rank 2 disagrees, its words late: found, by every rank, without a deadline.
  vr.SetDescriptorSkew(2, 1);
  ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, 7, 2048, false).ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, 2048, false, 4).ok());
  ASSERT_TRUE(vr.Sync().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(vr.Error(), kDeviceMismatch);
}

// Negative control of the test above: peers that take the words without
// their tags (ring::kIgnoreDescriptorTags) compare op 1's words with op 2's
// descriptor, and an agreeing op fails as a mismatch: the late words are
// really read late, so the test above can fail.
TEST(DeviceCollectivesTest, NegativeControlUntaggedLateDescriptorIsReadStale) {
  REQUIRE_GPU();
  VirtualRanks vr;
  ASSERT_NO_FATAL_FAILURE(RunOneAgreeingOp(&vr));
  vr.SetBenchSkip(ring::kDelayDescriptorWords | ring::kIgnoreDescriptorTags);
  ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, 6, 2048, false).ok());
  ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, 2048, false, 4).ok());
  ASSERT_TRUE(vr.Sync().ok());
  EXPECT_EQ(vr.Error(), kDeviceMismatch);
}

TEST(DeviceCollectivesTest, AbortWordReleasesASpinningRank) {
  REQUIRE_GPU();
  VirtualRanks vr;
  ASSERT_TRUE(vr.Init(2, 4096, 4096, /*timeout_ns=*/20'000'000'000).ok());
  ASSERT_TRUE(LaunchPost(vr.counter(0), vr.op_index(0), vr.stream(0)).ok());
  ASSERT_TRUE(LaunchAllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kTwoShotPush, vr.Args(0, 64, false),
                              4, vr.stream(0)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gpuStream_t side;
  ASSERT_EQ(gpuStreamCreateWithFlags(&side, gpuStreamNonBlocking), gpuSuccess);
  static const uint64_t one = 1;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(gpuMemcpyAsync(vr.abort_word(), &one, 8, gpuMemcpyHostToDevice, side), gpuSuccess);  // what a watchdog does
  ASSERT_EQ(gpuStreamSynchronize(vr.stream(0)), gpuSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(vr.Error(), kDeviceAborted);
  // Every later op of the aborted communicator fails at once, in either mode.
  for (bool single : {false, true}) {
    vr.SetSingleLaunch(single);
    ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, 1, 64, false).ok());
    ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, 64, false, 4).ok());
    ASSERT_TRUE(vr.Sync().ok());
    EXPECT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, 1, 64), 2u * 64);  // error reported: all counted
  }
  gpuStreamDestroy(side);
}

// The abort rule's tests: one single-launch float32 sum (inputs of seed 5)
// on `world` ranks, rank 0 held 300 ms before its reads, the others at once;
// with `abort`, the abort word raised 100 ms in. Returns once every rank's
// kernel has ended.
void AbortDuringRankZeroReads(uint32_t world, DeviceAlgorithm algo, uint64_t count, uint32_t blocks, bool abort,
                              VirtualRanks* vr) {
  ASSERT_TRUE(vr->Init(world, count * 4, count * 4, /*timeout_ns=*/20'000'000'000).ok());
  vr->SetSingleLaunch(true);
  ASSERT_TRUE(vr->Prepare(DataType::kFloat32, ReduceOp::kSum, false, 5, count, false).ok());
  device::DeviceRankArgs slow = vr->Args(0, count, false);
  slow.debug_read_delay_ns = 300'000'000;
  ASSERT_TRUE(LaunchAllReduce(DataType::kFloat32, ReduceOp::kSum, algo, slow, blocks, vr->stream(0)).ok());
  for (uint32_t r = 1; r < world; ++r) {
    ASSERT_TRUE(vr->AllReduceOn(r, DataType::kFloat32, ReduceOp::kSum, algo, count, false, blocks).ok());
  }
  gpuStream_t side;
  ASSERT_EQ(gpuStreamCreateWithFlags(&side, gpuStreamNonBlocking), gpuSuccess);
  if (abort) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    static const uint64_t one = 1;
    ASSERT_EQ(gpuMemcpyAsync(vr->abort_word(), &one, 8, gpuMemcpyHostToDevice, side), gpuSuccess);
    ASSERT_EQ(gpuStreamSynchronize(side), gpuSuccess);
  }
  ASSERT_TRUE(vr->Sync().ok());
  gpuStreamDestroy(side);
}

// The abort rule's second half (docs/proof.md): a rank whose reads end after
// the abort word is raised fails its op, since a peer that left its end
// barrier on the abort may already be rewriting what it read. One rank, held
// 300 ms inside its data phase; the abort is raised 100 ms in, after the op
// began. With no peer to spin for, the check after the reads is the only one
// that can see the abort: the verdict is that check's. The same run without
// the abort is the control (the op succeeds, exact). With the check gone the
// aborted run would report success.
TEST(DeviceCollectivesTest, ReadsEndingAfterAnAbortFailTheOp) {
  REQUIRE_GPU();
  const uint64_t count = 1 << 14;
  const uint32_t blocks = 4;
  for (bool abort : {false, true}) {
    SCOPED_TRACE(abort ? "abort raised during the reads" : "control: no abort");
    VirtualRanks vr;
    ASSERT_NO_FATAL_FAILURE(AbortDuringRankZeroReads(1, DeviceAlgorithm::kOneShot, count, blocks, abort, &vr));
    EXPECT_EQ(vr.Word(vr.done(0)), 1u);  // op 1 completed, failed or not
    for (uint32_t b = 0; b < blocks; ++b) {
      // Published either way: the flag says the block finished reading.
      EXPECT_EQ(vr.Word(vr.flags() + ring::FlagWord(1, b, 0)), 1u) << "block " << b << "'s end flag";
    }
    EXPECT_EQ(vr.Error(), abort ? kDeviceAborted : kDeviceOk);
    EXPECT_EQ(vr.Word32(vr.status_mirror(0)), abort ? kDeviceAborted : kDeviceOk);
    if (!abort) {
      EXPECT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, 5, count), 0u);
    }
  }
}

// The same rule where the end flag vouches for more than reads: a two-shot
// push rank writes what it reduced from its peers' inputs into their
// outputs, so it reads the abort word before its end flag and an aborted op
// publishes none (a peer waiting for it then leaves on the abort word instead
// of passing with a chunk spoiled by a peer's leave). Rank 0 is held 300 ms
// before its reads; rank 1 publishes its end flag and spins for rank 0's; the
// abort is raised 100 ms in. The run without the abort is the control: there
// rank 0 publishes them, so an unpublished flag means the check held it back.
TEST(DeviceCollectivesTest, TwoShotPushReadsEndingAfterAnAbortPublishNoEndFlag) {
  REQUIRE_GPU();
  const uint64_t count = 1 << 14;
  const uint32_t blocks = 4;
  for (bool abort : {false, true}) {
    SCOPED_TRACE(abort ? "abort raised during rank 0's reads" : "control: no abort");
    VirtualRanks vr;
    ASSERT_NO_FATAL_FAILURE(AbortDuringRankZeroReads(2, DeviceAlgorithm::kTwoShotPush, count, blocks, abort, &vr));
    EXPECT_EQ(vr.Word(vr.done(0)), 1u);  // op 1 completed on both ranks, failed or not
    EXPECT_EQ(vr.Word(vr.done(1)), 1u);
    for (uint32_t b = 0; b < blocks; ++b) {
      SCOPED_TRACE("block " + std::to_string(b));
      EXPECT_EQ(vr.Word(vr.flags() + ring::FlagWord(0, b, 0)), 1u) << "rank 0's start flag";
      EXPECT_EQ(vr.Word(vr.flags() + ring::FlagWord(1, b, 1)), 1u) << "rank 1's end flag";
      EXPECT_EQ(vr.Word(vr.flags() + ring::FlagWord(1, b, 0)), abort ? 0u : 1u) << "rank 0's end flag";
    }
    EXPECT_EQ(vr.Error(), abort ? kDeviceAborted : kDeviceOk);
    if (!abort) {
      EXPECT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, 5, count), 0u);
    }
  }
}

// Seed bug 3 (mori, aiter #3928): captured graphs of several sizes on one
// communicator, replayed many times with new values each time, interleaved
// with eager ops. The generation comes from the device counter, so no replay
// can accept an older replay's flags; every result is checked.
TEST(DeviceCollectivesTest, GraphReplayWithChangingSizesAndValues) {
  REQUIRE_GPU();
  const uint32_t n = 4;
  const uint64_t sizes[] = {128u << 20, 32u << 20, 128u << 20, 1u << 20, 16u << 10, 16u << 20, 64u << 20};
  const uint64_t max_count = (128u << 20) / 4;
  // Twice: single-launch ops completing through done, then as the client
  // library runs them, a completion word per block (DeviceOpArgs::block_done;
  // captured ops without a verdict to copy, eager ones with it).
  for (bool per_block : {false, true}) {
    SCOPED_TRACE(per_block ? "a completion word per block" : "done");
    VirtualRanks vr;
    ASSERT_TRUE(vr.Init(n, max_count * 4, max_count * 4).ok());
    vr.SetPerBlockCompletion(per_block);
    const uint32_t blocks = BlocksFor(n);
    std::vector<float> host(max_count), expect(max_count);
    auto fill = [&](uint64_t count, uint64_t seed) {  // fast exact inputs: (r + 1) * ((j + seed) % 7 + 1)
      for (uint32_t r = 0; r < n; ++r) {
        for (uint64_t j = 0; j < count; ++j) host[j] = static_cast<float>((r + 1) * ((j + seed) % 7 + 1));
        ASSERT_EQ(gpuMemcpy(vr.in(r), host.data(), count * 4, gpuMemcpyHostToDevice), gpuSuccess);
        ASSERT_EQ(gpuMemset(vr.out(r), 0xff, count * 4), gpuSuccess);  // NaN poison
      }
      for (uint64_t j = 0; j < count; ++j) expect[j] = static_cast<float>(n * (n + 1) / 2 * ((j + seed) % 7 + 1));
    };
    auto check = [&](uint64_t count, const char* what) {
      ASSERT_EQ(vr.Error(), kDeviceOk) << what;
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_EQ(gpuMemcpy(host.data(), vr.out(r), count * 4, gpuMemcpyDeviceToHost), gpuSuccess);
        uint64_t wrong = 0;
        for (uint64_t j = 0; j < count; ++j) wrong += host[j] != expect[j];
        ASSERT_EQ(wrong, 0u) << what << " count=" << count << " rank " << r;
      }
    };
    // Capture one graph per (size, rank): post + all-reduce + complete.
    // Graphs of even-numbered sizes use post/complete launches, odd ones a single
    // launch; eager ops alternate too: both modes share one sequence.
    std::vector<std::vector<gpuGraphExec_t>> execs(std::size(sizes), std::vector<gpuGraphExec_t>(n));
    vr.SetStatusMirror(!per_block);
    for (size_t s = 0; s < std::size(sizes); ++s) {
      const uint64_t count = sizes[s] / 4;
      const DeviceAlgorithm algo = sizes[s] <= (256u << 10) ? DeviceAlgorithm::kOneShot : DeviceAlgorithm::kTwoShotPush;
      vr.SetSingleLaunch(s % 2 == 1);
      for (uint32_t r = 0; r < n; ++r) {
        gpuGraph_t graph;
        ASSERT_EQ(gpuStreamBeginCapture(vr.stream(r), gpuStreamCaptureModeThreadLocal), gpuSuccess);
        ASSERT_TRUE(vr.AllReduceOn(r, DataType::kFloat32, ReduceOp::kSum, algo, count, false, blocks).ok());
        ASSERT_EQ(gpuStreamEndCapture(vr.stream(r), &graph), gpuSuccess);
        ASSERT_EQ(gpuGraphInstantiate(&execs[s][r], graph), gpuSuccess);
        gpuGraphDestroy(graph);
      }
    }
    vr.SetStatusMirror(true);
    uint64_t ops = 0, seed = 0;
    for (size_t s = 0; s < std::size(sizes); ++s) {
      const uint64_t count = sizes[s] / 4;
      for (int rep = 0; rep < 5; ++rep) {
        fill(count, ++seed);
        for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuGraphLaunch(execs[s][r], vr.stream(r)), gpuSuccess);
        ASSERT_TRUE(vr.Sync().ok());
        ++ops;
        check(count, "graph replay");
      }
      // An eager op of another size between the replays, on the same streams.
      const uint64_t eager = 1000 + 37 * s;
      vr.SetSingleLaunch(s % 2 == 0);
      fill(eager, ++seed);
      ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, eager, false, blocks).ok());
      ASSERT_TRUE(vr.Sync().ok());
      ++ops;
      check(eager, "eager between replays");
      // Counted as a reader of the window counts them (a generation that did
      // not follow the block words would repeat, and the count stall).
      for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(vr.Completed(r, blocks), ops) << "rank " << r;
    }
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(vr.Word(vr.counter(r)), ops);  // exactly one index per replay and per eager op, in either mode
      // Done follows every op, or (per block) only the post/complete ones.
      if (!per_block) {
        EXPECT_EQ(vr.Word(vr.done(r)), ops);
      }
      EXPECT_EQ(vr.Word32(reinterpret_cast<int32_t*>(vr.finished(r))), 0);  // every count wrapped
    }
    for (auto& per_size : execs) {
      for (auto e : per_size) gpuGraphExecDestroy(e);
    }
  }
}

TEST(DeviceCollectivesTest, DelayedRankStillGivesExactResults) {
  REQUIRE_GPU();
  const uint32_t n = 4;
  const uint64_t count = 1 << 20;
  VirtualRanks vr;
  ASSERT_TRUE(vr.Init(n, count * 4, count * 4).ok());
  for (int trial = 0; trial < 4; ++trial) {
    vr.SetSingleLaunch(trial % 2 == 1);
    ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, trial, count, false).ok());
    // Rank `trial` starts 20 ms late: its peers wait in the start barrier.
    ASSERT_TRUE(LaunchDelay(20'000'000, vr.stream(trial % n)).ok());
    ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kTwoShotPush, count, false,
                             BlocksFor(n)).ok());
    ASSERT_TRUE(vr.Sync().ok());
    ASSERT_EQ(vr.Error(), kDeviceOk);
    EXPECT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, trial, count), 0u) << "rank " << trial % n << " late";
  }
}

// Ops stay exact with a daemon option that changes a flag's fence
// (`option` sets it on the ranks): single launch and post/complete,
// one-shot and two-shot, with a late rank, at 2 and 8 ranks.
void ExpectOpsExactWithOption(const std::function<void(VirtualRanks&)>& option) {
  for (uint32_t n : {2u, 8u}) {
    const uint64_t count = 1 << 18;
    VirtualRanks vr;
    ASSERT_TRUE(vr.Init(n, count * 4, count * 4).ok());
    option(vr);
    for (int trial = 0; trial < 4; ++trial) {
      const bool single = trial % 2 == 1;
      const DeviceAlgorithm algo = trial < 2 ? DeviceAlgorithm::kOneShot : DeviceAlgorithm::kTwoShotPush;
      const uint64_t c = algo == DeviceAlgorithm::kOneShot ? 4096 : count;
      vr.SetSingleLaunch(single);
      ASSERT_TRUE(vr.Prepare(DataType::kFloat32, ReduceOp::kSum, false, trial + 10 * n, c, false).ok());
      ASSERT_TRUE(LaunchDelay(2'000'000, vr.stream(trial % n)).ok());  // a late rank: peers wait on its flag
      ASSERT_TRUE(vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, algo, c, false, BlocksFor(n)).ok());
      ASSERT_TRUE(vr.Sync().ok());
      ASSERT_EQ(vr.Error(), kDeviceOk);
      EXPECT_EQ(vr.Wrong(DataType::kFloat32, ReduceOp::kSum, false, trial + 10 * n, c), 0u)
          << n << " ranks, trial " << trial;
    }
  }
}

// The daemon option that puts the start flag's release back
// (DeviceOpArgs::start_flag_release, --gpu-start-flag-release).
TEST(DeviceCollectivesTest, StartFlagReleaseOptionKeepsOpsExact) {
  REQUIRE_GPU();
  ExpectOpsExactWithOption([](VirtualRanks& vr) { vr.SetStartFlagRelease(true); });
}

// The daemon option that keeps the end flag's fence at system scope on one
// GPU (DeviceOpArgs::end_fence_gpu_scope off, --gpu-system-end-fence); every
// other test here runs GPU scope, VirtualRanks' default.
TEST(DeviceCollectivesTest, SystemScopeEndFenceOptionKeepsOpsExact) {
  REQUIRE_GPU();
  ExpectOpsExactWithOption([](VirtualRanks& vr) { vr.SetEndFenceGpuScope(false); });
}

// Op kernels launched as programmatic dependent launches (the default on
// compute capability 9.0 and later) must still read what the op before them
// on the same stream wrote, also when the op before placed their blocks
// early (griddepcontrol.launch_dependents past the start barrier, the
// default; kBenchLateTrigger leaves it out); so must plain launches (kBenchPlainLaunch). In-place
// all-reduces back to back, eagerly and replayed from a graph, each one's
// input the one before's output: after m ops every element is n^(m-1) times
// the first op's sum, exact in float32.
TEST(DeviceCollectivesTest, ProgrammaticLaunchOpsReadTheOpBeforeThem) {
  REQUIRE_GPU();
  int device = 0, major = 0;
  ASSERT_EQ(gpuGetDevice(&device), gpuSuccess);
  ASSERT_EQ(gpuDeviceGetAttribute(&major, gpuDevAttrComputeCapabilityMajor, device), gpuSuccess);
#if !defined(COLLECTIVED_USE_HIP) && !defined(__HIP_PLATFORM_AMD__)
  // This build's kernels are sm_90 code: a Hopper or later card must get them.
  EXPECT_EQ(ProgrammaticLaunches(), major >= 9);
#endif
  for (uint32_t launch : {0u, ring::kBenchLateTrigger, ring::kBenchPlainLaunch}) {
    for (uint32_t n : {2u, 8u}) {
      for (uint64_t count : {uint64_t{4096}, uint64_t{1} << 20}) {
        SCOPED_TRACE(launch == 0                         ? "default launch"
                     : launch == ring::kBenchLateTrigger ? "no early trigger"
                                                         : "plain launch");
        VirtualRanks vr;
        ASSERT_TRUE(vr.Init(n, count * 4, count * 4).ok());
        vr.SetSingleLaunch(true);
        vr.SetBenchSkip(launch);
        std::vector<float> host(count);
        auto fill = [&] {  // (r + 1) * (j % 7 + 1), in place: into the outputs
          for (uint32_t r = 0; r < n; ++r) {
            for (uint64_t j = 0; j < count; ++j) host[j] = static_cast<float>((r + 1) * (j % 7 + 1));
            ASSERT_EQ(gpuMemcpy(vr.out(r), host.data(), count * 4, gpuMemcpyHostToDevice), gpuSuccess);
          }
        };
        auto check = [&](uint32_t ops, const char* what) {
          ASSERT_EQ(vr.Error(), kDeviceOk) << what;
          double scale = n * (n + 1) / 2.0;
          for (uint32_t i = 1; i < ops; ++i) scale *= n;
          for (uint32_t r = 0; r < n; ++r) {
            ASSERT_EQ(gpuMemcpy(host.data(), vr.out(r), count * 4, gpuMemcpyDeviceToHost), gpuSuccess);
            uint64_t wrong = 0;
            for (uint64_t j = 0; j < count; ++j) wrong += host[j] != static_cast<float>(scale * (j % 7 + 1));
            ASSERT_EQ(wrong, 0u) << what << ": n=" << n << " count=" << count << " rank " << r;
          }
        };
        const auto run = [&] {
          return vr.AllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kTwoShotPush, count, true,
                              BlocksFor(n));
        };
        fill();
        for (int i = 0; i < 3; ++i) ASSERT_TRUE(run().ok());
        ASSERT_TRUE(vr.Sync().ok());
        check(3, "eager");
        // Three ops per rank in one graph each, replayed twice: six ops.
        std::vector<gpuGraphExec_t> execs(n);
        for (uint32_t r = 0; r < n; ++r) {
          gpuGraph_t graph;
          ASSERT_EQ(gpuStreamBeginCapture(vr.stream(r), gpuStreamCaptureModeThreadLocal), gpuSuccess);
          for (int i = 0; i < 3; ++i) {
            ASSERT_TRUE(vr.AllReduceOn(r, DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kTwoShotPush, count,
                                       true, BlocksFor(n))
                            .ok());
          }
          ASSERT_EQ(gpuStreamEndCapture(vr.stream(r), &graph), gpuSuccess);
          ASSERT_EQ(gpuGraphInstantiate(&execs[r], graph), gpuSuccess);
          gpuGraphDestroy(graph);
        }
        fill();
        for (int rep = 0; rep < 2; ++rep) {
          for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuGraphLaunch(execs[r], vr.stream(r)), gpuSuccess);
        }
        ASSERT_TRUE(vr.Sync().ok());
        check(6, "graph replay");
        for (auto e : execs) gpuGraphExecDestroy(e);
      }
    }
  }
}

// Seed bug 1 (DeepEP): completion must cover the epilogue. Rank 0's op ends
// with a delayed copy-out; readers on two other streams wait on the handle
// (event after post, then the wait kernel) and must see the copied-out data.
// A negative control that waits only for the post reads before the copy-out:
// it must see stale data, or the race window was never open.
TEST(DeviceCollectivesTest, CrossStreamWaitsCoverADelayedEpilogue) {
  REQUIRE_GPU();
  const uint32_t n = 2;
  const uint64_t count = 1 << 16;
  VirtualRanks vr;
  ASSERT_TRUE(vr.Init(n, count * 4, count * 4).ok());
  float* copy_out = nullptr;  // the epilogue's destination
  float* seen[3] = {};        // what each reader saw
  ASSERT_EQ(gpuMalloc(reinterpret_cast<void**>(&copy_out), count * 4), gpuSuccess);
  for (auto& p : seen) ASSERT_EQ(gpuMalloc(reinterpret_cast<void**>(&p), count * 4), gpuSuccess);
  std::vector<float> host(count);
  for (uint32_t r = 0; r < n; ++r) {
    testing::FillInput(DataType::kFloat32, ReduceOp::kSum, r, 9, host.data(), count);
    ASSERT_EQ(gpuMemcpy(vr.in(r), host.data(), count * 4, gpuMemcpyHostToDevice), gpuSuccess);
  }
  ASSERT_EQ(gpuMemset(copy_out, 0xff, count * 4), gpuSuccess);
  gpuStream_t readers[3];
  gpuEvent_t posted;
  for (auto& s : readers) ASSERT_EQ(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), gpuSuccess);
  ASSERT_EQ(gpuEventCreate(&posted), gpuSuccess);
  const uint32_t blocks = BlocksFor(n);
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(LaunchPost(vr.counter(r), vr.op_index(r), vr.stream(r)).ok());
    if (r == 0) {
      ASSERT_EQ(gpuEventRecord(posted, vr.stream(0)), gpuSuccess);
    }
    ASSERT_TRUE(LaunchAllReduce(DataType::kFloat32, ReduceOp::kSum, DeviceAlgorithm::kOneShot, vr.Args(r, count, false),
                                blocks, vr.stream(r)).ok());
    if (r == 0) {  // the epilogue: 200 ms late, then the copy-out
      ASSERT_TRUE(LaunchDelay(200'000'000, vr.stream(0)).ok());
      ASSERT_EQ(gpuMemcpyAsync(copy_out, vr.out(0), count * 4, gpuMemcpyDeviceToDevice, vr.stream(0)), gpuSuccess);
    }
    ASSERT_TRUE(LaunchComplete(vr.op_index(r), vr.done(r), vr.stream(r)).ok());
  }
  // Readers 0 and 1 wait on the handle; reader 2 is the negative control.
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(gpuStreamWaitEvent(readers[i], posted, 0), gpuSuccess);
    if (i < 2) {
      ASSERT_TRUE(LaunchWait(vr.op_index(0), vr.done(0), vr.abort_word(), vr.error_word(), 2'000'000'000, readers[i])
                      .ok());
    }
    ASSERT_EQ(gpuMemcpyAsync(seen[i], copy_out, count * 4, gpuMemcpyDeviceToDevice, readers[i]), gpuSuccess);
  }
  for (auto s : readers) ASSERT_EQ(gpuStreamSynchronize(s), gpuSuccess);
  ASSERT_TRUE(vr.Sync().ok());
  ASSERT_EQ(vr.Error(), kDeviceOk);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(gpuMemcpy(host.data(), seen[i], count * 4, gpuMemcpyDeviceToHost), gpuSuccess);
    const uint64_t wrong = testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, 9, host.data(), count);
    if (i < 2) {
      EXPECT_EQ(wrong, 0u) << "reader " << i << " waited on the handle";
    } else {
      EXPECT_GT(wrong, 0u) << "negative control read after the epilogue: the race window never opened";
    }
  }
  for (auto s : readers) gpuStreamDestroy(s);
  gpuEventDestroy(posted);
  gpuFree(copy_out);
  for (auto p : seen) gpuFree(p);
}

}  // namespace
}  // namespace collectived::device

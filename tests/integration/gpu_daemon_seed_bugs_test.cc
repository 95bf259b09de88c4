// GPU daemon tests. The seed-bug controls: each safety rule checked, and its
// negative control (the daemon told to break the rule) caught.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/gpu_daemon_fixture.h"

namespace collectived::gpu_test {
namespace {

// A reader on another stream that waits on the handle sees the whole op,
// although its copy-out was delayed 200 ms; the negative control (event
// recorded before the copy-out) must let the reader see stale data.
void CrossStreamRead(bool unsafe, uint64_t* wrong_out) {
  std::vector<std::string> extra = {"--debug-delay-copyout-us", "200000"};
  if (unsafe) extra.push_back("--unsafe-event-before-epilogue");
  Daemon d(DaemonFlags(extra));
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const uint64_t count = 1 << 20;  // 4 MiB: staged two-shot, copy-out from the slot
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "xstream", n, 0).ok());
  Buffers b;
  ASSERT_TRUE(b.Init(ranks, false, count * 4, count * 4).ok());
  for (uint32_t r = 0; r < n; ++r) {
    Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, 77, count, b.send[r], b.recv[r]);
  }
  std::vector<Handle> h(n);
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(ranks.comms[r]
                    ->AllReduce(b.send[r], b.recv[r], count, DataType::kFloat32, ReduceOp::kSum, ranks.streams[r],
                                &h[r])
                    .ok());
  }
  uint64_t wrong = 0;
  for (uint32_t r = 0; r < n; ++r) {
    gpuStream_t reader;
    ASSERT_EQ(gpuStreamCreateWithFlags(&reader, gpuStreamNonBlocking), gpuSuccess);
    void* host = nullptr;
    ASSERT_EQ(gpuHostAlloc(&host, count * 4, 0), gpuSuccess);
    ASSERT_TRUE(h[r].WaitOn(reader).ok());
    ASSERT_TRUE(h[r].WaitOn(reader).ok());  // twice: each wait sees the whole op
    ASSERT_EQ(gpuMemcpyAsync(host, b.recv[r], count * 4, gpuMemcpyDeviceToHost, reader), gpuSuccess);
    ASSERT_EQ(gpuStreamSynchronize(reader), gpuSuccess);
    wrong += testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, 77, host, count);
    gpuFreeHost(host);
    gpuStreamDestroy(reader);
  }
  for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuStreamSynchronize(ranks.streams[r]), gpuSuccess);
  *wrong_out = wrong;
}

TEST(GpuDaemonTest, CrossStreamWaitsCoverADelayedCopyOut) {
  REQUIRE_GPU();
  uint64_t wrong = 1;
  CrossStreamRead(false, &wrong);
  EXPECT_EQ(wrong, 0u);
}

TEST(GpuDaemonTest, NegativeControlEventBeforeCopyOutIsCaught) {
  REQUIRE_GPU();
  uint64_t wrong = 0;
  CrossStreamRead(true, &wrong);
  EXPECT_GT(wrong, 0u) << "the unsafe event placement went unnoticed: the harness cannot catch seed bug 1";
}

// Rank 1 reads 100 ms late; rank 0 overwrites its input as soon as its op
// completes. Safe: completion waits for the end barrier, so rank 1 read the
// real input. Negative control (--unsafe-skip-end-barrier, seed bug 2): rank 0
// completes early and rank 1 reads the overwritten input.
uint64_t ReuseAfterCompletion(bool unsafe) {
  std::vector<std::string> extra = {"--debug-delay-rank", "1", "--debug-delay-us", "100000"};
  if (unsafe) extra.push_back("--unsafe-skip-end-barrier");
  Daemon d(DaemonFlags(extra));
  EXPECT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const uint64_t count = 4096;  // one-shot: rank 1 reads rank 0's input in place
  Ranks ranks;
  ranks.op_trace = true;  // the window is read from the device trace
  EXPECT_TRUE(ranks.Create(d, "reuse", n, 1 << 20).ok());
  Buffers b;
  EXPECT_TRUE(b.Init(ranks, true, count * 4, count * 4).ok());
  for (uint32_t r = 0; r < n; ++r) Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, 31, count, b.send[r], b.recv[r]);
  std::vector<Handle> h(n);
  for (uint32_t r = 0; r < n; ++r) {
    EXPECT_TRUE(ranks.comms[r]->AllReduce(b.send[r], b.recv[r], count, DataType::kFloat32, ReduceOp::kSum,
                                          ranks.streams[r], &h[r]).ok());
  }
  EXPECT_TRUE(h[0].Wait().ok());
  EXPECT_EQ(gpuMemset(b.send[0], 0x7f, count * 4), gpuSuccess);  // the caller reuses its input
  EXPECT_TRUE(h[1].Wait().ok());
  // The device trace of op 0 shows the end barrier's window: open exactly
  // when rank 0 completed before rank 1 finished reading.
  std::vector<OpTrace> trace;
  EXPECT_TRUE(ranks.comms[0]->GetOpTrace(0, &trace).ok());
  EXPECT_TRUE(trace.size() == 2 && trace[0].valid && trace[1].valid);
  if (trace.size() == 2) {
    EXPECT_EQ(trace[1].reads_done_ns > trace[0].completed_ns, unsafe)
        << "rank 1 read until " << trace[1].reads_done_ns << ", rank 0 completed at " << trace[0].completed_ns;
  }
  auto out = Download(b.recv[1], count * 4);
  return testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, 31, out.data(), count);
}

TEST(GpuDaemonTest, InputReusedRightAfterCompletionIsSafe) {
  REQUIRE_GPU();
  EXPECT_EQ(ReuseAfterCompletion(false), 0u);
}

TEST(GpuDaemonTest, NegativeControlSkipEndBarrierIsCaught) {
  REQUIRE_GPU();
  EXPECT_GT(ReuseAfterCompletion(true), 0u) << "leaving without the end barrier went unnoticed: the harness cannot "
                                               "catch seed bug 2";
}

// Op A (512 KiB, staged two-shot: each rank's result sits in its staging
// area until copied out) then op B (128 KiB). Copy-outs start late, rank r's
// by (r + 1) x 200 ms, so rank 0 copies in B while rank 1 still holds A's
// result. Safe: each rank stages in its own fixed slot. Negative control
// (--unsafe-size-dependent-slots, seed bug 3): areas packed by message size
// against the slot's end put rank 0's B input (end - 256 KiB) inside rank 1's
// A result (the last 512 KiB).
uint64_t StagingReuseAcrossSizes(bool unsafe) {
  std::vector<std::string> extra = {"--debug-delay-copyout-us", "200000"};
  if (unsafe) extra.push_back("--unsafe-size-dependent-slots");
  Daemon d(DaemonFlags(extra));
  EXPECT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const uint64_t count[2] = {128 << 10, 32 << 10};  // float32
  const uint64_t seed[2] = {41, 43};
  Ranks ranks;
  EXPECT_TRUE(ranks.Create(d, "staging", n, 0).ok());
  Buffers b[2];
  std::vector<Handle> h[2];
  for (int op = 0; op < 2; ++op) {
    EXPECT_TRUE(b[op].Init(ranks, false, count[op] * 4, count[op] * 4).ok());
    for (uint32_t r = 0; r < n; ++r) {
      Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, seed[op], count[op], b[op].send[r], b[op].recv[r]);
    }
    h[op].resize(n);
  }
  for (int op = 0; op < 2; ++op) {
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_TRUE(ranks.comms[r]->AllReduce(b[op].send[r], b[op].recv[r], count[op], DataType::kFloat32,
                                            ReduceOp::kSum, ranks.streams[r], &h[op][r]).ok());
    }
  }
  uint64_t wrong = 0;
  for (int op = 0; op < 2; ++op) {
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_TRUE(h[op][r].Wait().ok());
      auto out = Download(b[op].recv[r], count[op] * 4);
      wrong += testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, seed[op], out.data(), count[op]);
    }
  }
  return wrong;
}

TEST(GpuDaemonTest, StagingAreasDoNotMoveWithMessageSize) {
  REQUIRE_GPU();
  EXPECT_EQ(StagingReuseAcrossSizes(false), 0u);
}

TEST(GpuDaemonTest, NegativeControlSizeDependentSlotsIsCaught) {
  REQUIRE_GPU();
  EXPECT_GT(StagingReuseAcrossSizes(true), 0u) << "staging placed by message size went unnoticed: the harness "
                                                  "cannot catch seed bug 3";
}

}  // namespace
}  // namespace collectived::gpu_test

// GPU daemon tests. Daemon-executed communicators: the daemon's fused
// launch, and its copy-engine all-gather and all-reduce.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/gpu_daemon_fixture.h"

namespace collectived::gpu_test {
namespace {

// Daemon-executed: the clients post into the rings, the daemon runs one fused
// launch per op on its own stream. Heap and staged buffers, in and out of
// place, all-gather into the heap, a captured graph replayed with new values,
// and ranks that disagree (the daemon's matcher aborts the communicator).
TEST(GpuDaemonTest, DaemonExecutedOpsAreExact) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  uint64_t seed = 500;
  for (uint32_t n : {2u, 4u}) {
    Ranks ranks;
    ASSERT_TRUE(ranks.Create(d, "daemon-" + std::to_string(n), n, 64ull << 20, ExecutionMode::kDaemon).ok());
    EXPECT_EQ(ranks.comms[0]->mode(), ExecutionMode::kDaemon);
    for (bool zero_copy : {true, false}) {
      const uint64_t max_count = (1u << 20) + 3;
      Buffers b;
      ASSERT_TRUE(b.Init(ranks, zero_copy, max_count * 4, n * max_count * 4).ok());
      for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          for (uint64_t count : {uint64_t{7}, max_count}) {
            for (bool in_place : {false, true}) {
              ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, dt, op, count, in_place, ++seed,
                                                       std::string("daemon-executed") + (zero_copy ? " heap" : " staged")));
            }
          }
        }
      }
      if (!zero_copy) continue;  // all-gather writes into the heap
      for (uint64_t count : {uint64_t{5}, uint64_t{300001}}) {
        ++seed;
        std::vector<Handle> h(n);
        for (uint32_t r = 0; r < n; ++r) Prepare(DataType::kFloat32, ReduceOp::kUnspecified, true, n, r, seed, count, b.send[r], b.recv[r]);
        for (uint32_t r = 0; r < n; ++r) {
          ASSERT_TRUE(ranks.comms[r]->AllGather(b.send[r], b.recv[r], count, DataType::kFloat32, ranks.streams[r], &h[r]).ok());
        }
        for (uint32_t r = 0; r < n; ++r) {
          ASSERT_TRUE(h[r].Wait().ok());
          auto out = Download(b.recv[r], n * count * 4);
          EXPECT_EQ(testing::CountWrongAllGather(DataType::kFloat32, n, seed, out.data(), count), 0u)
              << "daemon-executed all-gather n=" << n << " count=" << count;
        }
      }
      // A captured op, replayed with new values.
      std::vector<gpuGraphExec_t> exec(n);
      const uint64_t count = 1 << 16;
      for (uint32_t r = 0; r < n; ++r) {
        gpuGraph_t graph;
        ASSERT_EQ(gpuStreamBeginCapture(ranks.streams[r], gpuStreamCaptureModeThreadLocal), gpuSuccess);
        Handle hc;
        ASSERT_TRUE(ranks.comms[r]->AllReduce(b.send[r], b.recv[r], count, DataType::kFloat32, ReduceOp::kSum,
                                              ranks.streams[r], &hc).ok());
        ASSERT_EQ(gpuStreamEndCapture(ranks.streams[r], &graph), gpuSuccess);
        ASSERT_EQ(gpuGraphInstantiate(&exec[r], graph), gpuSuccess);
        gpuGraphDestroy(graph);
      }
      for (int rep = 0; rep < 3; ++rep) {
        ++seed;
        for (uint32_t r = 0; r < n; ++r) Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, seed, count, b.send[r], b.recv[r]);
        for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuGraphLaunch(exec[r], ranks.streams[r]), gpuSuccess);
        for (uint32_t r = 0; r < n; ++r) {
          ASSERT_EQ(gpuStreamSynchronize(ranks.streams[r]), gpuSuccess);
          auto out = Download(b.recv[r], count * 4);
          EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, seed, out.data(), count), 0u)
              << "daemon-executed graph replay " << rep << " n=" << n;
        }
      }
      for (auto e : exec) gpuGraphExecDestroy(e);
    }
  }
  // Ranks that disagree: the daemon's matcher refuses the op on every rank.
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "daemon-mismatch", 2, 0, ExecutionMode::kDaemon).ok());
  Buffers b;
  ASSERT_TRUE(b.Init(ranks, false, 1 << 16, 1 << 16).ok());
  std::vector<Handle> h(2);
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(ranks.comms[r]->AllReduce(b.send[r], b.recv[r], 1024 * (r + 1), DataType::kFloat32, ReduceOp::kSum,
                                          ranks.streams[r], &h[r]).ok());
  }
  for (uint32_t r = 0; r < 2; ++r) {
    Status s = h[r].Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("mismatch"), std::string::npos) << s.message();
  }
  const v1::GetStatsResponse stats = Stats(d);
  bool reported = false;
  for (const auto& c : stats.recently_closed()) reported = reported || c.gpu_handoff_us_mean() > 0;
  EXPECT_TRUE(reported) << "daemon-executed communicators report their handoff time";
}

// Daemon-executed all-gathers as peer copies on the copy engines.
// Idle costs nothing on the GPU path too: the ranks post from the device,
// which cannot wake the daemon, so each client announces its eager ops and
// an idle executor sleeps until one is announced (ring/op_ring.h). Idle
// communicators cost the daemon (almost) no CPU, and the next op still runs
// at once and exact. (Before, each idle executor woke every 200 us.)
TEST(GpuDaemonTest, IdleDaemonExecutedCommunicatorsSleepAndWakeForTheNextOp) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  constexpr int kComms = 8;
  std::vector<Ranks> comms(kComms);
  std::vector<std::unique_ptr<Buffers>> bufs;
  uint64_t seed = 900;
  for (int i = 0; i < kComms; ++i) {
    ASSERT_TRUE(comms[i].Create(d, "idle-gpu-" + std::to_string(i), 2, 4ull << 20, ExecutionMode::kDaemon).ok());
    bufs.push_back(std::make_unique<Buffers>());
    ASSERT_TRUE(bufs.back()->Init(comms[i], true, 4096 * 4, 2 * 4096 * 4).ok());
    ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, comms[i], *bufs[i], DataType::kFloat32, ReduceOp::kSum, 1000, false,
                                             ++seed, "before idling"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const pid_t pid = d.process().pid();
  const double cpu0 = testing::CpuSeconds(pid);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const double share = (testing::CpuSeconds(pid) - cpu0) /
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("idle daemon with %d daemon-executed GPU communicators: %.2f %% of a core\n", kComms, 100 * share);
  EXPECT_LT(share, 0.05);
  for (int i = 0; i < kComms; ++i) {
    ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, comms[i], *bufs[i], DataType::kFloat32, ReduceOp::kSum, 1000, true,
                                             ++seed, "after idling"));
  }
}

TEST(GpuDaemonTest, CopyEngineAllGatherIsExact) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--gpu-gather-path", "copy-engine"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 4;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "ce", n, 64ull << 20, ExecutionMode::kDaemon).ok());
  Buffers b;
  const uint64_t max_count = 1 << 20;
  ASSERT_TRUE(b.Init(ranks, true, max_count * 4, n * max_count * 4).ok());
  uint64_t seed = 900;
  for (uint64_t count : {uint64_t{3}, uint64_t{65536}, max_count}) {
    for (bool in_place : {false, true}) {
      ++seed;
      std::vector<Handle> h(n);
      auto send_of = [&](uint32_t r) {
        return in_place ? static_cast<uint8_t*>(b.recv[r]) + r * count * 4 : static_cast<uint8_t*>(b.send[r]);
      };
      for (uint32_t r = 0; r < n; ++r) Prepare(DataType::kFloat32, ReduceOp::kUnspecified, true, n, r, seed, count, send_of(r), b.recv[r]);
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_TRUE(ranks.comms[r]->AllGather(send_of(r), b.recv[r], count, DataType::kFloat32, ranks.streams[r], &h[r]).ok());
      }
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_TRUE(h[r].Wait().ok());
        auto out = Download(b.recv[r], n * count * 4);
        EXPECT_EQ(testing::CountWrongAllGather(DataType::kFloat32, n, seed, out.data(), count), 0u)
            << "copy-engine all-gather count=" << count << (in_place ? " in place" : "");
      }
    }
  }
}

// A daemon-executed all-reduce's input may be as large as the heap allows: the
// daemon once bounded every op as if it were an all-gather (heap / world), and
// refused a 24 MiB all-reduce of 4 ranks on a 64 MiB heap.
TEST(GpuDaemonTest, DaemonExecutedAllReduceMayFillMostOfTheHeap) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 4;
  const uint64_t heap = 64ull << 20, count = 6ull << 20;  // 24 MiB of float32 > heap / n
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "big-ar", n, heap, ExecutionMode::kDaemon).ok());
  Buffers b;
  ASSERT_TRUE(b.Init(ranks, true, count * 4, count * 4).ok());
  std::vector<Handle> h(n);
  for (uint32_t r = 0; r < n; ++r) Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, 1400, count, b.send[r], b.recv[r]);
  for (uint32_t r = 0; r < n; ++r) {
    Status s = ranks.comms[r]->AllReduce(b.send[r], b.recv[r], count, DataType::kFloat32, ReduceOp::kSum,
                                         ranks.streams[r], &h[r]);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = h[r].Wait();
    ASSERT_TRUE(s.ok()) << s.ToString() << d.Log();
    auto out = Download(b.recv[r], count * 4);
    EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, 1400, out.data(), count), 0u);
  }
}

// The copy-engine all-reduce (daemon-executed): every dtype x op, in and out
// of place, heap and staged buffers, at 3 and 4 ranks. A 1 MiB scratch makes
// the largest count run in 12 to 32 pieces, the last one shorter and split
// unevenly.
TEST(GpuDaemonTest, CopyEngineAllReduceIsExact) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--gpu-reduce-path", "copy-engine", "--gpu-copy-engine-scratch-bytes", "1048576"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  const DataType types[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kInt32,
                            DataType::kFloat64, DataType::kInt64,    DataType::kUint32};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  uint64_t seed = 1300;
  for (uint32_t n : {3u, 4u}) {
    Ranks ranks;
    ASSERT_TRUE(ranks.Create(d, "ce-ar-" + std::to_string(n), n, 64ull << 20, ExecutionMode::kDaemon).ok());
    for (bool zero_copy : {true, false}) {
      const uint64_t max_count = (1u << 20) - 5;  // 8-byte types still fit the staging slot
      Buffers b;
      ASSERT_TRUE(b.Init(ranks, zero_copy, max_count * 8, max_count * 8).ok());
      for (DataType dt : types) {
        for (ReduceOp op : ops) {
          if (!IsValidReduction(dt, op)) continue;
          // Every pair at a small odd count; the pieces for a few.
          const bool large = (dt == DataType::kFloat32 && op == ReduceOp::kSum) ||
                             (dt == DataType::kBFloat16 && op == ReduceOp::kMax) ||
                             (dt == DataType::kInt64 && op == ReduceOp::kProd);
          std::vector<uint64_t> counts = {uint64_t{1}, uint64_t{4099}};
          if (large) counts.push_back(max_count);
          for (uint64_t count : counts) {
            for (bool in_place : {false, true}) {
              ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, dt, op, count, in_place, ++seed,
                                                       std::string("copy-engine") + (zero_copy ? " heap" : " staged")));
            }
          }
        }
      }
    }
  }
  EXPECT_NE(d.Log().find("copy-engine all-reduce scratch of 1048576 bytes, 3 copy lanes"), std::string::npos) << d.Log();
}

// A rank whose output starts inside its own input (neither in place nor
// disjoint) is refused on the copy-engine path before any copy: its pieces
// would otherwise overwrite input the next piece has yet to read.
TEST(GpuDaemonTest, CopyEngineAllReduceRefusesPartlyOverlappingBuffers) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--gpu-reduce-path", "copy-engine", "--gpu-copy-engine-scratch-bytes", "65536"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const uint64_t count = 100000;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "ce-overlap", n, 4ull << 20, ExecutionMode::kDaemon).ok());
  Buffers b;
  ASSERT_TRUE(b.Init(ranks, true, (count + 1) * 4, 4).ok());
  std::vector<Handle> h(n);
  std::vector<Status> s(n);
  for (uint32_t r = 0; r < n; ++r) {
    s[r] = ranks.comms[r]->AllReduce(b.send[r], static_cast<uint8_t*>(b.send[r]) + 4, count, DataType::kFloat32,
                                     ReduceOp::kSum, ranks.streams[r], &h[r]);
  }
  for (uint32_t r = 0; r < n; ++r) {
    if (s[r].ok()) s[r] = h[r].Wait();
    EXPECT_FALSE(s[r].ok()) << "rank " << r;
    EXPECT_NE(s[r].message().find("overlap"), std::string::npos) << s[r].ToString();
  }
}

}  // namespace
}  // namespace collectived::gpu_test

// GPU daemon tests. A GPU communicator across nodes (docs/multinode.md):
// two cuda-backend daemons of one mpirun job stand in for two nodes, each
// with two GPU ranks on this machine's GPU; the four ranks form one
// communicator. Each daemon reduces its ranks on the GPU, stages the node's
// part through pinned host memory on the copy engines and exchanges it over
// UCX; eager ops and ops replayed from CUDA graphs (with new values, and
// graphs of two sizes interleaved with eager ops) are exact.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/integration/gpu_daemon_fixture.h"
#include "tests/multinode/mpirun_cluster.h"

namespace collectived::gpu_test {
namespace {

TEST(GpuDaemonTest, CommunicatorAcrossTwoDaemonsIsExactEagerAndReplayed) {
  REQUIRE_GPU();
  testing::MpirunCluster cluster(2, {"--max-message-bytes", std::to_string(kMaxMessage)}, "cuda");
  ASSERT_TRUE(cluster.Ready()) << cluster.Output();
  auto log = [&] { return cluster.Output(); };
  constexpr uint32_t n = 4;  // ranks 0, 1 on node 0; 2, 3 on node 1
  Ranks ranks;
  Status created = ranks.Create(
      [&](uint32_t r) {
        std::unique_ptr<Client> c;
        Client::Connect({.socket_path = cluster.Socket(r / 2), .client_name = "rank" + std::to_string(r)}, &c);
        return c;
      },
      "gpu-across", n, 64ull << 20, ExecutionMode::kDefault);
  ASSERT_TRUE(created.ok()) << created.ToString() << log();
  for (uint32_t r = 0; r < n; ++r) {
    EXPECT_EQ(ranks.comms[r]->rank(), r);
    EXPECT_EQ(ranks.comms[r]->world_size(), n);
  }
  uint64_t seed = 7000;
  const uint64_t max_count = (1u << 20) + 3;
  for (bool zero_copy : {true, false}) {
    Buffers b;
    ASSERT_TRUE(b.Init(ranks, zero_copy, max_count * 4, n * max_count * 4).ok());
    for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        if (!IsValidReduction(dt, op)) continue;
        for (uint64_t count : {uint64_t{7}, max_count}) {
          for (bool in_place : {false, true}) {
            ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(log, ranks, b, dt, op, count, in_place, ++seed,
                                                     std::string("across nodes") + (zero_copy ? " heap" : " staged")));
          }
        }
      }
    }
    if (!zero_copy) continue;  // a daemon-executed all-gather writes into the heap
    for (uint64_t count : {uint64_t{5}, uint64_t{300001}}) {
      for (bool in_place : {false, true}) {
        ASSERT_NO_FATAL_FAILURE(CheckedAllGather(ranks, b.send, b.recv, count, in_place, ++seed, "across nodes"));
      }
    }
    // Graphs of two sizes, each captured once, replayed with new values and
    // interleaved with eager ops: the daemon sees every replay's post.
    const uint64_t counts[2] = {1 << 10, (1 << 18) + 1};
    std::vector<gpuGraphExec_t> exec[2];
    for (int g = 0; g < 2; ++g) {
      exec[g].resize(n);
      for (uint32_t r = 0; r < n; ++r) {
        gpuGraph_t graph;
        ASSERT_EQ(gpuStreamBeginCapture(ranks.streams[r], gpuStreamCaptureModeThreadLocal), gpuSuccess);
        Handle hc;
        ASSERT_TRUE(ranks.comms[r]->AllReduce(b.send[r], b.recv[r], counts[g], DataType::kFloat32, ReduceOp::kSum,
                                              ranks.streams[r], &hc).ok());
        ASSERT_EQ(gpuStreamEndCapture(ranks.streams[r], &graph), gpuSuccess);
        ASSERT_EQ(gpuGraphInstantiate(&exec[g][r], graph), gpuSuccess);
        gpuGraphDestroy(graph);
      }
    }
    for (int rep = 0; rep < 4; ++rep) {
      const int g = rep % 2;
      ++seed;
      for (uint32_t r = 0; r < n; ++r) {
        Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, seed, counts[g], b.send[r], b.recv[r]);
      }
      for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuGraphLaunch(exec[g][r], ranks.streams[r]), gpuSuccess);
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_EQ(gpuStreamSynchronize(ranks.streams[r]), gpuSuccess);
        auto out = Download(b.recv[r], counts[g] * 4);
        EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, seed, out.data(), counts[g]), 0u)
            << "graph replay " << rep << " of " << counts[g] << " elements, rank " << r;
      }
      ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(log, ranks, b, DataType::kInt32, ReduceOp::kSum, 4099, false, ++seed,
                                               "eager between replays"));
    }
    for (auto& e : exec) {
      for (auto x : e) gpuGraphExecDestroy(x);
    }
  }
  // Timed: 8 MiB float32 sum on the heap, in place (the exchange's rate in the stats).
  Buffers b;
  ASSERT_TRUE(b.Init(ranks, true, kMaxMessage, kMaxMessage).ok());
  const uint64_t count = kMaxMessage / 4;
  for (uint32_t r = 0; r < n; ++r) Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, 1, count, b.recv[r], b.recv[r]);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kIters = 20;
  for (int i = 0; i < kIters; ++i) {
    std::vector<Handle> h(n);
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(ranks.comms[r]->AllReduce(b.recv[r], b.recv[r], count, DataType::kFloat32, ReduceOp::kSum,
                                            ranks.streams[r], &h[r]).ok());
    }
    for (auto& x : h) ASSERT_TRUE(x.Wait().ok());
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kIters;
  std::printf("GPU across 2 daemons, 4 ranks, 8 MiB float32 sum in place: %.0f us per all-reduce\n", us);
}

}  // namespace
}  // namespace collectived::gpu_test

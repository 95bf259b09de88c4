// GPU daemon tests. Lifetimes: hardware queues per process, buffers freed
// and communicators destroyed under ops, ranks that leave or are killed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "client/src/gpu_queue_lease.h"  // GpuHardwareQueues: a policy checked without a GPU
#include "tests/integration/gpu_daemon_fixture.h"

namespace collectived::gpu_test {
namespace {

// No GPU needed: the queue count the client assumes for a context.
TEST(GpuDaemonTest, HardwareQueuesFollowTheVariableElseCudasDefault) {
  EXPECT_EQ(GpuHardwareQueues(nullptr, false), 8u);
  EXPECT_EQ(GpuHardwareQueues(nullptr, true), 2u);  // an MPS client
  EXPECT_EQ(GpuHardwareQueues("", true), 2u);
  EXPECT_EQ(GpuHardwareQueues("16", true), 16u);
  EXPECT_EQ(GpuHardwareQueues("1", false), 1u);
  EXPECT_EQ(GpuHardwareQueues("64", false), 32u);  // CUDA's ceiling
  EXPECT_EQ(GpuHardwareQueues("0", false), 8u);    // not a count: the default
  EXPECT_EQ(GpuHardwareQueues("4x", true), 2u);
}

// A process gets as many hardware queues as CUDA_DEVICE_MAX_CONNECTIONS says
// (8 by default, 2 for an MPS client); ranks of one communicator in one
// process beyond that share a queue, and their kernels wait for each other
// until the deadline (measured under MPS: 2 ranks in a process ran, 3 hit
// DEADLINE_EXCEEDED). The client refuses such a rank before it joins and
// tells the daemon, which fails the waiting peer at once with the reason;
// the reservation ends with the communicator.
TEST(GpuDaemonTest, RanksBeyondTheProcessHardwareQueuesAreRefused) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  // The context exists before the variable is set: it keeps its 8 queues, and
  // only the client's count sees 1.
  ASSERT_EQ(gpuFree(nullptr), gpuSuccess);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  std::vector<Status> st(2);
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::unique_ptr<Client>> clients(2);
    std::vector<std::unique_ptr<Communicator>> comms(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        clients[r] = d.Connect("q" + std::to_string(r));
        CommunicatorOptions o;
        o.key = "queues";
        o.world_size = 2;
        o.rank = r;
        o.device = 0;
        o.join_timeout_ms = 20000;
        st[r] = clients[r] ? clients[r]->CreateCommunicator(o, &comms[r]) : Status::Unavailable("connect");
      });
    }
    for (auto& t : threads) t.join();
  }
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));  // not the join timeout
  int told_by_daemon = 0;
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find("CUDA_DEVICE_MAX_CONNECTIONS=1"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("2 ranks of communicator 'queues' on device 0"), std::string::npos) << s.ToString();
    told_by_daemon += s.message().find("of 'queues' cannot join") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(told_by_daemon, 1) << st[0].ToString() << " / " << st[1].ToString();
  // Both leases are back, and every rank was told: with the default 8 queues
  // the same key forms.
  Ranks ranks;
  EXPECT_TRUE(ranks.Create(d, "queues", 2, 0).ok());
}

// Rank 1 reads 100 ms late, then pushes its reduced chunk into rank 0's heap
// recv (two-shot). Rank 0 frees that recv right after enqueueing the op and
// allocates again: the same range comes back. Free waits for the op, as
// cudaFree does, so the fill of the new buffer lands after the push; freeing
// at once would let the late push overwrite the new buffer's contents.
TEST(GpuDaemonTest, HeapBufferFreedRightAfterAnOpWaitsForIt) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--debug-delay-rank", "1", "--debug-delay-us", "100000"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const uint64_t count = 1 << 20, bytes = count * 4;  // 4 MiB: two-shot push
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "heap-free", n, 4 * bytes).ok());
  std::vector<Buffer> send(n), recv(n);
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(ranks.comms[r]->AllocBuffer(bytes, &send[r]).ok());
    ASSERT_TRUE(ranks.comms[r]->AllocBuffer(bytes, &recv[r]).ok());
    Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, 53, count, send[r].data(), recv[r].data());
  }
  std::vector<Handle> h(n);
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(ranks.comms[r]->AllReduce(send[r].data(), recv[r].data(), count, DataType::kFloat32, ReduceOp::kSum,
                                          ranks.streams[r], &h[r]).ok());
  }
  void* const old = recv[0].data();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(recv[0].Free().ok());
  const auto waited = std::chrono::steady_clock::now() - start;
  Buffer again;
  ASSERT_TRUE(ranks.comms[0]->AllocBuffer(bytes, &again).ok());
  EXPECT_EQ(again.data(), old);  // first fit: the freed range
  ASSERT_EQ(gpuMemset(again.data(), 0x7f, bytes), gpuSuccess);
  for (uint32_t r = 0; r < n; ++r) EXPECT_TRUE(h[r].Wait().ok());
  ASSERT_EQ(gpuDeviceSynchronize(), gpuSuccess);
  EXPECT_GT(waited, std::chrono::milliseconds(50)) << "Free returned before the op it raced ran";
  auto fresh = Download(again.data(), bytes);
  uint64_t overwritten = 0;
  for (uint8_t b : fresh) overwritten += b != 0x7f ? 1 : 0;
  EXPECT_EQ(overwritten, 0u) << "the op wrote into a buffer allocated after its recv was freed";
  auto out = Download(recv[1].data(), bytes);
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, 53, out.data(), count), 0u);
}

// A graph replay is in no handle, so Destroy cannot wait on one as it does on
// eager ops; it waits for this rank's device words instead (every op that
// started has published done). Rank 1 reads 300 ms late, so rank 0's
// replayed op sits in its end barrier when rank 0 destroys: Destroy must wait
// for it (the timing shows it; rank 0 leaving aborts the communicator for
// rank 1 either way, after the op). Had rank 0 left at once, its kernel
// would have run on with its windows unmapped.
TEST(GpuDaemonTest, DestroyWaitsForAGraphReplayStillRunning) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--debug-delay-rank", "1", "--debug-delay-us", "300000"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const uint64_t count = 4096, bytes = count * 4;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "destroy-replay", n, 4 * bytes).ok());
  std::vector<Buffer> send(n), recv(n);
  std::vector<gpuGraphExec_t> exec(n);
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(ranks.comms[r]->AllocBuffer(bytes, &send[r]).ok());
    ASSERT_TRUE(ranks.comms[r]->AllocBuffer(bytes, &recv[r]).ok());
    Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, 61, count, send[r].data(), recv[r].data());
    gpuGraph_t graph;
    ASSERT_EQ(gpuStreamBeginCapture(ranks.streams[r], gpuStreamCaptureModeThreadLocal), gpuSuccess);
    Handle h;
    ASSERT_TRUE(ranks.comms[r]->AllReduce(send[r].data(), recv[r].data(), count, DataType::kFloat32, ReduceOp::kSum,
                                          ranks.streams[r], &h).ok());
    ASSERT_EQ(gpuStreamEndCapture(ranks.streams[r], &graph), gpuSuccess);
    ASSERT_EQ(gpuGraphInstantiate(&exec[r], graph), gpuSuccess);
    gpuGraphDestroy(graph);
  }
  for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuGraphLaunch(exec[r], ranks.streams[r]), gpuSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both kernels run; rank 1 is still delayed
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(ranks.comms[0]->Destroy().ok());
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GT(waited, std::chrono::milliseconds(150)) << "Destroy returned while its rank's replay still ran";
  ASSERT_EQ(gpuStreamSynchronize(ranks.streams[1]), gpuSuccess);
  auto out = Download(recv[1].data(), bytes);
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, 61, out.data(), count), 0u);
  ASSERT_EQ(gpuStreamSynchronize(ranks.streams[0]), gpuSuccess);
  for (auto e : exec) gpuGraphExecDestroy(e);
}

// A graph-replayed op has no verdict of its own: AsyncError is how its rank
// learns it failed. A peer that destroyed its communicator after the replay
// both ran failed nothing (AsyncError stays OK; the 2026-12-06 GPU soak
// counted such ops failed); a replay after the leave gives up on the abort
// word, and AsyncError names the leave, from the failure the kernel recorded
// (ring::DeviceOpArgs::rank_error; daemon-executed: the client's wait kernel).
TEST(GpuDaemonTest, AGraphReplayedAfterAPeerLeftFailsThroughAsyncError) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  for (ExecutionMode mode : {ExecutionMode::kClient, ExecutionMode::kDaemon}) {
    SCOPED_TRACE(ExecutionModeName(mode));
    const uint32_t n = 2;
    const uint64_t count = 4096, bytes = count * 4;
    Ranks ranks;
    ASSERT_TRUE(ranks.Create(d, std::string("replay-after-leave-") + ExecutionModeName(mode), n, 4 * bytes, mode).ok());
    std::vector<Buffer> send(n), recv(n);
    std::vector<gpuGraphExec_t> exec(n);
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(ranks.comms[r]->AllocBuffer(bytes, &send[r]).ok());
      ASSERT_TRUE(ranks.comms[r]->AllocBuffer(bytes, &recv[r]).ok());
      Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, 67, count, send[r].data(), recv[r].data());
      gpuGraph_t graph;
      ASSERT_EQ(gpuStreamBeginCapture(ranks.streams[r], gpuStreamCaptureModeThreadLocal), gpuSuccess);
      Handle h;
      ASSERT_TRUE(ranks.comms[r]->AllReduce(send[r].data(), recv[r].data(), count, DataType::kFloat32,
                                            ReduceOp::kSum, ranks.streams[r], &h).ok());
      ASSERT_EQ(gpuStreamEndCapture(ranks.streams[r], &graph), gpuSuccess);
      ASSERT_EQ(gpuGraphInstantiate(&exec[r], graph), gpuSuccess);
      gpuGraphDestroy(graph);
    }
    for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuGraphLaunch(exec[r], ranks.streams[r]), gpuSuccess);
    for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuStreamSynchronize(ranks.streams[r]), gpuSuccess);
    auto out = Download(recv[1].data(), bytes);
    EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, 67, out.data(), count), 0u);
    EXPECT_TRUE(ranks.comms[1]->AsyncError().ok()) << ranks.comms[1]->AsyncError().ToString();
    ASSERT_TRUE(ranks.comms[0]->Destroy().ok());  // rank 0 is done and leaves
    EXPECT_TRUE(ranks.comms[1]->AsyncError().ok()) << ranks.comms[1]->AsyncError().ToString();
    // Rank 1 replays once more, alone: its kernels give up on the abort word.
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(gpuGraphLaunch(exec[1], ranks.streams[1]), gpuSuccess);
    ASSERT_EQ(gpuStreamSynchronize(ranks.streams[1]), gpuSuccess);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(kOpTimeoutMs / 2));
    const Status seen = ranks.comms[1]->AsyncError();
    EXPECT_EQ(seen.code(), StatusCode::kAborted) << seen.ToString();
    EXPECT_NE(seen.message().find("rank 0 left"), std::string::npos) << seen.ToString();
    for (auto e : exec) gpuGraphExecDestroy(e);
  }
}

// After Destroy nothing more is enqueued: the windows are about to go.
TEST(GpuDaemonTest, NoOpAfterDestroy) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "after-destroy", 2, 1 << 20).ok());
  Buffer x;
  ASSERT_TRUE(ranks.comms[0]->AllocBuffer(4096, &x).ok());
  ASSERT_TRUE(ranks.comms[0]->Destroy().ok());
  Handle h;
  Status s = ranks.comms[0]->AllReduce(x.data(), x.data(), 1024, DataType::kFloat32, ReduceOp::kSum, ranks.streams[0], &h);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  Buffer y;
  EXPECT_EQ(ranks.comms[0]->AllocBuffer(4096, &y).code(), StatusCode::kFailedPrecondition);
}

TEST(GpuDaemonTest, ARankThatLeavesMidOpAbortsItsPeersInsteadOfHanging) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "leaver", 2, 0).ok());
  Buffers b;
  ASSERT_TRUE(b.Init(ranks, false, 1 << 16, 1 << 16).ok());
  Handle h;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ranks.comms[0]
                  ->AllReduce(b.send[0], b.recv[0], 1024, DataType::kFloat32, ReduceOp::kSum, ranks.streams[0], &h)
                  .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0's kernel is spinning for rank 1
  ranks.comms[1].reset();    // rank 1 leaves without posting
  ranks.clients[1].reset();  // and its session ends
  Status s = h.Wait();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(kOpTimeoutMs / 2));
  // The daemon keeps serving: a new communicator works.
  Ranks again;
  ASSERT_TRUE(again.Create(d, "after-leaver", 2, 0).ok());
  Buffers b2;
  ASSERT_TRUE(b2.Init(again, false, 1 << 16, 1 << 16).ok());
  std::vector<Handle> h2(2);
  for (uint32_t r = 0; r < 2; ++r) {
    Prepare(DataType::kInt32, ReduceOp::kSum, false, 2, r, 9, 1000, b2.send[r], b2.recv[r]);
    ASSERT_TRUE(
        again.comms[r]->AllReduce(b2.send[r], b2.recv[r], 1000, DataType::kInt32, ReduceOp::kSum, again.streams[r], &h2[r])
            .ok());
  }
  for (uint32_t r = 0; r < 2; ++r) EXPECT_TRUE(h2[r].Wait().ok());
}

// Ranks in separate processes (without MPS the GPU time-slices between them:
// slow, still exact). Then a rank process killed with SIGKILL while its peer's
// kernel spins for it: the peer gets ABORTED, not a hang.
TEST(GpuDaemonTest, RanksInSeparateProcessesAndAKilledOne) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  auto spawn = [&](const std::string& key, uint32_t rank, std::vector<std::string> extra) {
    std::vector<std::string> argv = {GpuClientBin(), "--socket", d.socket(), "--key", key, "--world", "2",
                                     "--rank", std::to_string(rank)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<testing::Process>(argv, d.dir() + "/gpu-" + key + std::to_string(rank) + ".log");
  };
  {
    auto p0 = spawn("procs", 0, {}), p1 = spawn("procs", 1, {});
    EXPECT_EQ(p0->Wait(60000), 0) << p0->Output();
    EXPECT_EQ(p1->Wait(60000), 0) << p1->Output();
  }
  ExpectKilledPeerAborts(d, "kill");
}

}  // namespace
}  // namespace collectived::gpu_test

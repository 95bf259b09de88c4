// GPU daemon tests. Registered buffers (the callers' own cuMem memory,
// zero-copy) and the legacy cudaIpc fallback.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ipc/cumem_window.h"
#include "tests/integration/gpu_daemon_fixture.h"

namespace collectived::gpu_test {
namespace {

// The callers' own cuMem buffers (a framework's tensors, as they would be),
// registered by every rank: ops on them run zero-copy. The messages are
// larger than the staging slot, so a staged op would be refused: these ran
// in place in the registered memory. No heap at all.
TEST(GpuDaemonTest, RegisteredCuMemBuffersRunZeroCopy) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 3;
  const uint64_t count = (kMaxMessage / 4) + 4099;  // float32: above the slot
  const uint64_t in_bytes = count * 8, out_bytes = n * count * 8;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "registered", n, 0).ok());
  // Per rank one cuMem allocation holding both buffers, at offsets inside it.
  std::vector<std::unique_ptr<ipc::CuMemWindow>> mem(n);
  std::vector<void*> send(n), recv(n);
  std::vector<Buffer> send_reg(n), recv_reg(n);
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(ipc::CuMemWindow::Create(0, 4096 + in_bytes + out_bytes + 4096, &mem[r]).ok());
    send[r] = static_cast<uint8_t*>(mem[r]->device_ptr()) + 256;
    recv[r] = static_cast<uint8_t*>(mem[r]->device_ptr()) + 4096 + in_bytes;
  }
  // Collective: each rank registers in its own thread, in the same order.
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      st[r] = ranks.comms[r]->RegisterBuffer(send[r], in_bytes, &send_reg[r]);
      if (st[r].ok()) st[r] = ranks.comms[r]->RegisterBuffer(recv[r], out_bytes, &recv_reg[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString() << d.Log();
    EXPECT_EQ(send_reg[r].id(), send_reg[0].id());
    EXPECT_EQ(recv_reg[r].id(), recv_reg[0].id());
    EXPECT_EQ(send_reg[r].data(), send[r]);
  }
  EXPECT_NE(send_reg[0].id(), recv_reg[0].id());
  ASSERT_EQ(Stats(d).communicators(0).registered_buffers(), 2u);

  Buffers b;  // the registered pointers, in the shape CheckedAllReduce takes
  b.send = send;
  b.recv = recv;
  uint64_t seed = 700;
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32}) {
    for (uint64_t c : {count, uint64_t{1000}}) {  // two-shot, one-shot
      for (bool in_place : {false, true}) {
        ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, dt, ReduceOp::kSum, c, in_place, ++seed, "registered"));
      }
    }
  }
  // All-gather into the registered recv, out of place and in place.
  for (bool in_place : {false, true}) {
    ASSERT_NO_FATAL_FAILURE(CheckedAllGather(ranks, send, recv, count, in_place, ++seed, "registered"));
  }
  // A graph captured over the registered buffers, replayed with new values.
  std::vector<gpuGraphExec_t> exec(n);
  for (uint32_t r = 0; r < n; ++r) {
    gpuGraph_t graph;
    ASSERT_EQ(gpuStreamBeginCapture(ranks.streams[r], gpuStreamCaptureModeThreadLocal), gpuSuccess);
    Handle h;
    Status s = ranks.comms[r]->AllReduce(send[r], recv[r], count, DataType::kFloat32, ReduceOp::kSum,
                                         ranks.streams[r], &h);
    ASSERT_EQ(gpuStreamEndCapture(ranks.streams[r], &graph), gpuSuccess);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(gpuGraphInstantiate(&exec[r], graph), gpuSuccess);
    gpuGraphDestroy(graph);
  }
  for (int replay = 0; replay < 3; ++replay) {
    ++seed;
    for (uint32_t r = 0; r < n; ++r) Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, seed, count, send[r], recv[r]);
    for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuGraphLaunch(exec[r], ranks.streams[r]), gpuSuccess);
    for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuStreamSynchronize(ranks.streams[r]), gpuSuccess);
    for (uint32_t r = 0; r < n; ++r) {
      auto out = Download(recv[r], count * 4);
      EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, seed, out.data(), count), 0u)
          << "registered graph replay " << replay << " rank " << r;
    }
  }
  for (auto e : exec) gpuGraphExecDestroy(e);
  // Deregistered: the same pointers are staged again, and this size is refused.
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(send_reg[r].Free().ok());
    ASSERT_TRUE(recv_reg[r].Free().ok());
  }
  EXPECT_EQ(Stats(d).communicators(0).registered_buffers(), 0u);
  Handle h;
  Status s = ranks.comms[0]->AllReduce(send[0], recv[0], count, DataType::kFloat32, ReduceOp::kSum, ranks.streams[0], &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

// What peers could not map, sizes that differ, and a rank that leaves
// mid-registration: specific errors on every rank, no hang.
TEST(GpuDaemonTest, RegistrationRefusesWhatPeersCannotUse) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "register-bad", 2, 1 << 20).ok());
  Buffer out;
  void* plain = nullptr;
  ASSERT_EQ(gpuMalloc(&plain, 1 << 20), gpuSuccess);
  Status s = ranks.comms[0]->RegisterBuffer(plain, 1 << 20, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("cudaMalloc"), std::string::npos) << s.message();
  gpuFree(plain);
  std::unique_ptr<ipc::CuMemWindow> unexportable;
  ASSERT_TRUE(ipc::CuMemWindow::CreateUnexportable(0, 1 << 20, &unexportable).ok());
  s = ranks.comms[0]->RegisterBuffer(unexportable->device_ptr(), 1 << 20, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  Buffer heap;
  ASSERT_TRUE(ranks.comms[0]->AllocBuffer(4096, &heap).ok());
  EXPECT_EQ(ranks.comms[0]->RegisterBuffer(heap.data(), 4096, &out).code(), StatusCode::kAlreadyExists);
  std::unique_ptr<ipc::CuMemWindow> small;
  ASSERT_TRUE(ipc::CuMemWindow::Create(0, 2 << 20, &small).ok());
  EXPECT_EQ(ranks.comms[0]->RegisterBuffer(small->device_ptr(), small->size() + 1, &out).code(),
            StatusCode::kInvalidArgument);  // runs past its mapping

  // Different sizes: both ranks hear it.
  std::vector<std::unique_ptr<ipc::CuMemWindow>> mem(2);
  std::vector<Buffer> reg(2);
  std::vector<Status> st(2);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(ipc::CuMemWindow::Create(0, 4 << 20, &mem[r]).ok());
    threads.emplace_back([&, r] { st[r] = ranks.comms[r]->RegisterBuffer(mem[r]->device_ptr(), (r + 1) << 20, &reg[r]); });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r].ToString();
    EXPECT_NE(st[r].message().find("different sizes"), std::string::npos) << st[r].message();
  }
  // A rank that leaves while its peer waits in a registration: the peer gets ABORTED at once.
  const auto t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] { st[0] = ranks.comms[0]->RegisterBuffer(mem[0]->device_ptr(), 1 << 20, &reg[0]); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(ranks.comms[1]->Destroy().ok());
  waiter.join();
  EXPECT_EQ(st[0].code(), StatusCode::kAborted) << st[0].ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// Registered allocations are descriptors the daemon holds for the session:
// they count toward --max-buffers-per-session with its buffers and
// deposits, and one given back makes room again.
TEST(GpuDaemonTest, RegisteredBuffersCountTowardTheSessionCap) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--max-buffers-per-session", "3"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "register-cap", 1, 0).ok());
  std::vector<std::unique_ptr<ipc::CuMemWindow>> mem(4);
  std::vector<Buffer> reg(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ipc::CuMemWindow::Create(0, 2 << 20, &mem[i]).ok());
  for (int i = 0; i < 3; ++i) {
    Status s = ranks.comms[0]->RegisterBuffer(mem[i]->device_ptr(), 1 << 20, &reg[i]);
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  Status s = ranks.comms[0]->RegisterBuffer(mem[3]->device_ptr(), 1 << 20, &reg[3]);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("--max-buffers-per-session (3) reached"), std::string::npos) << s.message();
  ASSERT_TRUE(reg[0].Free().ok());
  s = ranks.comms[0]->RegisterBuffer(mem[3]->device_ptr(), 1 << 20, &reg[3]);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// Daemon-executed: the daemon maps every rank's registered allocation too and
// its fused launch reads and writes them in place (sizes above the slot).
TEST(GpuDaemonTest, RegisteredBuffersServeDaemonExecutedOps) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const uint64_t count = (kMaxMessage / 4) + 1025;
  const uint64_t in_bytes = count * 4, out_bytes = n * count * 4;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "registered-daemon", n, 0, ExecutionMode::kDaemon).ok());
  std::vector<std::unique_ptr<ipc::CuMemWindow>> mem(n);
  std::vector<void*> send(n), recv(n);
  std::vector<Buffer> send_reg(n), recv_reg(n);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(ipc::CuMemWindow::Create(0, in_bytes + out_bytes + 8192, &mem[r]).ok());
    send[r] = static_cast<uint8_t*>(mem[r]->device_ptr()) + 512;
    recv[r] = static_cast<uint8_t*>(mem[r]->device_ptr()) + 4096 + in_bytes;
    threads.emplace_back([&, r] {
      st[r] = ranks.comms[r]->RegisterBuffer(send[r], in_bytes, &send_reg[r]);
      if (st[r].ok()) st[r] = ranks.comms[r]->RegisterBuffer(recv[r], out_bytes, &recv_reg[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString() << d.Log();
  Buffers b;
  b.send = send;
  b.recv = recv;
  uint64_t seed = 800;
  for (bool in_place : {false, true}) {
    ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, DataType::kFloat32, ReduceOp::kSum, count, in_place, ++seed,
                                             "registered daemon-executed"));
    ASSERT_NO_FATAL_FAILURE(CheckedAllGather(ranks, send, recv, count, in_place, ++seed, "registered daemon-executed"));
  }
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(send_reg[r].Free().ok());
    ASSERT_TRUE(recv_reg[r].Free().ok());
  }
  EXPECT_EQ(Stats(d).communicators(0).registered_buffers(), 0u);
}

// Where cuMem memory cannot be exported, the daemon shares its windows by
// legacy cudaIpc handles (forced here): both modes stay exact, a killed
// process still aborts its peer, and the memory outlives every member's
// Destroy while their sessions may still have it mapped.
TEST(GpuDaemonTest, LegacyIpcWindowsServeBothModes) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--gpu-memory-export", "legacy-ipc"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  uint64_t seed = 900;
  {
    const uint32_t n = 3;
    Ranks ranks;
    ASSERT_TRUE(ranks.Create(d, "legacy-client", n, 64ull << 20).ok());
    EXPECT_NE(d.Log().find("legacy cudaIpc"), std::string::npos) << d.Log();
    for (bool zero_copy : {true, false}) {
      const uint64_t max_count = (1u << 20) + 3;
      Buffers b;
      ASSERT_TRUE(b.Init(ranks, zero_copy, max_count * 4, n * max_count * 4).ok());
      for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
        for (uint64_t count : {uint64_t{1000}, max_count}) {
          for (bool in_place : {false, true}) {
            ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, dt, ReduceOp::kSum, count, in_place, ++seed,
                                                     zero_copy ? "legacy zero-copy" : "legacy staged"));
          }
        }
      }
      ASSERT_NO_FATAL_FAILURE(CheckedAllGather(ranks, b.send, b.recv, 300001, false, ++seed,
                                               zero_copy ? "legacy zero-copy" : "legacy staged"));
    }
    // Every member destroys while rank 0 still holds a heap buffer (its
    // mapping of the rank window): the daemon drops the communicator, but
    // the memory must stay until the sessions end, so writing it is still safe.
    Buffer kept;
    ASSERT_TRUE(ranks.comms[0]->AllocBuffer(1 << 20, &kept).ok());
    for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(ranks.comms[r]->Destroy().ok());
    for (int i = 0; i < 100 && Stats(d).communicators_size() != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(Stats(d).communicators_size(), 0);
    ASSERT_EQ(gpuMemset(kept.data(), 0x5a, 1 << 20), gpuSuccess);
    ASSERT_EQ(gpuDeviceSynchronize(), gpuSuccess);
    auto back = Download(kept.data(), 1 << 20);
    EXPECT_EQ(std::count(back.begin(), back.end(), 0x5a), 1 << 20);
  }
  {  // daemon-executed over the daemon's own mapping
    const uint32_t n = 2;
    Ranks ranks;
    ASSERT_TRUE(ranks.Create(d, "legacy-daemon", n, 64ull << 20, ExecutionMode::kDaemon).ok());
    Buffers b;
    const uint64_t count = (1 << 20) + 3;  // float32: a little above 4 MiB
    ASSERT_TRUE(b.Init(ranks, true, count * 4, count * 4).ok());
    for (bool in_place : {false, true}) {
      ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, DataType::kFloat32, ReduceOp::kSum, count, in_place,
                                               ++seed, "legacy daemon-executed"));
    }
  }
  // Separate processes, one killed mid-op: its peer gets ABORTED, not a hang.
  ExpectKilledPeerAborts(d, "legacy-kill");
}

}  // namespace
}  // namespace collectived::gpu_test

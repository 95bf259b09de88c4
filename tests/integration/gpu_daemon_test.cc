// GPU communicators through a real collectived on the cuda backend (label
// gpu; skipped where no GPU is visible). Ranks are threads of this process,
// each with its own client session and stream, on one GPU: every op runs the
// whole path (daemon-owned cuMem windows imported by fd, device-side indices
// and matcher, staged and zero-copy data, completion into handles).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "client/src/gpu_queue_lease.h"  // GpuHardwareQueues: a policy checked without a GPU
#include "collectived/v1/collectived.grpc.pb.h"
#include "ipc/cumem_window.h"
#include "base/gpu/gpu_check.h"
#include "tests/integration/daemon_harness.h"
#include "tests/support/exact_data.h"

namespace collectived {
namespace {

using testing::Daemon;

bool HaveGpu() {
  int n = 0;
  return gpuGetDeviceCount(&n) == gpuSuccess && n > 0;
}
#define REQUIRE_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine"

constexpr uint64_t kMaxMessage = 8ull << 20;  // the daemon's staging slots
constexpr uint64_t kOpTimeoutMs = 20000;

// n ranks of one GPU communicator, each its own session and stream.
struct Ranks {
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<gpuStream_t> streams;

  Status Create(const Daemon& d, const std::string& key, uint32_t n, uint64_t heap_bytes,
                ExecutionMode mode = ExecutionMode::kClient) {
    clients.resize(n);
    comms.resize(n);
    streams.resize(n);
    std::vector<Status> st(n);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        clients[r] = d.Connect("rank" + std::to_string(r));
        if (!clients[r]) {
          st[r] = Status::Unavailable("connect failed");
          return;
        }
        CommunicatorOptions o;
        o.key = key;
        o.world_size = n;
        o.rank = r;
        o.device = 0;
        o.gpu_heap_bytes = heap_bytes;
        o.mode = mode;
        o.op_timeout_ms = kOpTimeoutMs;
        o.join_timeout_ms = 20000;
        st[r] = clients[r]->CreateCommunicator(o, &comms[r]);
      });
    }
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < n; ++r) {
      COLLECTIVED_RETURN_IF_ERROR(st[r]);
      COLLECTIVED_GPU_CHECK(gpuStreamCreateWithFlags(&streams[r], gpuStreamNonBlocking));
    }
    return Status::Ok();
  }
  ~Ranks() {
    for (uint32_t r = 0; r < comms.size(); ++r) {
      if (comms[r]) comms[r]->Destroy();
    }
    for (auto s : streams) {
      if (s) gpuStreamDestroy(s);
    }
  }
  uint32_t n() const { return static_cast<uint32_t>(comms.size()); }
};

// Per rank: send and recv device buffers, from the heap or plain cudaMalloc.
struct Buffers {
  std::vector<Buffer> heap;  // kept alive
  std::vector<void*> malloced;
  std::vector<void*> send, recv;

  Status Init(Ranks& ranks, bool zero_copy, uint64_t send_bytes, uint64_t recv_bytes) {
    for (uint32_t r = 0; r < ranks.n(); ++r) {
      void* p[2] = {};
      const uint64_t sizes[2] = {send_bytes, recv_bytes};
      for (int i = 0; i < 2; ++i) {
        if (zero_copy) {
          heap.emplace_back();
          COLLECTIVED_RETURN_IF_ERROR(ranks.comms[r]->AllocBuffer(sizes[i], &heap.back()));
          p[i] = heap.back().data();
        } else {
          COLLECTIVED_GPU_CHECK(gpuMalloc(&p[i], sizes[i]));
          malloced.push_back(p[i]);
        }
      }
      send.push_back(p[0]);
      recv.push_back(p[1]);
    }
    return Status::Ok();
  }
  ~Buffers() {
    for (void* p : malloced) gpuFree(p);
  }
};

Status Upload(void* dst, const std::vector<uint8_t>& host) {
  COLLECTIVED_GPU_CHECK(gpuMemcpy(dst, host.data(), host.size(), gpuMemcpyHostToDevice));
  return Status::Ok();
}
std::vector<uint8_t> Download(const void* src, uint64_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(gpuMemcpy(host.data(), src, bytes, gpuMemcpyDeviceToHost), gpuSuccess);
  return host;
}
// Exact inputs of rank r into `send` (or recv's place for in-place ops), recv poisoned.
void Prepare(DataType dt, ReduceOp op, bool gather, uint32_t world, uint32_t r, uint64_t seed, uint64_t count,
             void* send, void* recv) {
  const size_t es = DataTypeSize(dt);
  const uint64_t out_count = gather ? world * count : count;
  std::vector<uint8_t> host(out_count * es);
  testing::Poison(dt, host.data(), out_count);
  ASSERT_TRUE(Upload(recv, host).ok());
  std::vector<uint8_t> in(count * es);
  testing::FillInput(dt, op, r, seed, in.data(), count);
  ASSERT_TRUE(Upload(send, in).ok());
}

// One all-reduce on every rank of `ranks` (rank r's input in b.send[r], or in
// b.recv[r] in place), every rank's result checked exactly; `what` names the
// case in failures.
void CheckedAllReduce(const Daemon& d, Ranks& ranks, Buffers& b, DataType dt, ReduceOp op, uint64_t count,
                      bool in_place, uint64_t seed, const std::string& what) {
  const uint32_t n = ranks.n();
  std::vector<Handle> h(n);
  for (uint32_t r = 0; r < n; ++r) {  // in place: poison first, then the input into recv
    Prepare(dt, op, false, n, r, seed, count, in_place ? b.recv[r] : b.send[r], b.recv[r]);
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = ranks.comms[r]->AllReduce(in_place ? b.recv[r] : b.send[r], b.recv[r], count, dt, op,
                                         ranks.streams[r], &h[r]);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = h[r].Wait();
    ASSERT_TRUE(s.ok()) << s.ToString() << d.Log();
    auto out = Download(b.recv[r], count * DataTypeSize(dt));
    EXPECT_EQ(testing::CountWrongAllReduce(dt, op, n, seed, out.data(), count), 0u)
        << what << " n=" << n << " " << DataTypeName(dt) << " " << ReduceOpName(op) << " count=" << count
        << (in_place ? " in place" : "") << " rank " << r;
  }
}

// One all-gather of `count` float32 per rank on every rank of `ranks` (rank
// r's input in send[r], or in its chunk of recv[r] in place), every rank's
// output checked exactly.
void CheckedAllGather(Ranks& ranks, const std::vector<void*>& send, const std::vector<void*>& recv, uint64_t count,
                      bool in_place, uint64_t seed, const std::string& what) {
  const uint32_t n = ranks.n();
  std::vector<Handle> h(n);
  auto send_of = [&](uint32_t r) {
    return in_place ? static_cast<uint8_t*>(recv[r]) + r * count * 4 : static_cast<uint8_t*>(send[r]);
  };
  for (uint32_t r = 0; r < n; ++r) {
    Prepare(DataType::kFloat32, ReduceOp::kUnspecified, true, n, r, seed, count, send_of(r), recv[r]);
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = ranks.comms[r]->AllGather(send_of(r), recv[r], count, DataType::kFloat32, ranks.streams[r], &h[r]);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = h[r].Wait();
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto out = Download(recv[r], n * count * 4);
    EXPECT_EQ(testing::CountWrongAllGather(DataType::kFloat32, n, seed, out.data(), count), 0u)
        << what << " all-gather n=" << n << " count=" << count << (in_place ? " in place" : "") << " rank " << r;
  }
}

std::unique_ptr<v1::CollectiveService::Stub> RawStub(const Daemon& d) {
  return v1::CollectiveService::NewStub(grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials()));
}
v1::GetStatsResponse Stats(const Daemon& d) {
  v1::GetStatsResponse r;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(RawStub(d)->GetStats(&ctx, v1::GetStatsRequest(), &r).ok());
  return r;
}

std::vector<std::string> DaemonFlags(std::vector<std::string> extra = {}) {
  std::vector<std::string> f = {"--backend", "cuda", "--max-message-bytes", std::to_string(kMaxMessage)};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

TEST(GpuDaemonTest, DaemonOffersTheCudaBackend) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  auto c = d.Connect();
  ASSERT_TRUE(c);
  VersionInfo v;
  ASSERT_TRUE(c->GetVersion(&v).ok());
  EXPECT_EQ(v.active_backend, "cuda");
  EXPECT_NE(std::find(v.capabilities.begin(), v.capabilities.end(), "gpu.client_executed"), v.capabilities.end());
}

// Every dtype x op, one-shot and two-shot sizes, in and out of place, on heap
// buffers (zero-copy) and on cudaMalloc buffers (staged), at 2 and 4 ranks.
TEST(GpuDaemonTest, AllReduceAndAllGatherAreExactStagedAndZeroCopy) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  const DataType types[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kInt32,
                            DataType::kFloat64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  uint64_t seed = 1;
  for (uint32_t n : {2u, 4u}) {
    Ranks ranks;
    ASSERT_TRUE(ranks.Create(d, "exact-" + std::to_string(n), n, 256ull << 20).ok());
    for (bool zero_copy : {true, false}) {
      const uint64_t max_count = (1u << 20) + 3;  // 4+ MiB in float32: two-shot
      Buffers b;
      ASSERT_TRUE(b.Init(ranks, zero_copy, max_count * 8, n * max_count * 8).ok());
      for (DataType dt : types) {
        for (ReduceOp op : ops) {
          if (!IsValidReduction(dt, op)) continue;
          for (uint64_t count : {uint64_t{7}, uint64_t{1000}, max_count}) {
            if (count * DataTypeSize(dt) > kMaxMessage) continue;
            for (bool in_place : {false, true}) {
              ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, dt, op, count, in_place, ++seed,
                                                       zero_copy ? "zero-copy" : "staged"));
            }
          }
        }
      }
      for (DataType dt : {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64}) {
        for (uint64_t count : {uint64_t{5}, uint64_t{65536}, uint64_t{300001}}) {
          for (bool in_place : {false, true}) {
            ++seed;
            const size_t es = DataTypeSize(dt);
            std::vector<Handle> h(n);
            auto send_of = [&](uint32_t r) {
              return in_place ? static_cast<uint8_t*>(b.recv[r]) + r * count * es : static_cast<uint8_t*>(b.send[r]);
            };
            for (uint32_t r = 0; r < n; ++r) {  // in place: poison all of recv, then the input into its chunk
              Prepare(dt, ReduceOp::kUnspecified, true, n, r, seed, count, send_of(r), b.recv[r]);
            }
            for (uint32_t r = 0; r < n; ++r) {
              ASSERT_TRUE(
                  ranks.comms[r]->AllGather(send_of(r), b.recv[r], count, dt, ranks.streams[r], &h[r]).ok());
            }
            for (uint32_t r = 0; r < n; ++r) {
              Status s = h[r].Wait();
              ASSERT_TRUE(s.ok()) << s.ToString();
              auto out = Download(b.recv[r], n * count * es);
              EXPECT_EQ(testing::CountWrongAllGather(dt, n, seed, out.data(), count), 0u)
                  << "all-gather n=" << n << (zero_copy ? " zero-copy " : " staged ") << DataTypeName(dt)
                  << " count=" << count << (in_place ? " in place" : "") << " rank " << r;
            }
          }
        }
      }
    }
  }
}

// Graphs captured with several sizes on one communicator, replayed with new
// values every time and interleaved with eager ops: each replay takes new
// indices on the device, and the daemon's counts show exactly one op per
// captured op per replay.
TEST(GpuDaemonTest, GraphReplayWithChangingSizesInterleavedWithEagerOps) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const std::vector<uint64_t> sizes = {128ull << 20, 32ull << 20, 128ull << 20, 1ull << 20,
                                       16ull << 10,  16ull << 20, 64ull << 20};  // bytes
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "graph", n, 2 * total + (64ull << 20)).ok());
  // Per rank: one send region (largest size) and one recv region per captured
  // op, on the heap (zero-copy); a staged op on cudaMalloc buffers; the eager op's recv.
  const uint64_t staged_count = 1 << 20;  // 4 MiB: staged two-shot with copy-out, inside the graph
  std::vector<Buffer> send(n), recv(n), eager_recv(n);
  Buffers staged;
  ASSERT_TRUE(staged.Init(ranks, false, staged_count * 4, staged_count * 4).ok());
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(ranks.comms[r]->AllocBuffer(128ull << 20, &send[r]).ok());
    ASSERT_TRUE(ranks.comms[r]->AllocBuffer(total, &recv[r]).ok());
    ASSERT_TRUE(ranks.comms[r]->AllocBuffer(16 << 10, &eager_recv[r]).ok());
  }
  std::vector<gpuGraphExec_t> exec(n);
  for (uint32_t r = 0; r < n; ++r) {
    gpuGraph_t graph;
    ASSERT_EQ(gpuStreamBeginCapture(ranks.streams[r], gpuStreamCaptureModeThreadLocal), gpuSuccess);
    uint64_t at = 0;
    for (uint64_t bytes : sizes) {
      Handle h;
      Status s = ranks.comms[r]->AllReduce(send[r].data(), recv[r].as<uint8_t>() + at, bytes / 4, DataType::kFloat32,
                                           ReduceOp::kSum, ranks.streams[r], &h);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(h.Wait().code(), StatusCode::kFailedPrecondition);  // captured: wait on a stream
      at += bytes;
    }
    Handle hs;
    Status s = ranks.comms[r]->AllReduce(staged.send[r], staged.recv[r], staged_count, DataType::kFloat32,
                                         ReduceOp::kSum, ranks.streams[r], &hs);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(gpuStreamEndCapture(ranks.streams[r], &graph), gpuSuccess);
    ASSERT_EQ(gpuGraphInstantiate(&exec[r], graph), gpuSuccess);
    gpuGraphDestroy(graph);
  }
  const int kReplays = 5;
  uint64_t eager = 0;
  for (int rep = 0; rep < kReplays; ++rep) {
    const uint64_t seed = 1000 + rep;
    for (uint32_t r = 0; r < n; ++r) {
      std::vector<uint8_t> in((128ull << 20));
      testing::FillInput(DataType::kFloat32, ReduceOp::kSum, r, seed, in.data(), in.size() / 4);
      ASSERT_TRUE(Upload(send[r].data(), in).ok());
      std::vector<uint8_t> poison(total);
      testing::Poison(DataType::kFloat32, poison.data(), total / 4);
      ASSERT_TRUE(Upload(recv[r].data(), poison).ok());
      Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, seed, staged_count, staged.send[r], staged.recv[r]);
    }
    for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(gpuGraphLaunch(exec[r], ranks.streams[r]), gpuSuccess);
    // An eager op right behind the replay on the same stream.
    std::vector<Handle> h(n);
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(ranks.comms[r]
                      ->AllReduce(send[r].data(), eager_recv[r].data(), 4096, DataType::kFloat32, ReduceOp::kSum,
                                  ranks.streams[r], &h[r])
                      .ok());
    }
    ++eager;
    for (uint32_t r = 0; r < n; ++r) {
      Status s = h[r].Wait();
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    for (uint32_t r = 0; r < n; ++r) {
      uint64_t at = 0;
      auto out = Download(recv[r].data(), total);
      for (uint64_t bytes : sizes) {
        EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, seed, out.data() + at, bytes / 4),
                  0u)
            << "replay " << rep << " size " << bytes << " rank " << r;
        at += bytes;
      }
      auto staged_out = Download(staged.recv[r], staged_count * 4);
      EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, seed, staged_out.data(),
                                             staged_count), 0u) << "replay " << rep << " staged, rank " << r;
      auto eager_out = Download(eager_recv[r].data(), 16 << 10);
      EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, seed, eager_out.data(), 4096), 0u)
          << "replay " << rep << " eager, rank " << r;
    }
  }
  const v1::GetStatsResponse stats = Stats(d);
  bool found = false;
  for (const auto& c : stats.communicators()) {
    if (c.key() != "graph") continue;
    found = true;
    const uint64_t expect = kReplays * (sizes.size() + 1) + eager;
    EXPECT_EQ(c.posted(), expect);
    EXPECT_EQ(c.completed(), expect);
    for (const auto& rs : c.ranks()) {
      EXPECT_EQ(rs.posted(), expect) << "rank " << rs.rank();
      EXPECT_EQ(rs.captured_plans(), sizes.size() + 1) << "plans registered at capture time, rank " << rs.rank();
    }
  }
  EXPECT_TRUE(found);
  for (auto e : exec) gpuGraphExecDestroy(e);
}

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

TEST(GpuDaemonTest, DelayedRankStillGivesExactResults) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--debug-delay-rank", "1", "--debug-delay-us", "100000"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 4;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "skew", n, 64ull << 20).ok());
  Buffers b;
  ASSERT_TRUE(b.Init(ranks, true, 16ull << 20, 16ull << 20).ok());
  for (uint64_t count : {uint64_t{1000}, uint64_t{4u << 20}}) {
    std::vector<Handle> h(n);
    for (uint32_t r = 0; r < n; ++r) {
      Prepare(DataType::kFloat32, ReduceOp::kSum, false, n, r, count, count, b.send[r], b.recv[r]);
    }
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(ranks.comms[r]
                      ->AllReduce(b.send[r], b.recv[r], count, DataType::kFloat32, ReduceOp::kSum, ranks.streams[r],
                                  &h[r])
                      .ok());
    }
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(h[r].Wait().ok());
      auto out = Download(b.recv[r], count * 4);
      EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, count, out.data(), count), 0u);
    }
  }
}

TEST(GpuDaemonTest, RanksThatDisagreeFailFastOnEveryRank) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "mismatch", n, 0).ok());
  Buffers b;
  ASSERT_TRUE(b.Init(ranks, false, 1 << 16, 1 << 16).ok());
  std::vector<Handle> h(n);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(ranks.comms[r]
                    ->AllReduce(b.send[r], b.recv[r], 1024 * (r + 1), DataType::kFloat32, ReduceOp::kSum,
                                ranks.streams[r], &h[r])
                    .ok());
  }
  for (uint32_t r = 0; r < n; ++r) {
    Status s = h[r].Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("different ops"), std::string::npos) << s.message();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
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

std::string GpuClientBin() {
  const char* e = std::getenv("COLLECTIVED_GPU_TEST_CLIENT_BIN");
  return e != nullptr ? e : COLLECTIVED_GPU_TEST_CLIENT_BIN;
}

// Ranks in separate processes (without MPS the GPU time-slices between them:
// slow, still exact). Then a rank process killed with SIGKILL while its peer's
// kernel spins for it: the peer gets ABORTED, not a hang.
// Two ranks as separate processes of the GPU test client on communicator
// `key`; rank 1 is SIGKILLed while rank 0's kernel spins for it: rank 0 must
// get ABORTED naming rank 1, well before its op deadline.
void ExpectKilledPeerAborts(const Daemon& d, const std::string& key) {
  auto spawn = [&](uint32_t rank, std::vector<std::string> extra) {
    std::vector<std::string> argv = {GpuClientBin(), "--socket", d.socket(), "--key", key, "--world", "2",
                                     "--rank", std::to_string(rank)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<testing::Process>(argv, d.dir() + "/gpu-" + key + std::to_string(rank) + ".log");
  };
  auto survivor = spawn(0, {"--expect", std::to_string(static_cast<int>(StatusCode::kAborted))});
  auto victim = spawn(1, {"--hang", "1"});
  for (int i = 0; i < 600 && survivor->Output().find("posted") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(survivor->Output().find("posted"), std::string::npos) << survivor->Output() << victim->Output();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its kernel is spinning for rank 1
  const auto t0 = std::chrono::steady_clock::now();
  victim->Kill(SIGKILL);
  EXPECT_EQ(survivor->Wait(kOpTimeoutMs), 0) << survivor->Output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(survivor->Output().find("rank 1"), std::string::npos) << survivor->Output();
}

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

TEST(GpuDaemonTest, BadInputGetsSpecificErrors) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "bad", 1, 1 << 20).ok());
  Communicator& c = *ranks.comms[0];
  Handle h;
  std::vector<float> host(1024);
  void* dev = nullptr;
  ASSERT_EQ(gpuMalloc(&dev, kMaxMessage * 2), gpuSuccess);
  EXPECT_EQ(c.AllReduce(host.data(), dev, 1024, DataType::kFloat32, ReduceOp::kSum, ranks.streams[0], &h).code(),
            StatusCode::kInvalidArgument);  // a host pointer
  EXPECT_EQ(c.AllReduce(dev, dev, kMaxMessage, DataType::kFloat32, ReduceOp::kSum, ranks.streams[0], &h).code(),
            StatusCode::kInvalidArgument);  // above the staging slot
  EXPECT_EQ(c.AllReduce(dev, dev, 16, DataType::kInt32, ReduceOp::kAvg, ranks.streams[0], &h).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AllReduce(dev, dev, 0, DataType::kFloat32, ReduceOp::kSum, ranks.streams[0], &h).code(),
            StatusCode::kInvalidArgument);
  Buffer big;
  EXPECT_EQ(c.AllocBuffer(2 << 20, &big).code(), StatusCode::kResourceExhausted);
  Buffer host_buf;
  EXPECT_EQ(c.AllReduce(host_buf, host_buf, 4, DataType::kFloat32, ReduceOp::kSum, &h).code(),
            StatusCode::kFailedPrecondition);
  // Nothing was enqueued by the refused calls: a good op still runs at index 0.
  Prepare(DataType::kFloat32, ReduceOp::kSum, false, 1, 0, 3, 1024, dev, static_cast<uint8_t*>(dev) + kMaxMessage);
  ASSERT_TRUE(c.AllReduce(dev, static_cast<uint8_t*>(dev) + kMaxMessage, 1024, DataType::kFloat32, ReduceOp::kSum,
                          ranks.streams[0], &h)
                  .ok());
  ASSERT_TRUE(h.Wait().ok());
  auto out = Download(static_cast<uint8_t*>(dev) + kMaxMessage, 4096);
  EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 1, 3, out.data(), 1024), 0u);
  gpuFree(dev);
  // A daemon on the host backend refuses GPU communicators with the reason.
  Daemon host_daemon({"--backend", "host"});
  ASSERT_TRUE(host_daemon.ready());
  auto client = host_daemon.Connect();
  std::unique_ptr<Communicator> comm;
  Status s = client->CreateCommunicator({.key = "g", .world_size = 1, .rank = 0, .device = 0}, &comm);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
}

}  // namespace
}  // namespace collectived

// The shared fixture of gpu_daemon_test (one executable, built from the
// gpu_daemon_*_test.cc files, one theme each): GPU communicators through a
// real collectived on the cuda backend (label gpu; skipped where no GPU is
// visible). Ranks are threads of this process, each with its own client
// session and stream, on one GPU: every op runs the whole path (daemon-owned
// cuMem windows imported by fd, device-side indices and matcher, staged and
// zero-copy data, completion into handles).
#ifndef COLLECTIVED_TESTS_INTEGRATION_GPU_DAEMON_FIXTURE_H_
#define COLLECTIVED_TESTS_INTEGRATION_GPU_DAEMON_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/gpu/gpu_check.h"
#include "collectived/client.h"
#include "collectived/v1/collectived.grpc.pb.h"
#include "tests/integration/daemon_harness.h"
#include "tests/support/exact_data.h"

namespace collectived::gpu_test {

using testing::Daemon;

bool HaveGpu();
#define REQUIRE_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine"

constexpr uint64_t kMaxMessage = 8ull << 20;  // the daemon's staging slots
constexpr uint64_t kOpTimeoutMs = 20000;

// n ranks of one GPU communicator, each its own session and stream.
struct Ranks {
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<gpuStream_t> streams;
  // CommunicatorOptions::gpu_op_trace: off, as users get it, unless a test
  // proves a race window from the device trace.
  bool op_trace = false;

  Status Create(const Daemon& d, const std::string& key, uint32_t n, uint64_t heap_bytes,
                ExecutionMode mode = ExecutionMode::kClient) {
    return Create([&d](uint32_t r) { return d.Connect("rank" + std::to_string(r)); }, key, n, heap_bytes, mode);
  }
  // Rank r's client from `connect(r)` (ranks on several daemons: a
  // communicator across nodes).
  Status Create(const std::function<std::unique_ptr<Client>(uint32_t)>& connect, const std::string& key, uint32_t n,
                uint64_t heap_bytes, ExecutionMode mode) {
    clients.resize(n);
    comms.resize(n);
    streams.resize(n);
    std::vector<Status> st(n);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        clients[r] = connect(r);
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
        o.gpu_op_trace = op_trace;
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

// Synchronous copies between host and device memory.
Status Upload(void* dst, const std::vector<uint8_t>& host);
std::vector<uint8_t> Download(const void* src, uint64_t bytes);

// Exact inputs of rank r into `send` (or recv's place for in-place ops), recv poisoned.
void Prepare(DataType dt, ReduceOp op, bool gather, uint32_t world, uint32_t r, uint64_t seed, uint64_t count,
             void* send, void* recv);

// One all-reduce on every rank of `ranks` (rank r's input in b.send[r], or in
// b.recv[r] in place), every rank's result checked exactly; `what` names the
// case in failures.
void CheckedAllReduce(const Daemon& d, Ranks& ranks, Buffers& b, DataType dt, ReduceOp op, uint64_t count,
                      bool in_place, uint64_t seed, const std::string& what);
// The same, with `log()` (the daemons' output) in failures.
void CheckedAllReduce(const std::function<std::string()>& log, Ranks& ranks, Buffers& b, DataType dt, ReduceOp op,
                      uint64_t count, bool in_place, uint64_t seed, const std::string& what);

// One all-gather of `count` float32 per rank on every rank of `ranks` (rank
// r's input in send[r], or in its chunk of recv[r] in place), every rank's
// output checked exactly.
void CheckedAllGather(Ranks& ranks, const std::vector<void*>& send, const std::vector<void*>& recv, uint64_t count,
                      bool in_place, uint64_t seed, const std::string& what);

// The daemon's gRPC service without the client library, and its stats.
std::unique_ptr<v1::CollectiveService::Stub> RawStub(const Daemon& d);
v1::GetStatsResponse Stats(const Daemon& d);

// A cuda-backend daemon with staging slots of kMaxMessage, and `extra`.
std::vector<std::string> DaemonFlags(std::vector<std::string> extra = {});

// The GPU test client (one rank per process): COLLECTIVED_GPU_TEST_CLIENT_BIN
// when set, else the one this build made.
std::string GpuClientBin();

// Two ranks as separate processes of the GPU test client on communicator
// `key`; rank 1 is SIGKILLed while rank 0's kernel spins for it: rank 0 must
// get ABORTED naming rank 1, well before its op deadline.
void ExpectKilledPeerAborts(const Daemon& d, const std::string& key);

}  // namespace collectived::gpu_test

#endif  // COLLECTIVED_TESTS_INTEGRATION_GPU_DAEMON_FIXTURE_H_

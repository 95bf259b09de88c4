// GPU daemon tests. Plain ops and graphs: exact results of every dtype x op,
// staged and zero-copy, graph replays, a delayed rank, ranks that disagree,
// bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/integration/gpu_daemon_fixture.h"

namespace collectived::gpu_test {
namespace {

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
    // No trace unless asked for (CommunicatorOptions::gpu_op_trace; the
    // seed-bug test reads one that was): the ops below run without it.
    std::vector<OpTrace> no_trace;
    EXPECT_EQ(ranks.comms[0]->GetOpTrace(0, &no_trace).code(), StatusCode::kFailedPrecondition);
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

// --gpu-max-blocks-per-rank caps every rank's kernel (the block count the
// daemon logs at formation is the cap, not SMs / ranks), and ops stay exact
// with that few blocks: one-shot and two-shot, in and out of place, staged
// and zero copy.
TEST(GpuDaemonTest, MaxBlocksPerRankCapsTheKernelsAndOpsStayExact) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags({"--gpu-max-blocks-per-rank", "3"}));
  ASSERT_TRUE(d.ready()) << d.Log();
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "capped", 2, 64ull << 20).ok());
  uint64_t seed = 4100;
  for (bool zero_copy : {true, false}) {
    const uint64_t max_count = (1u << 20) + 3;
    Buffers b;
    ASSERT_TRUE(b.Init(ranks, zero_copy, max_count * 4, max_count * 4).ok());
    for (uint64_t count : {uint64_t{1}, uint64_t{4099}, max_count}) {
      for (bool in_place : {false, true}) {
        ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, DataType::kFloat32, ReduceOp::kSum, count, in_place,
                                                 ++seed, zero_copy ? "capped, zero copy" : "capped, staged"));
      }
    }
  }
  EXPECT_NE(d.Log().find(": 3 blocks per rank's kernel"), std::string::npos) << d.Log();
}

// Where processes share a GPU, a communicator formed while another is live
// there leaves room for the live one's ranks (daemon/gpu_blocks.h): two
// 2-rank communicators on one GPU take SMs / 2 and SMs / 4 blocks per rank,
// and the daemon warns that together they could need more than the card's
// SMs; ops of both in flight at once stay exact; one formed after both
// closed takes SMs / 2 again.
TEST(GpuDaemonTest, ACommunicatorBesideALiveOneOnItsGpuLeavesItRoom) {
  REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, 0), gpuSuccess);
  const std::string alone = std::to_string(std::min(128, sms / 2)) + " blocks per rank's kernel";
  const std::string beside = std::to_string(sms / 4) + " blocks per rank's kernel, beside 2 ranks";
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  {
    Ranks first, second;
    ASSERT_TRUE(first.Create(d, "first", 2, 64ull << 20).ok());
    ASSERT_TRUE(second.Create(d, "second", 2, 64ull << 20).ok());
    EXPECT_NE(d.Log().find("'first': " + alone + "\n"), std::string::npos) << d.Log();
    EXPECT_NE(d.Log().find("'second': " + beside), std::string::npos) << d.Log();
    EXPECT_NE(d.Log().find("'second': with the live ones it could need more blocks"), std::string::npos) << d.Log();
    const uint64_t count = (1u << 20) + 3;  // 4 MiB and a tail: inside the 8 MiB staging slot
    Buffers bf, bs;
    ASSERT_TRUE(bf.Init(first, true, count * 4, count * 4).ok());
    ASSERT_TRUE(bs.Init(second, false, count * 4, count * 4).ok());
    for (uint64_t seed = 7300; seed < 7304; ++seed) {
      std::vector<Handle> h;
      h.reserve(4);
      for (auto [ranks, b, s] : {std::tuple{&first, &bf, seed}, std::tuple{&second, &bs, seed + 50}}) {
        for (uint32_t r = 0; r < 2; ++r) {
          Prepare(DataType::kFloat32, ReduceOp::kSum, false, 2, r, s, count, b->send[r], b->recv[r]);
        }
      }
      for (uint32_t r = 0; r < 2; ++r) {  // every rank's op in flight before any is waited for
        for (auto [ranks, b] : {std::pair{&first, &bf}, std::pair{&second, &bs}}) {
          h.emplace_back();
          Status s = ranks->comms[r]->AllReduce(b->send[r], b->recv[r], count, DataType::kFloat32, ReduceOp::kSum,
                                                ranks->streams[r], &h.back());
          ASSERT_TRUE(s.ok()) << s.ToString();
        }
      }
      for (Handle& one : h) {
        Status s = one.Wait();
        ASSERT_TRUE(s.ok()) << s.ToString() << d.Log();
      }
      for (auto [b, s] : {std::pair{&bf, seed}, std::pair{&bs, seed + 50}}) {
        for (uint32_t r = 0; r < 2; ++r) {
          auto out = Download(b->recv[r], count * 4);
          EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 2, s, out.data(), count), 0u)
              << (b == &bf ? "first" : "second") << " rank " << r << " seed " << s;
        }
      }
    }
  }
  Ranks third;
  ASSERT_TRUE(third.Create(d, "third", 2, 64ull << 20).ok());
  EXPECT_NE(d.Log().find("'third': " + alone + "\n"), std::string::npos) << d.Log();
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

// Client-executed ops stay exact, zero-copy and staged, one-shot and
// two-shot, under a daemon option that changes a flag's fence (`flag`).
void ExpectOpsExactWithDaemonFlag(const std::string& flag, uint64_t seed) {
  Daemon d(DaemonFlags({flag}));
  ASSERT_TRUE(d.ready()) << d.Log();
  for (uint32_t n : {2u, 4u}) {
    Ranks ranks;
    ASSERT_TRUE(ranks.Create(d, "option-" + std::to_string(n), n, 64ull << 20).ok());
    for (bool zero_copy : {true, false}) {
      const uint64_t max_count = 300001;  // float32: 1.2 MiB, two-shot
      Buffers b;
      ASSERT_TRUE(b.Init(ranks, zero_copy, max_count * 4, max_count * 4).ok());
      for (uint64_t count : {uint64_t{1000}, max_count}) {
        ASSERT_NO_FATAL_FAILURE(CheckedAllReduce(d, ranks, b, DataType::kFloat32, ReduceOp::kSum, count, false, ++seed,
                                                 flag + (zero_copy ? ", zero-copy" : ", staged")));
      }
    }
  }
}

// The daemon option that puts the start flag's release back
// (--gpu-start-flag-release, ring::kGpuStartFlagRelease).
TEST(GpuDaemonTest, StartFlagReleaseOptionKeepsOpsExact) {
  REQUIRE_GPU();
  ExpectOpsExactWithDaemonFlag("--gpu-start-flag-release", 900);
}

// The daemon option that keeps the end flag's fence at system scope where
// the ranks share a GPU (--gpu-system-end-fence, ring::kGpuSystemEndFence);
// every other test here runs GPU scope, the default on one GPU.
TEST(GpuDaemonTest, SystemEndFenceOptionKeepsOpsExact) {
  REQUIRE_GPU();
  ExpectOpsExactWithDaemonFlag("--gpu-system-end-fence", 950);
}

// Zero-copy eager ops complete a word per block and carry their generation
// to the host, not a verdict: the verdict is the rank's failure record
// (GpuOpState::Code, GenVerdict). An op that ran before a failure stays OK
// though waited on after it (its result exact); the op that failed and every
// op after it fail, on every rank, with the first failure's reason.
TEST(GpuDaemonTest, ZeroCopyEagerVerdictsFollowTheRanksFirstFailure) {
  REQUIRE_GPU();
  Daemon d(DaemonFlags());
  ASSERT_TRUE(d.ready()) << d.Log();
  const uint32_t n = 2;
  const uint64_t count = 1000;
  Ranks ranks;
  ASSERT_TRUE(ranks.Create(d, "eager-verdicts", n, /*heap_bytes=*/4 << 20).ok());
  Buffers b;
  Status made = b.Init(ranks, /*zero_copy=*/true, 1 << 16, 1 << 16);
  ASSERT_TRUE(made.ok()) << made.ToString();
  auto all_reduce = [&](uint32_t r, uint64_t c, Handle* h) {
    return ranks.comms[r]->AllReduce(b.send[r], b.recv[r], c, DataType::kInt32, ReduceOp::kSum, ranks.streams[r], h);
  };
  for (uint32_t r = 0; r < n; ++r) {
    // Heap buffers: the ops are single launches, which carry generations
    // (staged ops would pass the checks below through LaunchComplete's copy).
    ASSERT_TRUE(ranks.comms[r]->ZeroCopy(b.send[r], (count + 1) * 4) && ranks.comms[r]->ZeroCopy(b.recv[r], (count + 1) * 4));
    Prepare(DataType::kInt32, ReduceOp::kSum, false, n, r, 17, count, b.send[r], b.recv[r]);
  }
  std::vector<Handle> before(n), failed(n), after(n);
  for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(all_reduce(r, count, &before[r]).ok());
  // The ranks disagree on the count: the device-side matcher fails the op
  // in its start barrier, before any data moves.
  for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(all_reduce(r, count + r, &failed[r]).ok());
  for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(all_reduce(r, count, &after[r]).ok());
  for (uint32_t r = 0; r < n; ++r) {  // waited on last to first: each reads the record as it ends
    Status s = after[r].Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "after, rank " << r << ": " << s.ToString();
    s = failed[r].Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "failed, rank " << r << ": " << s.ToString();
    EXPECT_NE(s.message().find("different ops"), std::string::npos) << s.message();
    s = before[r].Wait();
    EXPECT_TRUE(s.ok()) << "before, rank " << r << ": " << s.ToString();
    auto out = Download(b.recv[r], count * 4);
    EXPECT_EQ(testing::CountWrongAllReduce(DataType::kInt32, ReduceOp::kSum, n, 17, out.data(), count), 0u)
        << "rank " << r;
    EXPECT_EQ(ranks.comms[r]->AsyncError().code(), StatusCode::kInvalidArgument) << "rank " << r;
  }
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
}  // namespace collectived::gpu_test

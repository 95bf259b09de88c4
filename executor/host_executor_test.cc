// Unit tests of the host backend's rank executor (prologue, one-shot,
// two-shot, gather, barriers, failure paths) with ranks as threads over one
// segment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "executor/host_executor.h"
#include "kernels/host/reduce.h"
#include "ring/matcher.h"
#include "ring/op_ring.h"
#include "tests/support/exact_data.h"

namespace collectived::host {
namespace {

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kInt32,   DataType::kInt64,   DataType::kUint32};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
// The failure tests run with the barrier path (lead 0) and with led ops
// (kLead: every op of theirs small enough to be led).
constexpr uint64_t kLead = 64 * 1024;

class LocalComm : public BufferResolver {
 public:
  LocalComm(uint32_t world, uint64_t max_bytes, uint64_t one_shot_max, uint64_t timeout_ms = 5000,
            int32_t delay_rank = -1, uint32_t delay_us = 0) {
    ring::SegmentParams p;
    p.debug_delay_rank = delay_rank;
    p.debug_delay_us = delay_us;
    p.world_size = world;
    p.ring_depth = 8;
    p.max_message_bytes = max_bytes;
    p.one_shot_max_bytes = one_shot_max;
    p.op_timeout_ns = timeout_ms * 1000000;
    ring::SegmentLayout l;
    EXPECT_TRUE(ring::SegmentLayout::Compute(p, &l).ok());
    mem_ = static_cast<uint8_t*>(std::aligned_alloc(4096, l.total_bytes));
    std::memset(mem_, 0, l.total_bytes);
    EXPECT_TRUE(ring::CommSegment::Initialize(mem_, l.total_bytes, p, &seg).ok());
  }
  ~LocalComm() override {
    for (auto& e : executors) e->Stop();
    std::free(mem_);
  }
  void StartExecutors() {
    for (uint32_t r = 0; r < seg.world_size(); ++r) {
      executors.push_back(std::make_unique<RankExecutor>(seg, r, this, nullptr, false, lead_max_bytes));
      executors.back()->Start();
    }
  }
  uint8_t* AddBuffer(uint32_t rank, uint64_t id, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& b = buffers_[{rank, id}];
    b.assign(bytes, 0);
    return b.data();
  }
  Status Resolve(uint32_t rank, uint64_t id, uint64_t offset, uint64_t bytes, void** ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = buffers_.find({rank, id & 0xffffffffu});  // Post makes ids unique per rank, as the daemon's are
    if (it == buffers_.end()) return Status::NotFound("buffer " + std::to_string(id) + " unknown");
    if (offset + bytes > it->second.size()) return Status::InvalidArgument("range outside buffer");
    *ptr = it->second.data() + offset;
    return Status::Ok();
  }
  bool ResolvesPeers() const override { return zero_copy; }
  bool zero_copy = false;  // read peers' buffers in place, as the daemon's executors do
  uint64_t lead_max_bytes = 0;  // led ops (needs zero_copy), as the daemon's executors run them
  // Led ops: what rank 0's executor decided for the latest op it decided.
  uint64_t LeadDecidedFor() const { return seg.control(0).lead.value.load() >> 2; }
  // The leader marks an op finished right after completing every rank's:
  // a waiter may see its completion first.
  uint64_t LeadState() const {
    const int64_t until = ring::NowNs() + 1'000'000'000;
    while ((seg.control(0).lead.value.load() & 3) == kLeadRunning && ring::NowNs() < until) std::this_thread::yield();
    return seg.control(0).lead.value.load() & 3;
  }
  void Lead(uint64_t max_bytes) {
    zero_copy = true;
    lead_max_bytes = max_bytes;
  }

  Status Post(uint32_t rank, ring::OpDescriptor d, uint64_t* index) {
    d.send_buffer_id |= static_cast<uint64_t>(rank + 1) << 32;
    d.recv_buffer_id |= static_cast<uint64_t>(rank + 1) << 32;
    d.algorithm = ring::ChooseAlgorithm(d.kind, d.count * DataTypeSize(d.dtype), seg.header().one_shot_max_bytes);
    ring::WaitContext ctx{&seg, nullptr, ring::NowNs() + 5'000'000'000};
    return ring::PostOp(seg, rank, d, ctx, index);
  }
  Status Wait(uint32_t rank, uint64_t index) {
    ring::WaitContext ctx{nullptr, nullptr, ring::NowNs() + 10'000'000'000};
    return ring::WaitOpDone(seg, rank, index, ctx);
  }

  ring::CommSegment seg;
  std::vector<std::unique_ptr<RankExecutor>> executors;

 private:
  uint8_t* mem_;
  std::mutex mu_;
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> buffers_;
};

ring::OpDescriptor Desc(CollectiveKind kind, DataType dt, ReduceOp op, uint64_t count, uint64_t send_id,
                        uint64_t send_off, uint64_t recv_id, uint64_t recv_off) {
  ring::OpDescriptor d{};
  d.kind = kind;
  d.dtype = dt;
  d.reduce_op = op;
  d.count = count;
  d.send_buffer_id = send_id;
  d.send_offset = send_off;
  d.recv_buffer_id = recv_id;
  d.recv_offset = recv_off;
  return d;
}

// All-reduce of every dtype x op and all-gather of every dtype, in place and
// out of place, at the element counts `counts(kind, es)` gives, each exact on
// every rank. Led (comm.lead_max_bytes set): the lead word shows each op led
// exactly when every rank's output together fits the limit.
template <typename Counts>
void ExpectEveryCollectiveExact(LocalComm& comm, Counts counts) {
  const uint32_t n = comm.seg.world_size();
  const uint64_t lead = comm.lead_max_bytes;
  uint64_t seed = 1;
  auto check_lead = [&](uint64_t index, uint64_t out_bytes) {
    if (lead == 0) return;
    EXPECT_EQ(comm.LeadDecidedFor(), index + 1);
    EXPECT_EQ(comm.LeadState(), n * out_bytes <= lead ? kLeadFinished : kLeadDeclined) << out_bytes << " bytes";
  };
  for (DataType dt : kAllTypes) {
    const size_t es = DataTypeSize(dt);
    for (uint64_t count : counts(CollectiveKind::kAllReduce, es)) {
      for (ReduceOp op : kAllOps) {
        if (!IsValidReduction(dt, op)) continue;
        for (bool in_place : {false, true}) {
          ++seed;
          std::vector<uint8_t*> send(n), recv(n);
          std::vector<uint64_t> idx(n);
          for (uint32_t r = 0; r < n; ++r) {
            send[r] = comm.AddBuffer(r, 1, count * es);
            recv[r] = in_place ? send[r] : comm.AddBuffer(r, 2, count * es);
            testing::FillInput(dt, op, r, seed, send[r], count);
            if (!in_place) testing::Poison(dt, recv[r], count);
            ASSERT_TRUE(comm.Post(r, Desc(CollectiveKind::kAllReduce, dt, op, count, 1, 0, in_place ? 1 : 2, 0),
                                  &idx[r]).ok());
          }
          for (uint32_t r = 0; r < n; ++r) {
            ASSERT_TRUE(comm.Wait(r, idx[r]).ok());
            EXPECT_EQ(testing::CountWrongAllReduce(dt, op, n, seed, recv[r], count), 0u)
                << "n=" << n << " " << DataTypeName(dt) << " " << ReduceOpName(op) << " count=" << count
                << (in_place ? " in place" : "") << " rank " << r << " lead " << lead;
          }
          check_lead(idx[0], count * es);
        }
      }
    }
    for (uint64_t count : counts(CollectiveKind::kAllGather, es)) {
      for (bool in_place : {false, true}) {
        ++seed;
        std::vector<uint8_t*> recv(n);
        std::vector<uint64_t> idx(n);
        for (uint32_t r = 0; r < n; ++r) {
          recv[r] = comm.AddBuffer(r, 3, n * count * es);
          testing::Poison(dt, recv[r], n * count);
          uint8_t* send = in_place ? recv[r] + r * count * es : comm.AddBuffer(r, 4, count * es);
          testing::FillInput(dt, ReduceOp::kUnspecified, r, seed, send, count);
          ASSERT_TRUE(comm.Post(r, Desc(CollectiveKind::kAllGather, dt, ReduceOp::kUnspecified, count,
                                        in_place ? 3 : 4, in_place ? r * count * es : 0, 3, 0),
                                &idx[r]).ok());
        }
        for (uint32_t r = 0; r < n; ++r) {
          ASSERT_TRUE(comm.Wait(r, idx[r]).ok());
          EXPECT_EQ(testing::CountWrongAllGather(dt, n, seed, recv[r], count), 0u)
              << "all_gather n=" << n << " " << DataTypeName(dt) << " count=" << count << " lead " << lead;
        }
        check_lead(idx[0], n * count * es);
      }
    }
  }
  EXPECT_EQ(comm.seg.header().ops_failed.load(), 0u);
  EXPECT_EQ(comm.seg.header().ops_completed.load(), comm.seg.header().ops_matched.load());
}

// One-shot and two-shot (odd counts so shards are uneven), copied into slots
// and (above 64 KiB) read in place.
TEST(HostExecutorTest, AllCollectivesEveryTypeBothAlgorithmsBothPlacements) {
  for (uint32_t n : {2u, 3u, 4u}) {
    for (bool zero_copy : {false, true}) {
      LocalComm comm(n, 128 * 1024, /*one_shot_max=*/4096);
      comm.zero_copy = zero_copy;
      comm.StartExecutors();
      ExpectEveryCollectiveExact(comm, [](CollectiveKind, size_t es) {
        return std::vector<uint64_t>{1, 37, 4096 / es + 7, 65536 / es + 3};
      });
    }
  }
}

// Led ops, at 2, 3 and 8 ranks: output sizes at and just past the limit, so
// led and declined ops alternate.
TEST(HostExecutorTest, LedOpsAreExactAndLedOnlyUpToTheirLimit) {
  constexpr uint64_t kLimit = 16384;
  for (uint32_t n : {2u, 3u, 8u}) {
    LocalComm comm(n, 64 * 1024, /*one_shot_max=*/2048);
    comm.Lead(kLimit);
    comm.StartExecutors();
    ExpectEveryCollectiveExact(comm, [n](CollectiveKind kind, size_t es) {
      const uint64_t at = kind == CollectiveKind::kAllGather ? kLimit / es / n / n : kLimit / es / n;
      return std::vector<uint64_t>{1, 37, at, at + 1};
    });
  }
}

// Zero copy in place, small (one-shot-sized) messages, one reader 2 ms late:
// a one-shot would let the fast rank overwrite its input (its output) before
// the late rank read it. The executor must use a plan that cannot.
TEST(HostExecutorTest, ZeroCopyInPlaceSurvivesADelayedReader) {
  const uint32_t n = 3;
  LocalComm comm(n, 256 * 1024, /*one_shot_max=*/256 * 1024, 5000, /*delay_rank=*/1, /*delay_us=*/2000);
  comm.zero_copy = true;
  comm.StartExecutors();
  for (int trial = 0; trial < 5; ++trial) {
    const uint64_t count = 20000 + trial;  // 80 KB: zero copy, one-shot sized
    std::vector<uint64_t> idx(n);
    std::vector<uint8_t*> buf(n);
    for (uint32_t r = 0; r < n; ++r) {
      buf[r] = comm.AddBuffer(r, 1, count * 4);
      testing::FillInput(DataType::kFloat32, ReduceOp::kSum, r, trial, buf[r], count);
      ASSERT_TRUE(comm.Post(r, Desc(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, count, 1, 0, 1, 0),
                            &idx[r]).ok());
    }
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(comm.Wait(r, idx[r]).ok());
      EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, n, trial, buf[r], count), 0u)
          << "trial " << trial << " rank " << r;
    }
  }
}

// Zero copy falls back to copying inputs into slots when a rank's send and
// recv ranges partially overlap (reading in place would race with the writes).
// Led (a small op), the same overlap goes through the leader's scratch.
TEST(HostExecutorTest, PartialOverlapFallsBackToCopyIn) {
 for (uint64_t lead : {uint64_t{0}, kLead}) {
  const uint32_t n = 2;
  LocalComm comm(n, 256 * 1024, 1024);
  comm.zero_copy = true;
  if (lead != 0) comm.Lead(lead);
  comm.StartExecutors();
  const uint64_t count = lead != 0 ? 2000 : 20000;  // led: 8 KB; else 80 KB, two-shot
  std::vector<uint64_t> idx(n);
  std::vector<uint8_t*> base(n);
  for (uint32_t r = 0; r < n; ++r) {
    base[r] = comm.AddBuffer(r, 1, (count + 16) * 4);
    testing::FillInput(DataType::kInt32, ReduceOp::kSum, r, 42, base[r], count);
    // recv starts 16 elements after send: the ranges overlap partially.
    ASSERT_TRUE(comm.Post(r, Desc(CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, count, 1, 0, 1, 64),
                          &idx[r]).ok());
  }
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(comm.Wait(r, idx[r]).ok());
    EXPECT_EQ(testing::CountWrongAllReduce(DataType::kInt32, ReduceOp::kSum, n, 42, base[r] + 64, count), 0u);
  }
  EXPECT_EQ(comm.LeadState(), lead != 0 ? uint64_t{kLeadFinished} : 0u);
 }
}

TEST(HostExecutorTest, MismatchFailsOnEveryRankAndTheNextOpStillWorks) {
 for (uint64_t lead : {uint64_t{0}, kLead}) {
  LocalComm comm(3, 4096, 1024);
  if (lead != 0) comm.Lead(lead);
  comm.StartExecutors();
  std::vector<uint64_t> idx(3);
  for (uint32_t r = 0; r < 3; ++r) {
    comm.AddBuffer(r, 1, 4096);
    ring::OpDescriptor d = Desc(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 16, 1, 0, 1, 0);
    if (r == 2) d.reduce_op = ReduceOp::kMax;
    ASSERT_TRUE(comm.Post(r, d, &idx[r]).ok());
  }
  for (uint32_t r = 0; r < 3; ++r) {
    Status s = comm.Wait(r, idx[r]);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("rank 2 posted all_reduce float32 max"), std::string::npos) << s.message();
  }
  for (uint32_t r = 0; r < 3; ++r) {
    float* b = reinterpret_cast<float*>(comm.AddBuffer(r, 1, 4096));
    for (int j = 0; j < 16; ++j) b[j] = static_cast<float>(r + 1);
    ASSERT_TRUE(comm.Post(r, Desc(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 16, 1, 0, 1, 0),
                          &idx[r]).ok());
  }
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(comm.Wait(r, idx[r]).ok());
    float out;
    void* p;
    ASSERT_TRUE(comm.Resolve(r, 1, 0, 4, &p).ok());
    std::memcpy(&out, p, 4);
    EXPECT_EQ(out, 6.0f);
  }
  EXPECT_FALSE(comm.seg.aborted());
  EXPECT_EQ(comm.seg.header().ops_failed.load(), 1u);
  EXPECT_EQ(comm.seg.header().ops_completed.load(), 1u);
  // Led: the mismatch was declined (ExecuteOp's verdict), the next op led.
  EXPECT_EQ(comm.LeadDecidedFor(), lead != 0 ? 2u : 0u);
  EXPECT_EQ(comm.LeadState(), lead != 0 ? uint64_t{kLeadFinished} : 0u);
 }
}

TEST(HostExecutorTest, OneRanksBadBufferFailsTheOpOnEveryRank) {
 for (uint64_t lead : {uint64_t{0}, kLead}) {
  LocalComm comm(2, 4096, 1024);
  if (lead != 0) comm.Lead(lead);
  comm.StartExecutors();
  comm.AddBuffer(0, 1, 4096);
  comm.AddBuffer(1, 1, 64);  // too small for rank 1's 128-byte message
  std::vector<uint64_t> idx(2);
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(comm.Post(r, Desc(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 32, 1, 0, 1, 0),
                          &idx[r]).ok());
  }
  for (uint32_t r = 0; r < 2; ++r) {
    Status s = comm.Wait(r, idx[r]);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 1: range outside buffer"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(comm.seg.aborted());
  EXPECT_EQ(comm.LeadState(), lead != 0 ? uint64_t{kLeadFinished} : 0u);  // led: the leader's resolve failed it
 }
}

// The missing rank is a follower (2) or, led, the leader (0): the others
// fail within about the op timeout, naming it.
TEST(HostExecutorTest, MissingRankTimesOutEveryRankWithoutHanging) {
 for (uint64_t lead : {uint64_t{0}, kLead}) {
  for (uint32_t missing : {2u, 0u}) {
  LocalComm comm(3, 4096, 1024, /*timeout_ms=*/200);
  if (lead != 0) comm.Lead(lead);
  comm.StartExecutors();
  std::vector<uint64_t> idx(3);
  for (uint32_t r = 0; r < 3; ++r) {
    if (r == missing) continue;
    comm.AddBuffer(r, 1, 4096);
    ASSERT_TRUE(comm.Post(r, Desc(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 8, 1, 0, 1, 0),
                          &idx[r]).ok());
  }
  const int64_t t0 = ring::NowNs();
  for (uint32_t r = 0; r < 3; ++r) {
    if (r == missing) continue;
    Status s = comm.Wait(r, idx[r]);
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString() << " lead " << lead;
    EXPECT_NE(s.message().find("rank " + std::to_string(missing) + " did not post"), std::string::npos)
        << s.message() << " lead " << lead;
  }
  EXPECT_LT(ring::NowNs() - t0, 3'000'000'000);
  EXPECT_TRUE(comm.seg.aborted());
  uint64_t i;
  const uint32_t poster = missing == 0 ? 1 : 0;
  EXPECT_EQ(comm.Post(poster, Desc(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 8, 1, 0, 1, 0), &i)
                .code(),
            StatusCode::kDeadlineExceeded);  // the abort is sticky, with its cause
  }
 }
}

// Led, the waiting rank is the leader (0) or a follower asleep on the lead word (1).
TEST(HostExecutorTest, AbortReleasesRanksWaitingInABarrier) {
 for (uint64_t lead : {uint64_t{0}, kLead}) {
  for (uint32_t poster : {0u, 1u}) {
  LocalComm comm(2, 4096, 1024, /*timeout_ms=*/60000);
  if (lead != 0) comm.Lead(lead);
  comm.StartExecutors();
  comm.AddBuffer(poster, 1, 4096);
  uint64_t idx;
  ASSERT_TRUE(comm.Post(poster, Desc(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 8, 1, 0, 1, 0),
                        &idx).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comm.seg.Abort(StatusCode::kAborted, "rank 1 (pid 1234) disconnected");  // what the daemon does
  const int64_t t0 = ring::NowNs();
  Status s = comm.Wait(poster, idx);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << "lead " << lead << " poster " << poster;
  EXPECT_NE(s.message().find("disconnected"), std::string::npos);
  EXPECT_LT(ring::NowNs() - t0, 1'000'000'000);
  }
 }
}

// Many ops in flight per rank (more than the ring depth), mixed kinds.
// Led ops in flight (clients posting ahead, led and declined mixed) when the
// communicator is aborted, at a different moment each trial: every posted
// op completes, once (a second completion by another thread is a race
// ThreadSanitizer reports, tests/sanitizers), and no completion word goes
// back past what its rank posted.
TEST(HostExecutorTest, AbortAmidLedOpsCompletesEveryOpOnce) {
  const uint32_t n = 4;
  for (int trial = 0; trial < 6; ++trial) {
    LocalComm comm(n, 16 * 1024, 2048, /*timeout_ms=*/2000);
    comm.Lead(16384);
    comm.StartExecutors();
    std::atomic<uint64_t> hung{0}, posted_total{0};
    std::vector<uint64_t> posted(n, 0);
    std::vector<std::thread> posters;
    for (uint32_t r = 0; r < n; ++r) {
      posters.emplace_back([&, r] {
        std::vector<uint64_t> pending;
        for (int k = 0; k < 300; ++k) {
          const uint64_t count = k % 4 == 0 ? 3000 : 1 + (k * 37) % 900;  // declined / led
          const uint64_t id = 100 + k;
          uint8_t* b = comm.AddBuffer(r, id, count * 4);
          testing::FillInput(DataType::kInt32, ReduceOp::kSum, r, k, b, count);
          uint64_t i;
          if (!comm.Post(r, Desc(CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, count, id, 0, id, 0), &i)
                   .ok()) {
            break;  // aborted: later posts fail
          }
          pending.push_back(i);
        }
        posted[r] = pending.size();
        posted_total += pending.size();
        for (uint64_t i : pending) {
          Status s = comm.Wait(r, i);
          if (s.code() == StatusCode::kDeadlineExceeded && s.message().find("op completion") != std::string::npos) {
            hung++;
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300 + trial * 700));
    comm.seg.Abort(StatusCode::kAborted, "rank 3 (pid 1) disconnected");
    for (auto& t : posters) t.join();
    EXPECT_EQ(hung.load(), 0u) << "trial " << trial;
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(comm.seg.control(r).completed.value.load(), posted[r]) << "trial " << trial << " rank " << r;
    }
  }
}

// Led (up to 16 KiB of outputs): led and declined ops interleave.
TEST(HostExecutorTest, ManyOpsInFlightStayOrderedAndExact) {
 for (uint64_t lead : {uint64_t{0}, uint64_t{16384}}) {
  const uint32_t n = 4;
  LocalComm comm(n, 16 * 1024, 2048);
  if (lead != 0) comm.Lead(lead);
  comm.StartExecutors();
  const int kOps = 200;
  std::vector<std::thread> posters;
  std::atomic<uint64_t> wrong{0}, failed{0};
  for (uint32_t r = 0; r < n; ++r) {
    posters.emplace_back([&, r] {
      std::vector<std::pair<uint64_t, int>> pending;
      for (int k = 0; k < kOps; ++k) {
        const uint64_t count = 1 + (k * 131) % 3000;
        const bool gather = k % 3 == 0;
        const uint64_t id = 100 + k;  // a buffer per op: inputs stay valid while in flight
        uint8_t* b = comm.AddBuffer(r, id, (gather ? n : 1) * count * 4);
        testing::FillInput(DataType::kInt32, gather ? ReduceOp::kUnspecified : ReduceOp::kSum, r, k, b, count);
        uint64_t i;
        ring::OpDescriptor d =
            gather ? Desc(CollectiveKind::kAllGather, DataType::kInt32, ReduceOp::kUnspecified, count, id, 0, id, 0)
                   : Desc(CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, count, id, 0, id, 0);
        if (gather) {  // in place from the rank's own chunk
          std::memmove(b + r * count * 4, b, count * 4);
          d.send_offset = r * count * 4;
        }
        if (!comm.Post(r, d, &i).ok()) failed++;
        pending.emplace_back(i, k);
      }
      for (auto [i, k] : pending) {
        if (!comm.Wait(r, i).ok()) failed++;
        const uint64_t count = 1 + (k * 131) % 3000;
        void* p;
        comm.Resolve(r, 100 + k, 0, 0, &p);
        wrong += k % 3 == 0 ? testing::CountWrongAllGather(DataType::kInt32, n, k, p, count)
                            : testing::CountWrongAllReduce(DataType::kInt32, ReduceOp::kSum, n, k, p, count);
      }
    });
  }
  for (auto& t : posters) t.join();
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(comm.seg.header().ops_completed.load(), static_cast<uint64_t>(kOps));
 }
}

}  // namespace
}  // namespace collectived::host

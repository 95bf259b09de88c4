// Unit tests of the op-ring protocol: layout, post/complete, matcher.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "ring/matcher.h"
#include "ring/op_codec.h"
#include "ring/op_ring.h"
#include "ring/segment_layout.h"
#include "ring/wait.h"

namespace collectived::ring {
namespace {

struct OwnedSegment {
  explicit OwnedSegment(const SegmentParams& p) {
    SegmentLayout l;
    EXPECT_TRUE(SegmentLayout::Compute(p, &l).ok());
    bytes = l.total_bytes;
    mem.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
    std::memset(mem.get(), 0, bytes);
    EXPECT_TRUE(CommSegment::Initialize(mem.get(), bytes, p, &seg).ok());
  }
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> mem;
  uint64_t bytes = 0;
  CommSegment seg;
};

SegmentParams Params(uint32_t world, uint32_t depth = 8, uint64_t max_bytes = 1 << 16) {
  SegmentParams p;
  p.world_size = world;
  p.ring_depth = depth;
  p.max_message_bytes = max_bytes;
  p.op_timeout_ns = 2'000'000'000;
  return p;
}

OpDescriptor AllReduce(uint64_t count, DataType dt = DataType::kFloat32, ReduceOp op = ReduceOp::kSum) {
  OpDescriptor d{};
  d.kind = CollectiveKind::kAllReduce;
  d.dtype = dt;
  d.reduce_op = op;
  d.count = count;
  d.algorithm = ChooseAlgorithm(d.kind, count * DataTypeSize(dt), 256 * 1024);
  d.send_buffer_id = 1;
  d.recv_buffer_id = 2;
  return d;
}

TEST(SegmentLayoutTest, RegionsAreDisjointAlignedAndInOrder) {
  SegmentLayout l;
  ASSERT_TRUE(SegmentLayout::Compute(Params(8, 64, 1 << 20), &l).ok());
  EXPECT_GE(l.rank_control_offset, sizeof(CommHeader));
  EXPECT_GE(l.ring_offset, l.rank_control_offset + 8 * sizeof(RankControl));
  EXPECT_GE(l.status_offset, l.ring_offset + 8 * 64 * sizeof(RingSlot));
  EXPECT_GE(l.in_slot_offset, l.status_offset + 8 * kStatusHistory * sizeof(StatusRecord));
  EXPECT_EQ(l.shard_slot_offset, l.in_slot_offset + 8 * l.in_slot_bytes);
  EXPECT_EQ(l.total_bytes, l.shard_slot_offset + 8 * l.shard_slot_bytes);
  for (uint64_t off : {l.rank_control_offset, l.ring_offset, l.status_offset, l.in_slot_offset, l.shard_slot_offset}) {
    EXPECT_EQ(off % 4096, 0u);
  }
  EXPECT_GE(l.in_slot_bytes, 1u << 20);
  // A shard of ceil(max / n) elements plus one straddling element fits.
  EXPECT_GE(l.shard_slot_bytes, (1u << 20) / 8 + 8);
}

TEST(SegmentLayoutTest, SlotPositionsDependOnlyOnConfiguration) {
  // Rule 3: the same communicator configuration gives the same slots, and a
  // slot's address never depends on the message in it (no size parameter).
  OwnedSegment a(Params(4, 16, 1 << 16));
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(a.seg.in_slot(r) - a.seg.in_slot(0), static_cast<ptrdiff_t>(r * a.seg.layout().in_slot_bytes));
    EXPECT_EQ(a.seg.shard_slot(r) - a.seg.shard_slot(0), static_cast<ptrdiff_t>(r * a.seg.layout().shard_slot_bytes));
  }
  // Every control word of every rank and phase on its own cache line.
  for (uint32_t r = 0; r < 4; ++r) {
    for (uint32_t p = 0; p < kNumPhases; ++p) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(&a.seg.control(r).phase_flag[p].value) % kCacheLine, 0u);
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(&a.seg.control(r).next_index.value) % kCacheLine, 0u);
  }
}

TEST(SegmentLayoutTest, RejectsBadParameters) {
  SegmentLayout l;
  EXPECT_EQ(SegmentLayout::Compute(Params(0), &l).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SegmentLayout::Compute(Params(kMaxRanks + 1), &l).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SegmentLayout::Compute(Params(2, 6), &l).code(), StatusCode::kInvalidArgument);  // not a power of 2
  EXPECT_EQ(SegmentLayout::Compute(Params(2, 8, 12), &l).code(), StatusCode::kInvalidArgument);
}

TEST(SegmentLayoutTest, AttachChecksHeader) {
  OwnedSegment a(Params(2));
  CommSegment b;
  ASSERT_TRUE(CommSegment::Attach(a.mem.get(), a.bytes, &b).ok());
  EXPECT_EQ(b.world_size(), 2u);
  EXPECT_EQ(CommSegment::Attach(a.mem.get(), a.bytes - 4096, &b).code(), StatusCode::kFailedPrecondition);
  a.seg.header().magic = 0;
  EXPECT_EQ(CommSegment::Attach(a.mem.get(), a.bytes, &b).code(), StatusCode::kFailedPrecondition);
}

TEST(OpRingTest, IndicesAreMonotonicPerRankAndStatusIsKept) {
  OwnedSegment s(Params(2, 4));
  WaitContext ctx{&s.seg, nullptr, NowNs() + 1'000'000'000};
  for (uint64_t i = 0; i < 10; ++i) {
    uint64_t index = 99;
    ASSERT_TRUE(PostOp(s.seg, 1, AllReduce(16), ctx, &index).ok());
    EXPECT_EQ(index, i);
    EXPECT_EQ(s.seg.slot(1, i).ready_seq.load(), i + 1);
    EXPECT_FALSE(IsOpDone(s.seg, 1, i));
    CompleteOp(s.seg, 1, i, i % 3 == 0 ? Status::InvalidArgument("bad op " + std::to_string(i)) : Status::Ok());
    EXPECT_TRUE(IsOpDone(s.seg, 1, i));
  }
  EXPECT_EQ(s.seg.control(0).next_index.value.load(), 0u);  // other ranks untouched
  // Recent statuses, with their text while the slot still holds the op.
  Status st = CompletedOpStatus(s.seg, 1, 9);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "bad op 9");
  EXPECT_TRUE(CompletedOpStatus(s.seg, 1, 8).ok());
  // Older than the ring: code kept, text generic.
  EXPECT_EQ(CompletedOpStatus(s.seg, 1, 3).code(), StatusCode::kInvalidArgument);
}

TEST(OpRingTest, StatusOlderThanHistoryIsReportedAsGone) {
  OwnedSegment s(Params(1, 4));
  WaitContext ctx{&s.seg, nullptr, NowNs() + 1'000'000'000};
  for (uint64_t i = 0; i < kStatusHistory + 2; ++i) {
    uint64_t index;
    ASSERT_TRUE(PostOp(s.seg, 0, AllReduce(1), ctx, &index).ok());
    CompleteOp(s.seg, 0, index, Status::Ok());
  }
  EXPECT_EQ(CompletedOpStatus(s.seg, 0, 0).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CompletedOpStatus(s.seg, 0, kStatusHistory + 1).ok());
}

TEST(OpRingTest, FullRingWaitsForCompletion) {
  OwnedSegment s(Params(1, 2));
  WaitContext ctx{&s.seg, nullptr, NowNs() + 5'000'000'000};
  uint64_t index;
  ASSERT_TRUE(PostOp(s.seg, 0, AllReduce(1), ctx, &index).ok());
  ASSERT_TRUE(PostOp(s.seg, 0, AllReduce(1), ctx, &index).ok());
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CompleteOp(s.seg, 0, 0, Status::Ok());
  });
  const int64_t t0 = NowNs();
  ASSERT_TRUE(PostOp(s.seg, 0, AllReduce(1), ctx, &index).ok());
  EXPECT_EQ(index, 2u);
  EXPECT_GE(NowNs() - t0, 40'000'000);  // it really waited for slot 0 to free
  completer.join();
}

TEST(OpRingTest, FullRingPastDeadlineAbortsTheCommunicator) {
  OwnedSegment s(Params(2, 2));
  WaitContext ctx{&s.seg, nullptr, NowNs() + 1'000'000'000};
  uint64_t index;
  ASSERT_TRUE(PostOp(s.seg, 0, AllReduce(1), ctx, &index).ok());
  ASSERT_TRUE(PostOp(s.seg, 0, AllReduce(1), ctx, &index).ok());
  ctx.deadline_ns = NowNs() + 30'000'000;
  Status st = PostOp(s.seg, 0, AllReduce(1), ctx, &index);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(s.seg.aborted());
  // Everyone now sees the abort, with the reason.
  Status again = PostOp(s.seg, 1, AllReduce(1), ctx, &index);
  EXPECT_EQ(again.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(again.message().find("could not post op 2"), std::string::npos) << again.message();
}

TEST(OpRingTest, WaitOpDoneHonoursDeadline) {
  OwnedSegment s(Params(1));
  WaitContext ctx{&s.seg, nullptr, NowNs() + 1'000'000'000};
  uint64_t index;
  ASSERT_TRUE(PostOp(s.seg, 0, AllReduce(1), ctx, &index).ok());
  WaitContext short_ctx{nullptr, nullptr, NowNs() + 20'000'000};
  EXPECT_EQ(WaitOpDone(s.seg, 0, index, short_ctx).code(), StatusCode::kDeadlineExceeded);
  CompleteOp(s.seg, 0, index, Status::Ok());
  EXPECT_TRUE(WaitOpDone(s.seg, 0, index, short_ctx).ok());
}

TEST(WaitTest, WakesAcrossThreadsAndSeesAbort) {
  OwnedSegment s(Params(2));
  std::atomic<uint64_t>& word = s.seg.control(0).completed.value;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    PublishWord(word, 5);
  });
  WaitContext ctx{&s.seg, nullptr, NowNs() + 2'000'000'000};
  EXPECT_TRUE(WaitAtLeast(word, 5, ctx, "test").ok());
  writer.join();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.seg.Abort(StatusCode::kAborted, "peer died");
  });
  Status st = WaitAtLeast(word, 6, ctx, "test");
  aborter.join();
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_NE(st.message().find("peer died"), std::string::npos);
  s.seg.Abort(StatusCode::kInternal, "second reason");  // first abort wins
  EXPECT_NE(s.seg.AbortStatus().message().find("peer died"), std::string::npos);
}

// Pins the calling thread to `cpu`; false where the process may not run there.
bool PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// The first CPU this process may run on.
int FirstAllowedCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) return c;
  }
  return -1;
}

TEST(WaitTest, PublishCpuNamesTheCallersCpu) {
  const int cpu = FirstAllowedCpu();
  ASSERT_GE(cpu, 0);
  std::atomic<uint64_t> word{12345};  // poison: no CPU's word
  std::thread t([&] {
    ASSERT_TRUE(PinTo(cpu));
    EXPECT_EQ(CurrentCpuWord(), static_cast<uint64_t>(cpu) + 1);
    PublishCpu(word);
  });
  t.join();
  EXPECT_EQ(word.load(), static_cast<uint64_t>(cpu) + 1);
}

// A waiter told that its writer shares its CPU skips the spin; it must still
// see the write, and still time out where none comes. Both threads on one
// CPU: the writer runs only when the waiter gives the core up.
TEST(WaitTest, WaiterOnItsWritersCpuSeesTheWriteAndTimesOut) {
  const int cpu = FirstAllowedCpu();
  ASSERT_GE(cpu, 0);
  OwnedSegment s(Params(2));
  std::atomic<uint64_t>& word = s.seg.control(0).completed.value;
  std::atomic<uint64_t>& writer_cpu = s.seg.control(0).executor_cpu.value;
  writer_cpu.store(static_cast<uint64_t>(cpu) + 1);
  std::thread waiter([&] {
    ASSERT_TRUE(PinTo(cpu));
    WaitContext ctx{&s.seg, nullptr, NowNs() + 5'000'000'000};
    ctx.writer_cpus[0] = &writer_cpu;
    EXPECT_TRUE(WaitAtLeast(word, 3, ctx, "test").ok());
    WaitContext short_ctx{&s.seg, nullptr, NowNs() + 20'000'000};
    short_ctx.writer_cpus[1] = &writer_cpu;
    EXPECT_EQ(WaitAtLeast(word, 4, short_ctx, "test").code(), StatusCode::kDeadlineExceeded);
  });
  std::thread writer([&] {
    ASSERT_TRUE(PinTo(cpu));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    PublishWord(word, 3);
  });
  writer.join();
  waiter.join();
  EXPECT_EQ(word.load(), 3u);
}

TEST(MatcherTest, AgreeingDescriptorsMatch) {
  OpDescriptor a = AllReduce(100), b = AllReduce(100);
  b.send_buffer_id = 77;  // buffers are per rank: not compared
  const OpDescriptor* d[] = {&a, &b};
  EXPECT_TRUE(MatchDescriptors(3, d, 2).ok());
}

TEST(MatcherTest, EachDisagreementIsNamed) {
  OpDescriptor base = AllReduce(100);
  struct Case {
    const char* field;
    void (*mutate)(OpDescriptor&);
  } cases[] = {
      {"count", [](OpDescriptor& d) { d.count = 101; }},
      {"dtype", [](OpDescriptor& d) { d.dtype = DataType::kInt32; }},
      {"op", [](OpDescriptor& d) { d.reduce_op = ReduceOp::kMax; }},
      {"kind", [](OpDescriptor& d) { d.kind = CollectiveKind::kAllGather; }},
      {"plan", [](OpDescriptor& d) { d.algorithm = Algorithm::kTwoShot; }},
  };
  for (const auto& c : cases) {
    OpDescriptor other = base;
    c.mutate(other);
    const OpDescriptor* d[] = {&base, &base, &other};
    Status st = MatchDescriptors(7, d, 3);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find("op 7 mismatch"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
  }
}

TEST(MatcherTest, ValidationRejectsBadDescriptors) {
  OpDescriptor d = AllReduce(10);
  EXPECT_TRUE(ValidateDescriptor(d, 1 << 16).ok());
  OpDescriptor bad = d;
  bad.count = 0;
  EXPECT_EQ(ValidateDescriptor(bad, 1 << 16).code(), StatusCode::kInvalidArgument);
  bad = d;
  bad.count = (1 << 16) / 4 + 1;
  EXPECT_NE(ValidateDescriptor(bad, 1 << 16).message().find("exceeds"), std::string::npos);
  bad = d;
  bad.dtype = static_cast<DataType>(42);
  EXPECT_NE(ValidateDescriptor(bad, 1 << 16).message().find("unknown data type"), std::string::npos);
  bad = AllReduce(10, DataType::kInt32, ReduceOp::kAvg);
  EXPECT_NE(ValidateDescriptor(bad, 1 << 16).message().find("not allowed"), std::string::npos);
  bad = d;
  bad.kind = static_cast<CollectiveKind>(9);
  EXPECT_EQ(ValidateDescriptor(bad, 1 << 16).code(), StatusCode::kInvalidArgument);
  bad = d;
  bad.kind = CollectiveKind::kAllGather;  // with a reduction
  EXPECT_EQ(ValidateDescriptor(bad, 1 << 16).code(), StatusCode::kInvalidArgument);
}

TEST(MatcherTest, ThresholdPicksThePlan) {
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 1024, 1024), Algorithm::kOneShot);
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 1025, 1024), Algorithm::kTwoShot);
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllGather, 1 << 30, 1024), Algorithm::kGather);
}

// The measured cells: a 132-SM card, one block a rank per SM
// (device::kResidentBlocksPerSm), so 16 / 33 / 66 blocks at 8 / 4 / 2 ranks.
TEST(MatcherTest, ClaimsWhereEachBlockMovesEnough) {
  constexpr uint64_t kMiB = 1 << 20;
  EXPECT_TRUE(TwoShotClaimsPay(16 * kMiB, 132 / 8));   // 2 MiB of traffic a block: faster
  EXPECT_FALSE(TwoShotClaimsPay(16 * kMiB, 132 / 4));  // 1 MiB: slower
  EXPECT_FALSE(TwoShotClaimsPay(16 * kMiB, 132 / 2));  // 0.5 MiB: slower
  EXPECT_TRUE(TwoShotClaimsPay(64 * kMiB, 132 / 2));   // 2 MiB: faster
  EXPECT_TRUE(TwoShotClaimsPay(64 * kMiB, 132 / 4));
  EXPECT_TRUE(TwoShotClaimsPay(kClaimMinBlockTraffic / 2 * 7, 7));
  EXPECT_FALSE(TwoShotClaimsPay(kClaimMinBlockTraffic / 2 * 7 - 1, 7));
  EXPECT_FALSE(TwoShotClaimsPay(uint64_t{1} << 40, 0));
}

}  // namespace
}  // namespace collectived::ring

namespace collectived::ring {
namespace {

// Members can write the whole segment (docs/security.md): what this process
// indexes and times with comes from its own copy, and codes and texts read
// from shared memory are mapped and bounded.
TEST(SharedMemoryTrustTest, AScribbledHeaderMovesNothingThisProcessUses) {
  OwnedSegment o(Params(4, 8));
  CommSegment attached;
  ASSERT_TRUE(CommSegment::Attach(o.mem.get(), o.bytes, &attached).ok());
  RingSlot* slot_before = &attached.slot(3, 5);
  CommHeader& h = o.seg.header();
  h.ring_depth = 0;  // a division or mask by it would fault
  h.world_size = 1u << 30;
  h.op_timeout_ns = 0;
  h.max_message_bytes = ~0ull;
  h.unsafe_flags = ~0u;
  for (const CommSegment* s : {&o.seg, &attached}) {
    EXPECT_EQ(s->ring_depth(), 8u);
    EXPECT_EQ(s->world_size(), 4u);
    EXPECT_EQ(s->params().op_timeout_ns, 2'000'000'000u);
    EXPECT_EQ(s->params().max_message_bytes, uint64_t{1} << 16);
    EXPECT_EQ(s->params().unsafe_flags, 0u);
  }
  EXPECT_EQ(&attached.slot(3, 5), slot_before);
  EXPECT_EQ(&attached.slot(3, 13), slot_before) << "index 13 wraps onto slot 5 of an 8-deep ring";
}

TEST(SharedMemoryTrustTest, AbortCodesAndReasonsAreMappedAndBounded) {
  OwnedSegment o(Params(2));
  CommHeader& h = o.seg.header();
  std::memset(h.abort_reason, 'x', sizeof(h.abort_reason));  // no terminator
  h.abort_reason[3] = '\n';
  h.abort_code.store(999);
  Status s = o.seg.AbortStatus();
  EXPECT_EQ(s.code(), StatusCode::kUnknown);
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "a control character would forge a log line";
  EXPECT_LE(s.message().size(), std::string("communicator aborted: ").size() + sizeof(h.abort_reason));
  h.abort_code.store(static_cast<uint64_t>(StatusCode::kDeadlineExceeded));
  EXPECT_EQ(o.seg.AbortStatus().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(SharedStatusCode(0), StatusCode::kUnknown);
  EXPECT_EQ(SharedStatusCode(uint64_t{1} << 40 | 10), StatusCode::kUnknown);
  EXPECT_EQ(PhaseFlagStatus(EncodePhaseFlag(3, StatusCode::kOk) | 0xee), StatusCode::kUnknown);
}

TEST(SharedMemoryTrustTest, AScribbledOpStatusIsMappedAndItsTextBounded) {
  OwnedSegment o(Params(2));
  WaitContext ctx{&o.seg, nullptr, NowNs() + 1'000'000'000};
  uint64_t index = 0;
  ASSERT_TRUE(PostOp(o.seg, 0, AllReduce(4), ctx, &index).ok());
  CompleteOp(o.seg, 0, index, Status::Internal("x"));
  RingSlot& slot = o.seg.slot(0, index);
  std::memset(slot.status_message, '\r', sizeof(slot.status_message));  // no terminator, control characters
  o.seg.status_record(0, index).code.store(77);
  Status s = CompletedOpStatus(o.seg, 0, index);
  EXPECT_EQ(s.code(), StatusCode::kUnknown);
  EXPECT_EQ(s.message().size(), kMessageBytes);
  EXPECT_EQ(s.message().find('\r'), std::string::npos);
}

}  // namespace
}  // namespace collectived::ring

// Unit tests of a GPU op's verdict and of the waits that need no GPU: the
// GPU runtime's headers are included (for the device's error codes), but no
// GPU is used, so these run wherever the toolkit builds.
#include "client/src/gpu_op.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "client/src/gpu_communicator.h"
#include "kernels/device/device_collectives.h"

namespace collectived {
namespace {

// A communicator segment in plain host memory, for the abort reason.
struct HostSegment {
  HostSegment() {
    ring::SegmentParams p;
    p.world_size = 2;
    p.max_message_bytes = 1 << 16;
    ring::SegmentLayout l;
    EXPECT_TRUE(ring::SegmentLayout::Compute(p, &l).ok());
    mem.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, (l.total_bytes + 4095) / 4096 * 4096)));
    std::memset(mem.get(), 0, l.total_bytes);
    EXPECT_TRUE(ring::CommSegment::Initialize(mem.get(), l.total_bytes, p, &seg).ok());
  }
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> mem;
  ring::CommSegment seg;
};

TEST(GpuOpVerdictTest, EachDeviceCodeBecomesItsStatus) {
  HostSegment h;
  const uint64_t timeout_ns = 1500ull * 1000 * 1000;
  EXPECT_TRUE(VerdictStatus(ring::kDeviceOk, h.seg, timeout_ns).ok());

  Status s = VerdictStatus(ring::kDeviceDeadline, h.seg, timeout_ns);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("op timeout (1500 ms)"), std::string::npos) << s.message();

  s = VerdictStatus(ring::kDeviceMismatch, h.seg, timeout_ns);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("ranks posted different ops at the same index"), std::string::npos) << s.message();

  s = VerdictStatus(kSlotUnset, h.seg, timeout_ns);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find("did not record a verdict"), std::string::npos) << s.message();

  s = VerdictStatus(99, h.seg, timeout_ns);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find("unknown device error 99"), std::string::npos) << s.message();
}

TEST(GpuOpVerdictTest, AnAbortedOpGivesTheSegmentsReasonWhenThereIsOne) {
  HostSegment h;
  Status s = VerdictStatus(ring::kDeviceAborted, h.seg, 0);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("an op failed on another rank"), std::string::npos) << s.message();

  h.seg.Abort(StatusCode::kUnavailable, "rank 1 left");
  s = VerdictStatus(ring::kDeviceAborted, h.seg, 0);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(s.message(), "communicator aborted: rank 1 left");
}

// What the complete kernel wrote into the op's host word (its low half, as
// the kernel stores an int32 there) is its verdict.
TEST(GpuOpVerdictTest, AnOpsVerdictIsReadFromItsHostWord) {
  HostSegment h;
  uint64_t word = kWordUnset;
  GpuOpState op;
  op.seg = h.seg;
  op.status_slot = &word;
  EXPECT_EQ(op.Code(), kSlotUnset);
  EXPECT_EQ(op.Verdict().code(), StatusCode::kInternal);  // nothing recorded is not a success
  const int32_t mismatch = ring::kDeviceMismatch, ok = ring::kDeviceOk;
  std::memcpy(&word, &mismatch, sizeof(mismatch));
  EXPECT_EQ(op.Verdict().code(), StatusCode::kInvalidArgument);
  std::memcpy(&word, &ok, sizeof(ok));
  EXPECT_NE(word, kWordUnset);  // what the pool takes for written
  EXPECT_TRUE(op.Verdict().ok());
  op.status_slot = nullptr;  // not from a StatusSlots pool: nothing to give back
}

// An eager single-launch op's word holds its generation; its verdict is the
// rank's failure record: failed exactly when an op of its generation or an
// earlier one failed. Each case differs from an OK one by one word.
TEST(GpuOpVerdictTest, AGenerationWordIsJudgedByTheRanksFirstFailedOp) {
  EXPECT_EQ(GenVerdict(kWordUnset, 0, ring::kDeviceOk), kSlotUnset);
  EXPECT_EQ(GenVerdict(kWordUnset, 3, ring::kDeviceDeadline), kSlotUnset);
  EXPECT_EQ(GenVerdict(7, 0, ring::kDeviceOk), ring::kDeviceOk);          // nothing failed
  EXPECT_EQ(GenVerdict(7, 8, ring::kDeviceDeadline), ring::kDeviceOk);    // a later op failed
  EXPECT_EQ(GenVerdict(7, 7, ring::kDeviceDeadline), ring::kDeviceDeadline);  // this one
  EXPECT_EQ(GenVerdict(7, 2, ring::kDeviceMismatch), ring::kDeviceMismatch);  // an earlier one
  EXPECT_EQ(GenVerdict(uint64_t{1} << 40, (uint64_t{1} << 40) + 1, ring::kDeviceDeadline), ring::kDeviceOk);
  EXPECT_EQ(GenVerdict((uint64_t{1} << 40) + 1, uint64_t{1} << 40, ring::kDeviceDeadline), ring::kDeviceDeadline);
  // A failure without its code (never stored so) still fails the op.
  EXPECT_EQ(GenVerdict(7, 7, ring::kDeviceOk), ring::kDeviceAborted);

  HostSegment h;
  uint64_t word = 5, failed = 0;
  int32_t code = ring::kDeviceOk;
  GpuOpState op;
  op.seg = h.seg;
  op.status_slot = &word;
  op.failed_gen = &failed;
  op.rank_error = &code;
  EXPECT_TRUE(op.Verdict().ok());
  code = ring::kDeviceDeadline;
  failed = 6;
  EXPECT_TRUE(op.Verdict().ok());
  failed = 5;
  EXPECT_EQ(op.Verdict().code(), StatusCode::kDeadlineExceeded);
  word = kWordUnset;
  EXPECT_EQ(op.Verdict().code(), StatusCode::kInternal);
  op.status_slot = nullptr;
}

// A captured op has no event of its own to wait for on the host (a graph
// outlives handles): the waits say how to wait instead, without the GPU.
TEST(GpuOpVerdictTest, HostWaitsOnACapturedOpAreRefusedWithTheWayToWait) {
  GpuOpState op;
  op.captured = true;
  EXPECT_TRUE(op.Verdict().ok());
  Status s = GpuOpWait(op, 1000);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("Handle::WaitOn(stream)"), std::string::npos) << s.message();
  Status tested;
  EXPECT_TRUE(GpuOpTest(op, &tested));
  EXPECT_EQ(tested.code(), StatusCode::kFailedPrecondition) << tested.ToString();
}

}  // namespace
}  // namespace collectived

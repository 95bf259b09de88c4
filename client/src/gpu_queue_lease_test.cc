// Unit tests of the hardware-queue policy and lease (host only: no GPU headers).
#include "client/src/gpu_queue_lease.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace collectived {
namespace {

TEST(GpuQueueLeaseTest, QueuesFollowTheVariableElseCudasDefault) {
  EXPECT_EQ(GpuHardwareQueues(nullptr, false), 8u);
  EXPECT_EQ(GpuHardwareQueues(nullptr, true), 2u);  // an MPS client
  EXPECT_EQ(GpuHardwareQueues("", false), 8u);
  EXPECT_EQ(GpuHardwareQueues("1", false), 1u);
  EXPECT_EQ(GpuHardwareQueues("16", true), 16u);  // the variable wins under MPS too
  EXPECT_EQ(GpuHardwareQueues("32", false), 32u);
  EXPECT_EQ(GpuHardwareQueues("33", false), 32u);  // CUDA's ceiling
}

TEST(GpuQueueLeaseTest, GarbageInTheVariableMeansTheDefault) {
  for (const char* env : {"0", "-3", "4x", "x4", "abc", "4 "}) {
    EXPECT_EQ(GpuHardwareQueues(env, false), 8u) << "'" << env << "'";
    EXPECT_EQ(GpuHardwareQueues(env, true), 2u) << "'" << env << "'";
  }
}

// The lease table is per process: each test uses keys of its own.

TEST(GpuQueueLeaseTest, RanksUpToTheQueueCountAreLeasedAndTheNextIsRefusedNamingTheVariable) {
  std::shared_ptr<void> a, b, c;
  ASSERT_TRUE(LeaseRankQueue(0, "count", "2", false, &a).ok());
  ASSERT_TRUE(LeaseRankQueue(0, "count", "2", false, &b).ok());
  Status s = LeaseRankQueue(0, "count", "2", false, &c);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("3 ranks of communicator 'count' on device 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("2 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS=2)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Set CUDA_DEVICE_MAX_CONNECTIONS to at least 3"), std::string::npos) << s.message();
  EXPECT_EQ(c, nullptr);
}

TEST(GpuQueueLeaseTest, ARefusalUnderTheDefaultSaysWhichDefault) {
  std::vector<std::shared_ptr<void>> held(2);
  for (auto& l : held) ASSERT_TRUE(LeaseRankQueue(0, "mps", nullptr, true, &l).ok());
  std::shared_ptr<void> more;
  Status s = LeaseRankQueue(0, "mps", nullptr, true, &more);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("2 hardware queues (an MPS client's default)"), std::string::npos) << s.message();

  held.assign(8, nullptr);
  for (auto& l : held) ASSERT_TRUE(LeaseRankQueue(0, "plain", "", false, &l).ok());
  s = LeaseRankQueue(0, "plain", "", false, &more);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("9 ranks of communicator 'plain'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("8 hardware queues (CUDA's default)"), std::string::npos) << s.message();
}

TEST(GpuQueueLeaseTest, AReleasedLeaseMakesRoomForAnotherRank) {
  std::shared_ptr<void> a, b;
  ASSERT_TRUE(LeaseRankQueue(0, "release", "1", false, &a).ok());
  EXPECT_EQ(LeaseRankQueue(0, "release", "1", false, &b).code(), StatusCode::kFailedPrecondition);
  std::shared_ptr<void> copy = a;  // the reservation ends with the last reference
  a.reset();
  EXPECT_EQ(LeaseRankQueue(0, "release", "1", false, &b).code(), StatusCode::kFailedPrecondition);
  copy.reset();
  EXPECT_TRUE(LeaseRankQueue(0, "release", "1", false, &b).ok());
}

TEST(GpuQueueLeaseTest, DevicesAndCommunicatorsAreCountedApart) {
  std::shared_ptr<void> l[4];
  ASSERT_TRUE(LeaseRankQueue(0, "apart-a", "1", false, &l[0]).ok());
  EXPECT_TRUE(LeaseRankQueue(1, "apart-a", "1", false, &l[1]).ok());  // another device
  EXPECT_TRUE(LeaseRankQueue(0, "apart-b", "1", false, &l[2]).ok());  // another communicator
  Status s = LeaseRankQueue(1, "apart-a", "1", false, &l[3]);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("on device 1"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace collectived

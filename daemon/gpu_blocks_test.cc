#include "daemon/gpu_blocks.h"

#include <gtest/gtest.h>

namespace collectived::daemon {
namespace {

GpuDeviceLoad Device(uint32_t sms, uint32_t ranks, uint32_t live_ranks = 0, uint32_t live_most = 0,
                     uint32_t live_blocks = 0) {
  GpuDeviceLoad d;
  d.name = "GPU-test";
  d.sms = sms;
  d.ranks = ranks;
  d.live_ranks = live_ranks;
  d.live_most = live_most;
  d.live_blocks = live_blocks;
  return d;
}

TEST(GpuBlocksTest, AloneACommunicatorSharesTheSmsAmongItsRanks) {
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 2)}, 1, 0), 66u);
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 4)}, 1, 0), 33u);
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 8)}, 1, 0), 16u);
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 1)}, 1, 0), 128u);  // ring::kMaxBlocks
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 2)}, 2, 0), 128u);
}

// The NCCL split test: a 4-rank parent, then its two 2-rank halves, every
// rank a process of its own on one GPU.
TEST(GpuBlocksTest, SplitHalvesLeaveRoomForTheLiveCommunicatorsOnTheirGpu) {
  const uint32_t parent = GpuBlocksPerRank({Device(132, 4)}, 1, 0);
  EXPECT_EQ(parent, 33u);
  const uint32_t first = GpuBlocksPerRank({Device(132, 2, 4, 4)}, 1, 0);
  EXPECT_EQ(first, 22u);  // 132 / (2 + 4)
  const uint32_t second = GpuBlocksPerRank({Device(132, 2, 6, 4)}, 1, 0);
  EXPECT_EQ(second, 16u);  // 132 / (2 + 6)
  // The two halves busy at once fit the SMs with room to spare.
  EXPECT_LE(2 * first + 2 * second, 132u);
}

TEST(GpuBlocksTest, OneRankPerGpuIgnoresOtherCommunicators) {
  // A process with a GPU of its own in three communicators: their kernels
  // are that process's, and each keeps the whole card.
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 1, 2, 1)}, 1, 0), 128u);
  // But a live communicator with several ranks there means processes share it.
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 1, 2, 2)}, 1, 0), 44u);
}

TEST(GpuBlocksTest, TheLeastOverDevicesTheCapAndAtLeastOne) {
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 2), Device(108, 4)}, 1, 0), 27u);
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 2), Device(108, 4)}, 1, 5), 5u);
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 2)}, 1, 100), 66u);  // a cap above changes nothing
  EXPECT_EQ(GpuBlocksPerRank({Device(132, 2, 300, 16)}, 1, 0), 1u);
  EXPECT_EQ(GpuBlocksPerRank({}, 1, 0), 128u);
}

TEST(GpuBlocksTest, CrowdingNamesTheDeviceWhereLiveCommunicatorsNeedMoreThanItHas) {
  // Alone, or beside a communicator that leaves room: none.
  EXPECT_EQ(GpuCrowding({Device(132, 4)}, 33, 1), "");
  EXPECT_EQ(GpuCrowding({Device(132, 2, 2, 2, 2 * 33)}, 33, 1), "");  // exactly full
  // A second pair beside a first sized alone: 2 x 33 + 2 x 66 = 198.
  EXPECT_NE(GpuCrowding({Device(132, 2, 2, 2, 2 * 66)}, 33, 1).find("198 blocks"), std::string::npos);
  // A half beside the parent sized alone: 2 x 22 + 4 x 33 = 176 > 132.
  const std::string c = GpuCrowding({Device(132, 2, 4, 4, 4 * 33)}, 22, 1);
  EXPECT_NE(c.find("GPU-test"), std::string::npos) << c;
  EXPECT_NE(c.find("176 blocks for 132 SM slots"), std::string::npos) << c;
  // One rank per GPU: one process's kernels, never crowded by this rule.
  EXPECT_EQ(GpuCrowding({Device(132, 1, 2, 1, 2 * 128)}, 128, 1), "");
}

// What the daemon hands the rule: the new communicator's ranks per device
// and, on those devices only, every live one's ranks, most ranks and blocks.
TEST(GpuBlocksTest, LoadCountsTheLiveCommunicatorsOnTheNewOnesDevices) {
  const std::vector<std::string> split_half = {"A", "A"};
  const std::vector<LiveGpuCommunicator> live = {
      {{"A", "A", "A", "A"}, 33},  // the parent
      {{"A", "B"}, 128},           // one rank on A, one on B
      {{"C"}, 128},                // elsewhere: not counted
  };
  const auto load = GpuLoadOf(split_half, live);
  ASSERT_EQ(load.size(), 1u);
  const GpuDeviceLoad& a = load.at("A");
  EXPECT_EQ(a.name, "A");
  EXPECT_EQ(a.ranks, 2u);
  EXPECT_EQ(a.live_ranks, 5u);
  EXPECT_EQ(a.live_most, 4u);
  EXPECT_EQ(a.live_blocks, 4u * 33 + 128);
  EXPECT_EQ(a.sms, 0u);  // the caller's to query
  EXPECT_EQ(GpuRanksBeside(load), 5u);
}

TEST(GpuBlocksTest, RanksBesideOnlyWhereTheRuleCountedThem) {
  // One rank per GPU beside one-rank communicators: they did not shape the blocks.
  const auto alone = GpuLoadOf({"A", "B"}, {{{"A", "B"}, 128}});
  EXPECT_EQ(alone.at("A").live_ranks, 1u);
  EXPECT_EQ(GpuRanksBeside(alone), 0u);
  EXPECT_EQ(GpuRanksBeside(GpuLoadOf({"A"}, {})), 0u);
  // Beside a live communicator with two ranks on A: counted on A only.
  EXPECT_EQ(GpuRanksBeside(GpuLoadOf({"A", "B"}, {{{"A", "A"}, 66}, {{"B"}, 128}})), 2u);
}

}  // namespace
}  // namespace collectived::daemon

#include "client/src/gpu_placement.h"

#include <gtest/gtest.h>

namespace collectived {
namespace {

std::vector<GpuWindowRef> On(const std::vector<std::string>& uuids) {
  std::vector<GpuWindowRef> ranks;
  for (const std::string& u : uuids) ranks.push_back({ranks.size() + 1, 4096, u, ""});
  return ranks;
}

TEST(GpuPlacementTest, RanksShareADeviceOnlyWhereEveryWindowNamesIt) {
  EXPECT_TRUE(RanksShareOneDevice(On({"GPU-a"})));
  EXPECT_TRUE(RanksShareOneDevice(On({"GPU-a", "GPU-a", "GPU-a", "GPU-a"})));
  EXPECT_FALSE(RanksShareOneDevice(On({"GPU-a", "GPU-b"})));
  EXPECT_FALSE(RanksShareOneDevice(On({"GPU-a", "GPU-a", "GPU-a", "GPU-b"})));  // the last one differs
  EXPECT_FALSE(RanksShareOneDevice(On({"GPU-b", "GPU-a", "GPU-a"})));           // the first one differs
  // No device named (a window without its device): not known to be shared.
  EXPECT_FALSE(RanksShareOneDevice(On({"", ""})));
  EXPECT_FALSE(RanksShareOneDevice({}));
}

// The end flag's fence goes to GPU scope only on one GPU, and the daemon's
// --gpu-system-end-fence (ring::kGpuSystemEndFence) keeps system scope
// there; the start flag's option leaves the end flag's scope alone.
TEST(GpuPlacementTest, EndFenceAtGpuScopeOnOneDeviceUnlessTheDaemonKeepsSystemScope) {
  const auto one = On({"GPU-a", "GPU-a"}), two = On({"GPU-a", "GPU-b"});
  EXPECT_TRUE(EndFenceAtGpuScope(one, 0));
  EXPECT_TRUE(EndFenceAtGpuScope(one, ring::kGpuStartFlagRelease));
  EXPECT_FALSE(EndFenceAtGpuScope(one, ring::kGpuSystemEndFence));
  EXPECT_FALSE(EndFenceAtGpuScope(one, ring::kGpuSystemEndFence | ring::kGpuStartFlagRelease));
  EXPECT_FALSE(EndFenceAtGpuScope(two, 0));
  EXPECT_FALSE(EndFenceAtGpuScope(two, ring::kGpuSystemEndFence));
}

}  // namespace
}  // namespace collectived

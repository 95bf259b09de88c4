#include "executor/cpu_move.h"

#include <sched.h>

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace collectived::host {
namespace {

// Runs the test body with the thread's affinity restored afterwards.
class CpuMoveTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(sched_getaffinity(0, sizeof(saved_), &saved_), 0); }
  void TearDown() override { sched_setaffinity(0, sizeof(saved_), &saved_); }
  cpu_set_t saved_;
};

TEST_F(CpuMoveTest, MovesOffANamedCpuAndKeepsItsMask) {
  if (CPU_COUNT(&saved_) < 2) GTEST_SKIP() << "one CPU allowed";
  CpuMover mover(1'000'000'000);
  const int before = sched_getcpu();
  ASSERT_GE(before, 0);
  const uint64_t busy[] = {0, static_cast<uint64_t>(before) + 1};
  ASSERT_TRUE(mover.MoveOffBusy(busy, 2));
  EXPECT_NE(sched_getcpu(), before);  // the scheduler may move it back later; not within these lines
  cpu_set_t now;
  ASSERT_EQ(sched_getaffinity(0, sizeof(now), &now), 0);
  EXPECT_TRUE(CPU_EQUAL(&now, &saved_));
  // Within the interval: no second move, even on a named CPU.
  const uint64_t here[] = {static_cast<uint64_t>(sched_getcpu()) + 1};
  EXPECT_FALSE(mover.MoveOffBusy(here, 1));
}

TEST_F(CpuMoveTest, StaysOnACpuNobodyNames) {
  CpuMover mover(0);
  const int cpu = sched_getcpu();
  ASSERT_GE(cpu, 0);
  const uint64_t busy[] = {0, static_cast<uint64_t>(cpu) + 2};  // cpu + 1: another CPU
  EXPECT_FALSE(mover.MoveOffBusy(busy, 2));
  EXPECT_FALSE(mover.MoveOffBusy(nullptr, 0));
}

TEST_F(CpuMoveTest, StaysWhereEveryAllowedCpuIsNamed) {
  // Confine the thread to one CPU, named busy: nowhere to go.
  const int cpu = sched_getcpu();
  ASSERT_GE(cpu, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  CpuMover mover(0);
  const uint64_t busy[] = {static_cast<uint64_t>(cpu) + 1};
  EXPECT_FALSE(mover.MoveOffBusy(busy, 1));
  EXPECT_EQ(sched_getcpu(), cpu);
  cpu_set_t now;
  ASSERT_EQ(sched_getaffinity(0, sizeof(now), &now), 0);
  EXPECT_TRUE(CPU_EQUAL(&now, &one));
}

}  // namespace
}  // namespace collectived::host

#include "daemon/copy_engine_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace collectived::daemon {
namespace {

// Every element of the op is in exactly one owner's part of one piece, every
// part fits its slot, and every slot fits the scratch.
TEST(CopyEnginePlanTest, PartsCoverTheOpOnceAndFitTheScratch) {
  for (uint32_t world : {1u, 2u, 3u, 4u, 7u, 8u, 16u}) {
    for (uint64_t es : {2u, 4u, 8u}) {
      for (uint64_t scratch : {uint64_t{2048}, uint64_t{65536}, uint64_t{1} << 20}) {
        for (uint64_t count : {uint64_t{1}, uint64_t{world} - 1 + (world == 1), uint64_t{world}, uint64_t{world} + 1,
                               uint64_t{100003}, uint64_t{1} << 18}) {
          CopyEnginePlan plan;
          Status s = CopyEnginePlan::Make(world, count, es, scratch, &plan);
          if (scratch / es / (world * world) == 0) {
            EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
            continue;
          }
          ASSERT_TRUE(s.ok()) << s.ToString();
          std::vector<uint8_t> seen(count, 0);
          for (uint64_t i = 0; i < plan.pieces(); ++i) {
            const uint64_t chunk = plan.chunk(i);
            ASSERT_LE(uint64_t{world} * world * chunk * es, scratch) << "world " << world << " piece " << i;
            for (uint32_t r = 0; r < world; ++r) {
              const CopyEnginePlan::Part p = plan.part(i, r);
              ASSERT_LE(p.count, chunk);
              ASSERT_LE(p.begin + p.count, count);
              ASSERT_LE(plan.slot(i, r, world - 1) + chunk, uint64_t{world} * world * chunk);
              for (uint64_t j = p.begin; j < p.begin + p.count; ++j) ++seen[j];
            }
          }
          for (uint64_t j = 0; j < count; ++j) {
            ASSERT_EQ(seen[j], 1) << "element " << j << " world " << world << " es " << es << " count " << count;
          }
        }
      }
    }
  }
}

TEST(CopyEnginePlanTest, LargeOpsRunInPiecesTheLastOneShorter) {
  CopyEnginePlan plan;
  // 4 ranks, float32, 1 MiB scratch: 16384 elements per slot, pieces of 65536.
  ASSERT_TRUE(CopyEnginePlan::Make(4, (1u << 20) - 5, 4, 1 << 20, &plan).ok());
  EXPECT_EQ(plan.pieces(), 16u);
  EXPECT_EQ(plan.chunk(0), 16384u);
  EXPECT_EQ(plan.part(0, 3).begin, 3u * 16384);
  // The last piece holds 65531 elements: three parts of 16383, the last of 16382.
  EXPECT_EQ(plan.chunk(15), 16383u);
  EXPECT_EQ(plan.part(15, 2).count, 16383u);
  EXPECT_EQ(plan.part(15, 3).count, 16382u);
  EXPECT_EQ(plan.part(15, 3).begin + plan.part(15, 3).count, (1u << 20) - 5);
  ASSERT_TRUE(CopyEnginePlan::Make(4, 0, 4, 1 << 20, &plan).ok());
  EXPECT_EQ(plan.pieces(), 0u);
}

TEST(CopyEnginePlanTest, RefusesWhatCannotBePlanned) {
  CopyEnginePlan plan;
  EXPECT_EQ(CopyEnginePlan::Make(0, 8, 4, 1 << 20, &plan).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CopyEnginePlan::Make(17, 8, 4, 1 << 20, &plan).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CopyEnginePlan::Make(4, 8, 0, 1 << 20, &plan).code(), StatusCode::kInvalidArgument);
  Status s = CopyEnginePlan::Make(16, 8, 8, 2047, &plan);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("less than one element per slot"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace collectived::daemon

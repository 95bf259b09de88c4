// Unit tests of the host backend's reductions: every dtype x op against a
// reference, integer wrap, aliasing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/host/half.h"
#include "kernels/host/reduce.h"
#include "tests/support/exact_data.h"

namespace collectived::host {
namespace {

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kInt32,   DataType::kInt64,   DataType::kUint32};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};

TEST(HalfTest, RoundTripsAndRoundsToNearestEven) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f /* 2^-14 */, 5.9604645e-08f /* 2^-24 */}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
    EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(f == 65504.0f ? 65536.0f : f)), f == 65504.0f ? 65536.0f : f);
  }
  EXPECT_EQ(FloatToHalf(65520.0f).bits, 0x7c00);  // overflows to inf
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048).bits, 0x3c00);  // tie -> even (down)
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048).bits, 0x3c02);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_EQ(FloatToBFloat16(1.0f + 1.0f / 256).bits, 0x3f80);  // tie -> even
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

// Every dtype x op against the float64/integer reference, for several rank
// counts, on exact inputs with a poisoned output.
TEST(ReduceTest, EveryTypeAndOpMatchesReference) {
  const uint64_t count = 3001;  // odd, spans several blocks
  for (DataType dt : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      if (!IsValidReduction(dt, op)) continue;
      for (uint32_t n : {1u, 2u, 3u, 8u}) {
        const size_t bytes = count * DataTypeSize(dt);
        std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(bytes));
        std::vector<const void*> ptrs;
        for (uint32_t r = 0; r < n; ++r) {
          testing::FillInput(dt, op, r, 11, in[r].data(), count);
          ptrs.push_back(in[r].data());
        }
        std::vector<uint8_t> out(bytes);
        testing::Poison(dt, out.data(), count);
        ASSERT_GT(testing::CountWrongAllReduce(dt, op, n, 11, out.data(), count), 0u) << "poison must be wrong";
        ReduceElements(dt, op, out.data(), ptrs.data(), n, 0, count);
        EXPECT_EQ(testing::CountWrongAllReduce(dt, op, n, 11, out.data(), count), 0u)
            << DataTypeName(dt) << " " << ReduceOpName(op) << " n=" << n;
      }
    }
  }
}

TEST(ReduceTest, IntegerSumWraps) {
  int32_t a[1] = {INT32_MAX}, b[1] = {1}, out[1];
  const void* in[] = {a, b};
  ReduceElements(DataType::kInt32, ReduceOp::kSum, out, in, 2, 0, 1);
  EXPECT_EQ(out[0], INT32_MIN);
}

TEST(ReduceTest, OutputMayAliasAnInput) {
  float a[3000], b[3000];
  for (int i = 0; i < 3000; ++i) a[i] = i, b[i] = 2 * i;
  const void* in[] = {a, b};
  ReduceElements(DataType::kFloat32, ReduceOp::kSum, a, in, 2, 0, 3000);
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(a[i], 3 * i);
}

// Any of several inputs, and a sub-range: the output block must not be
// written before every input's block was read (the accumulate-in-output path
// would lose input 2 if it wrote over it first).
TEST(ReduceTest, OutputMayAliasAnyOfSeveralInputs) {
  constexpr int kCount = 5000, kBegin = 700;
  for (int alias = 0; alias < 3; ++alias) {
    std::vector<std::vector<int64_t>> in(3, std::vector<int64_t>(kCount));
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < kCount; ++i) in[k][i] = (k + 1) * 1000 + i;
    }
    const void* ptrs[] = {in[0].data(), in[1].data(), in[2].data()};
    ReduceElements(DataType::kInt64, ReduceOp::kSum, in[alias].data(), ptrs, 3, kBegin, kCount);
    for (int i = 0; i < kCount; ++i) {
      const int64_t want = i < kBegin ? (alias + 1) * 1000 + i : 6000 + 3 * i;
      ASSERT_EQ(in[alias][i], want) << "output aliases input " << alias << ", element " << i;
    }
  }
}

// also_out gets the result too, on both paths (float accumulates in its
// output, float16 in a float block), from a poisoned start; it may be an
// input exactly (two-shot's own shard, in place). A sub-range leaves the
// rest of it as it was.
TEST(ReduceTest, AlsoOutGetsTheSameResult) {
  constexpr uint64_t kCount = 3001, kBegin = 500;
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    for (bool alias : {false, true}) {
      for (uint64_t begin : {uint64_t{0}, kBegin}) {
        const size_t es = DataTypeSize(dt);
        std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(kCount * es));
        std::vector<const void*> ptrs;
        for (uint32_t r = 0; r < 3; ++r) {
          testing::FillInput(dt, ReduceOp::kSum, r, 5, in[r].data(), kCount);
          ptrs.push_back(in[r].data());
        }
        std::vector<uint8_t> out(kCount * es), other(kCount * es);
        testing::Poison(dt, out.data(), kCount);
        testing::Poison(dt, other.data(), kCount);
        uint8_t* also = alias ? in[1].data() : other.data();
        ASSERT_GT(testing::CountWrongAllReduce(dt, ReduceOp::kSum, 3, 5, also, kCount), 0u) << "must start wrong";
        const std::vector<uint8_t> head(also, also + begin * es);
        ReduceElements(dt, ReduceOp::kSum, out.data(), ptrs.data(), 3, begin, kCount, also);
        const std::string what = std::string(DataTypeName(dt)) + (alias ? " aliasing input 1" : "") +
                                 " from element " + std::to_string(begin);
        if (begin == 0) {
          EXPECT_EQ(testing::CountWrongAllReduce(dt, ReduceOp::kSum, 3, 5, out.data(), kCount), 0u) << what;
          EXPECT_EQ(testing::CountWrongAllReduce(dt, ReduceOp::kSum, 3, 5, also, kCount), 0u) << what;
        } else {
          EXPECT_EQ(std::memcmp(also, head.data(), head.size()), 0) << what;
          EXPECT_EQ(std::memcmp(also + begin * es, out.data() + begin * es, (kCount - begin) * es), 0) << what;
        }
      }
    }
  }
}

// ---- the executor, ranks as threads -----------------------------------------

}  // namespace
}  // namespace collectived::host

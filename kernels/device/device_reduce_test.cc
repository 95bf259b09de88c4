// GPU tests of the device reductions (CTest label gpu). Without a GPU they
// report themselves skipped; CI builds them but cannot run them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/device/device_reduce.h"
#include "base/gpu/gpu_check.h"
#include "tests/support/exact_data.h"

namespace collectived::device {
namespace {

bool HaveGpu() {
  int n = 0;
  return gpuGetDeviceCount(&n) == gpuSuccess && n > 0;
}

#define REQUIRE_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine"

Status DeviceAlloc(void** p, size_t bytes) {
  COLLECTIVED_GPU_CHECK(gpuMalloc(p, bytes));
  return Status::Ok();
}

TEST(DeviceReduceTest, GpuErrorsBecomeStatuses) {
  REQUIRE_GPU();
  void* p = nullptr;
  Status s = DeviceAlloc(&p, size_t{1} << 60);  // far beyond any GPU
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("gpuMalloc"), std::string::npos) << s.message();
  gpuGetLastError();  // clear the sticky-free error for later tests
}

TEST(DeviceReduceTest, ReduceSlotsRefusesBadArguments) {
  ReduceSlotsArgs a;
  a.world = 2;
  EXPECT_EQ(LaunchReduceSlots(DataType::kFloat32, ReduceOp::kSum, a, nullptr).code(), StatusCode::kInvalidArgument);
  a.scratch = &a;  // never dereferenced: refused before any launch
  a.world = kMaxReduceOwners + 1;
  EXPECT_EQ(LaunchReduceSlots(DataType::kFloat32, ReduceOp::kSum, a, nullptr).code(), StatusCode::kInvalidArgument);
  a.world = 2;
  a.chunk = 4;
  a.counts[1] = 5;
  Status s = LaunchReduceSlots(DataType::kFloat32, ReduceOp::kSum, a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("exceeds the slot"), std::string::npos) << s.message();
  s = LaunchReduceSlots(DataType::kInt32, ReduceOp::kAvg, a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not allowed on int32"), std::string::npos) << s.message();
}

// The copy-engine all-reduce's SM step: 3 owners, slots filled with rank k's
// exact inputs of the owner's part, the last owner's part shorter, and owner
// 1 writing into its own first slot (the in-place case). Every dtype x op,
// bit-exact against the same reference as the host backend.
TEST(DeviceReduceTest, ReduceSlotsMatchesReference) {
  REQUIRE_GPU();
  const uint32_t world = 3;
  const uint64_t count = 100003, chunk = (count + world - 1) / world;
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                      DataType::kInt32, DataType::kInt64, DataType::kUint32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      if (!IsValidReduction(dt, op)) continue;
      const size_t es = DataTypeSize(dt);
      // Rank k's whole input; owner r's slot k holds its part r.
      std::vector<std::vector<uint8_t>> inputs(world, std::vector<uint8_t>(count * es));
      for (uint32_t k = 0; k < world; ++k) testing::FillInput(dt, op, k, 33, inputs[k].data(), count);
      std::vector<uint8_t> scratch_host(uint64_t{world} * world * chunk * es);
      testing::Poison(dt, scratch_host.data(), uint64_t{world} * world * chunk);
      ReduceSlotsArgs a;
      a.world = world;
      a.chunk = chunk;
      for (uint32_t r = 0; r < world; ++r) {
        a.counts[r] = std::min(chunk, count - r * chunk);
        for (uint32_t k = 0; k < world; ++k) {
          std::memcpy(&scratch_host[(r * world + k) * chunk * es], &inputs[k][r * chunk * es], a.counts[r] * es);
        }
      }
      void* scratch = nullptr;
      void* out = nullptr;
      ASSERT_EQ(gpuMalloc(&scratch, scratch_host.size()), gpuSuccess);
      ASSERT_EQ(gpuMalloc(&out, count * es), gpuSuccess);
      ASSERT_EQ(gpuMemcpy(scratch, scratch_host.data(), scratch_host.size(), gpuMemcpyHostToDevice), gpuSuccess);
      std::vector<uint8_t> host(count * es);
      testing::Poison(dt, host.data(), count);
      ASSERT_EQ(gpuMemcpy(out, host.data(), host.size(), gpuMemcpyHostToDevice), gpuSuccess);
      a.scratch = scratch;
      for (uint32_t r = 0; r < world; ++r) {
        a.outputs[r] = static_cast<uint8_t*>(out) + r * chunk * es;
      }
      a.outputs[1] = static_cast<uint8_t*>(scratch) + (1 * world + 0) * chunk * es;  // its own slot 0
      ASSERT_TRUE(LaunchReduceSlots(dt, op, a, nullptr, 8).ok());
      ASSERT_EQ(gpuMemcpy(static_cast<uint8_t*>(out) + chunk * es, a.outputs[1], a.counts[1] * es,
                          gpuMemcpyDeviceToDevice), gpuSuccess);
      ASSERT_EQ(gpuMemcpy(host.data(), out, host.size(), gpuMemcpyDeviceToHost), gpuSuccess);
      EXPECT_EQ(testing::CountWrongAllReduce(dt, op, world, 33, host.data(), count), 0u)
          << DataTypeName(dt) << " " << ReduceOpName(op);
      gpuFree(scratch);
      gpuFree(out);
    }
  }
}

}  // namespace
}  // namespace collectived::device

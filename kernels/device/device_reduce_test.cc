// GPU tests of the device reductions (CTest label gpu). Without a GPU they
// report themselves skipped; CI builds them but cannot run them.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/device/device_reduce.h"
#include "kernels/device/gpu_check.h"
#include "tests/support/exact_data.h"

namespace collectived::device {
namespace {

bool HaveGpu() {
  int n = 0;
  return gpuGetDeviceCount(&n) == gpuSuccess && n > 0;
}

#define REQUIRE_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine"

TEST(DeviceReduceTest, RefusesBadArgumentsWithoutTouchingTheGpu) {
  Status s = LaunchReduce(DataType::kInt32, ReduceOp::kAvg, nullptr, nullptr, 2, 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not allowed on int32"), std::string::npos);
  EXPECT_EQ(LaunchReduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, 0, 1, nullptr).code(),
            StatusCode::kInvalidArgument);
}

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

// Every dtype x op, 2 and 8 ranks, exact inputs, poisoned output, bit-exact
// against the same reference as the host backend.
TEST(DeviceReduceTest, EveryTypeAndOpMatchesReference) {
  REQUIRE_GPU();
  const uint64_t count = 1000003;  // odd, more than one grid pass
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                            DataType::kInt32,   DataType::kInt64,   DataType::kUint32};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  gpuStream_t stream;
  ASSERT_EQ(gpuStreamCreate(&stream), gpuSuccess);
  for (DataType dt : types) {
    for (ReduceOp op : ops) {
      if (!IsValidReduction(dt, op)) continue;
      for (uint32_t n : {2u, 8u}) {
        const size_t bytes = count * DataTypeSize(dt);
        std::vector<uint8_t> host(bytes);
        std::vector<void*> dev(n);
        for (uint32_t r = 0; r < n; ++r) {
          ASSERT_EQ(gpuMalloc(&dev[r], bytes), gpuSuccess);
          testing::FillInput(dt, op, r, 21, host.data(), count);
          ASSERT_EQ(gpuMemcpy(dev[r], host.data(), bytes, gpuMemcpyHostToDevice), gpuSuccess);
        }
        void* out = nullptr;
        void** ptrs = nullptr;
        ASSERT_EQ(gpuMalloc(&out, bytes), gpuSuccess);
        ASSERT_EQ(gpuMalloc(reinterpret_cast<void**>(&ptrs), n * sizeof(void*)), gpuSuccess);
        ASSERT_EQ(gpuMemcpy(ptrs, dev.data(), n * sizeof(void*), gpuMemcpyHostToDevice), gpuSuccess);
        testing::Poison(dt, host.data(), count);
        ASSERT_EQ(gpuMemcpy(out, host.data(), bytes, gpuMemcpyHostToDevice), gpuSuccess);
        ASSERT_TRUE(LaunchReduce(dt, op, out, ptrs, n, count, stream).ok());
        ASSERT_EQ(gpuStreamSynchronize(stream), gpuSuccess);
        ASSERT_EQ(gpuMemcpy(host.data(), out, bytes, gpuMemcpyDeviceToHost), gpuSuccess);
        EXPECT_EQ(testing::CountWrongAllReduce(dt, op, n, 21, host.data(), count), 0u)
            << DataTypeName(dt) << " " << ReduceOpName(op) << " n=" << n;
        for (void* p : dev) gpuFree(p);
        gpuFree(out);
        gpuFree(ptrs);
      }
    }
  }
  gpuStreamDestroy(stream);
}

}  // namespace
}  // namespace collectived::device

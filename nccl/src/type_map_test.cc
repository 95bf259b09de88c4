// Every NCCL type and reduction against collectived's, and the status map.
#include "nccl/src/type_map.h"

#include <gtest/gtest.h>

namespace collectived::nccl {
namespace {

TEST(TypeMap, EveryNcclTypeHasItsSizeAndKernelType) {
  struct Case {
    int nccl;
    size_t size;
    DataType native;
  } cases[] = {
      {ncclInt8, 1, DataType::kUnspecified},       {ncclUint8, 1, DataType::kUnspecified},
      {ncclInt32, 4, DataType::kInt32},            {ncclUint32, 4, DataType::kUint32},
      {ncclInt64, 8, DataType::kInt64},            {ncclUint64, 8, DataType::kInt64},
      {ncclFloat16, 2, DataType::kFloat16},        {ncclFloat32, 4, DataType::kFloat32},
      {ncclFloat64, 8, DataType::kFloat64},        {ncclBfloat16, 2, DataType::kBFloat16},
      {ncclFloat8e4m3, 1, DataType::kUnspecified}, {ncclFloat8e5m2, 1, DataType::kUnspecified},
  };
  static_assert(sizeof(cases) / sizeof(cases[0]) == ncclNumTypes);
  for (const Case& c : cases) {
    TypeInfo t;
    ASSERT_TRUE(MapType(c.nccl, &t).ok()) << c.nccl;
    EXPECT_EQ(t.size, c.size) << c.nccl;
    EXPECT_EQ(t.native, c.native) << c.nccl;
    if (c.native != DataType::kUnspecified) {
      EXPECT_EQ(DataTypeSize(c.native), c.size) << c.nccl;
    }
  }
  TypeInfo t;
  Status s = MapType(ncclNumTypes, &t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("datatype 12"), std::string::npos) << s.ToString();
  EXPECT_EQ(MapType(-1, &t).code(), StatusCode::kInvalidArgument);
}

TEST(TypeMap, ReductionsMapOneToOne) {
  const std::pair<int, ReduceOp> ops[] = {{ncclSum, ReduceOp::kSum}, {ncclProd, ReduceOp::kProd},
                                          {ncclMax, ReduceOp::kMax},  {ncclMin, ReduceOp::kMin},
                                          {ncclAvg, ReduceOp::kAvg}};
  for (const auto& [nccl_op, ours] : ops) {
    DataType dt;
    ReduceOp op;
    ASSERT_TRUE(MapReduction(ncclFloat32, nccl_op, &dt, &op).ok()) << nccl_op;
    EXPECT_EQ(op, ours);
    EXPECT_EQ(dt, DataType::kFloat32);
  }
}

TEST(TypeMap, WhatCannotBeReducedExactlyIsInvalidArgumentNamingTheField) {
  struct Case {
    int type, op;
    const char* names;
  } cases[] = {
      {ncclFloat8e4m3, ncclSum, "datatype 10"}, {ncclFloat8e5m2, ncclMax, "datatype 11"},
      {ncclInt8, ncclSum, "datatype 0"},        {ncclUint8, ncclSum, "datatype 1"},
      {ncclInt32, ncclAvg, "op avg"},           {ncclUint64, ncclMax, "op max"},
      {ncclUint64, ncclMin, "op min"},          {ncclFloat32, ncclNumOps, "op 5"},
      {ncclFloat32, ncclNumOps + 3, "op 8"},  // a PreMulSum op's handle
  };
  for (const Case& c : cases) {
    DataType dt;
    ReduceOp op;
    Status s = MapReduction(c.type, c.op, &dt, &op);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.names;
    EXPECT_NE(s.message().find(c.names), std::string::npos) << s.ToString();
    EXPECT_EQ(ResultFor(s), ncclInvalidArgument);
  }
  // Sums and products of uint64 are the int64 kernel's bits.
  DataType dt;
  ReduceOp op;
  ASSERT_TRUE(MapReduction(ncclUint64, ncclSum, &dt, &op).ok());
  EXPECT_EQ(dt, DataType::kInt64);
  ASSERT_TRUE(MapReduction(ncclUint64, ncclProd, &dt, &op).ok());
}

TEST(TypeMap, StatusCodesBecomeTheResultsNcclUsersHandle) {
  EXPECT_EQ(ResultFor(Status::Ok()), ncclSuccess);
  EXPECT_EQ(ResultFor(Status::InvalidArgument("x")), ncclInvalidArgument);
  EXPECT_EQ(ResultFor(Status::FailedPrecondition("x")), ncclInvalidUsage);
  EXPECT_EQ(ResultFor(Status::Aborted("rank 1 left")), ncclRemoteError);
  EXPECT_EQ(ResultFor(Status::Unavailable("node lost")), ncclRemoteError);
  EXPECT_EQ(ResultFor(Status::DeadlineExceeded("x")), ncclRemoteError);
  EXPECT_EQ(ResultFor(Status::ResourceExhausted("x")), ncclSystemError);
  EXPECT_EQ(ResultFor(Status::Internal("x")), ncclInternalError);
  for (int r = 0; r < ncclNumResults; ++r) {
    EXPECT_STRNE(ResultString(static_cast<ncclResult_t>(r)), "unknown result code") << r;
  }
  EXPECT_STREQ(ResultString(static_cast<ncclResult_t>(99)), "unknown result code");
}

}  // namespace
}  // namespace collectived::nccl

// The exported API without a daemon or a GPU: argument checks name the
// field, unsupported calls answer ncclInvalidUsage naming themselves, and
// the version, ids and error strings are NCCL's shapes. Linked against the
// library by its soname, as a program built with -lnccl is.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "nccl.h"

namespace {

std::string Last() { return ncclGetLastError(nullptr); }

TEST(NcclApi, VersionIsTheDeclaredOne) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(v, 22707);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_NE(Last().find("ncclGetVersion: version is null"), std::string::npos) << Last();
}

TEST(NcclApi, UniqueIdsDifferAndInitChecksItsArgumentsFirst) {
  ncclUniqueId a, b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  EXPECT_NE(std::memcmp(a.internal, b.internal, sizeof(a.internal)), 0);
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommInitRank(&comm, 0, a, 0), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(Last().find("nranks 0"), std::string::npos) << Last();
  EXPECT_EQ(ncclCommInitRank(&comm, 4, a, 4), ncclInvalidArgument);
  EXPECT_NE(Last().find("rank 4 outside [0, 4)"), std::string::npos) << Last();
  ncclUniqueId foreign{};
  std::memset(foreign.internal, 7, sizeof(foreign.internal));  // not ours (a real NCCL's, say)
  EXPECT_EQ(ncclCommInitRank(&comm, 2, foreign, 0), ncclInvalidArgument);
  EXPECT_NE(Last().find("commId"), std::string::npos) << Last();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, a, 0, &config), ncclInvalidArgument);
  EXPECT_NE(Last().find("config->blocking"), std::string::npos) << Last();
  config.magic = 0;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, a, 0, &config), ncclInvalidArgument);
  EXPECT_NE(Last().find("NCCL_CONFIG_INITIALIZER"), std::string::npos) << Last();
  EXPECT_EQ(ncclCommInitRank(nullptr, 2, a, 0), ncclInvalidArgument);
}

TEST(NcclApi, CallsOnANullCommunicatorAreInvalidArguments) {
  int x = 0;
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(Last().find("ncclAllReduce: comm is null"), std::string::npos) << Last();
  EXPECT_EQ(ncclAllGather(nullptr, nullptr, 1, ncclFloat32, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCount(nullptr, &x), ncclInvalidArgument);
  ncclResult_t async;
  EXPECT_EQ(ncclCommGetAsyncError(nullptr, &async), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);  // as NCCL
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
}

TEST(NcclApi, UnsupportedCallsAnswerInvalidUsageNamingThemselves) {
  EXPECT_EQ(ncclSend(nullptr, 1, ncclFloat32, 1, nullptr, nullptr), ncclInvalidUsage);
  EXPECT_NE(Last().find("ncclSend: not supported by collectived"), std::string::npos) << Last();
  EXPECT_EQ(ncclRecv(nullptr, 1, ncclFloat32, 1, nullptr, nullptr), ncclInvalidUsage);
  EXPECT_NE(Last().find("ncclRecv"), std::string::npos) << Last();
  ncclRedOp_t op;
  float scalar = 2;
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, nullptr), ncclInvalidUsage);
  EXPECT_NE(Last().find("ncclRedOpCreatePreMulSum"), std::string::npos) << Last();
  ncclSimInfo_t sim;
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
}

TEST(NcclApi, GroupsNestAndAnEndWithoutAStartIsInvalidUsage) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(Last().find("ncclGroupEnd: no ncclGroupStart"), std::string::npos) << Last();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);  // nothing was queued
}

TEST(NcclApi, ErrorStringsCoverEveryResult) {
  for (int r = 0; r < ncclNumResults; ++r) {
    const char* s = ncclGetErrorString(static_cast<ncclResult_t>(r));
    ASSERT_NE(s, nullptr);
    EXPECT_GT(std::strlen(s), 5u) << r;
  }
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
}

TEST(NcclApi, MemFreeOfAForeignPointerIsInvalidArgument) {
  int x = 0;
  EXPECT_EQ(ncclMemFree(&x), ncclInvalidArgument);
  EXPECT_NE(Last().find("ncclMemFree: ptr was not returned by ncclMemAlloc"), std::string::npos)
      << Last();
  EXPECT_EQ(ncclMemAlloc(nullptr, 16), ncclInvalidArgument);
  void* p = nullptr;
  EXPECT_EQ(ncclMemAlloc(&p, 0), ncclInvalidArgument);
}

}  // namespace

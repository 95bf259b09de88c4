#include "nccl/src/unique_id.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace collectived::nccl {
namespace {

TEST(UniqueId, RoundTripsItsKeyAndSocket) {
  UniqueId id;
  ASSERT_TRUE(FreshKey(&id.key).ok());
  EXPECT_EQ(id.key.size(), 32u);
  id.socket = "/tmp/some dir/c.sock";
  ncclUniqueId raw;
  ASSERT_TRUE(EncodeUniqueId(id, &raw).ok());
  UniqueId back;
  ASSERT_TRUE(DecodeUniqueId(raw, &back).ok());
  EXPECT_EQ(back.key, id.key);
  EXPECT_EQ(back.socket, id.socket);
}

TEST(UniqueId, KeysAreFresh) {
  std::string a, b;
  ASSERT_TRUE(FreshKey(&a).ok());
  ASSERT_TRUE(FreshKey(&b).ok());
  EXPECT_NE(a, b);
}

TEST(UniqueId, ForeignOrDamagedIdsAreRefusedNamingCommId) {
  UniqueId id;
  ASSERT_TRUE(FreshKey(&id.key).ok());
  ncclUniqueId raw;
  ASSERT_TRUE(EncodeUniqueId(id, &raw).ok());
  UniqueId back;
  ncclUniqueId bad = raw;
  bad.internal[0] = 'X';  // a real NCCL's id, say
  Status s = DecodeUniqueId(bad, &back);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("commId"), std::string::npos);
  bad = raw;
  bad.internal[10] = 'Z';  // not a hex digit
  EXPECT_EQ(DecodeUniqueId(bad, &back).code(), StatusCode::kInvalidArgument);
  bad = raw;
  std::memset(bad.internal + 40, 'a', 88);  // socket without its terminator
  EXPECT_EQ(DecodeUniqueId(bad, &back).code(), StatusCode::kInvalidArgument);
}

TEST(UniqueId, ASocketPathTooLongIsRefusedNamingIt) {
  UniqueId id;
  ASSERT_TRUE(FreshKey(&id.key).ok());
  id.socket = std::string(kMaxIdSocketBytes + 1, 's');
  ncclUniqueId raw;
  Status s = EncodeUniqueId(id, &raw);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("socket"), std::string::npos);
  id.socket.pop_back();
  EXPECT_TRUE(EncodeUniqueId(id, &raw).ok());
}

TEST(UniqueId, EachRankMayNameItsOwnDaemon) {
  UniqueId id{"k", "/from/the/id.sock"};
  unsetenv("COLLECTIVED_SOCKET");
  EXPECT_EQ(DaemonSocket(id), "/from/the/id.sock");
  EXPECT_EQ(DaemonSocket({}), "/run/collectived/collectived.sock");
  setenv("COLLECTIVED_SOCKET", "/local/node.sock", 1);
  EXPECT_EQ(DaemonSocket(id), "/local/node.sock");
  unsetenv("COLLECTIVED_SOCKET");
}

}  // namespace
}  // namespace collectived::nccl

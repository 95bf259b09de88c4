#include "daemon/validate.h"

#include <gtest/gtest.h>

namespace collectived::daemon::validate {
namespace {

TEST(ValidateTest, StringLengthAndControlCharacters) {
  EXPECT_TRUE(String("key", "", 4).ok());
  EXPECT_TRUE(String("key", "abcd", 4).ok());
  Status s = String("key", "abcde", 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("key is 5 bytes"), std::string::npos) << s.message();
  for (std::string bad : {std::string("a\nb"), std::string("a\rb"), std::string("\x1b[31m"), std::string("a\x7f"),
                          std::string("a\0b", 3)}) {
    s = String("client_name", bad, 64);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("client_name holds control character"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(String("key", "ünïcode ok", 64).ok());
}

TEST(ValidateTest, RangeAlignedEnum) {
  EXPECT_TRUE(Range("rank", 3, 0, 3).ok());
  Status s = Range("op_timeout_ms", 5, 0, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "op_timeout_ms 5 outside [0, 4]");
  EXPECT_EQ(Range("pid", 0, 1, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Aligned("op.send_offset", 16, 8).ok());
  s = Aligned("op.send_offset", 6, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op.send_offset 6"), std::string::npos);
  EXPECT_TRUE(Enum("op.dtype", 1, true).ok());
  s = Enum("op.dtype", 99, false);
  EXPECT_EQ(s.message(), "op.dtype has unknown value 99");
}

TEST(ValidateTest, PrintableEscapesWhatCouldForgeALogLine) {
  EXPECT_EQ(Printable("plain key-1"), "plain key-1");
  EXPECT_EQ(Printable("a\n[info] forged"), "a\\x0a[info] forged");
  EXPECT_EQ(Printable("back\\slash"), "back\\x5cslash");
  EXPECT_EQ(Printable(std::string("\x1b\x7f", 2)), "\\x1b\\x7f");
}

}  // namespace
}  // namespace collectived::daemon::validate

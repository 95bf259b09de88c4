// Unit tests of memfd windows: a window every member maps and writes, but
// none may resize (docs/security.md).
#include "ipc/shm_window.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace collectived::ipc {
namespace {

TEST(ShmWindowTest, NoProcessCanResizeAWindow) {
  std::unique_ptr<ShmWindow> w;
  ASSERT_TRUE(ShmWindow::Create("shm-window-test", 1 << 16, &w).ok());
  // What a member does with the fd it was handed: map it (allowed), or shrink
  // or grow it (refused; a shrink would fault every process that maps it).
  const int member_fd = dup(w->fd());
  ASSERT_GE(member_fd, 0);
  std::unique_ptr<ShmWindow> mapped;
  ASSERT_TRUE(ShmWindow::Map(member_fd, 1 << 16, &mapped).ok());
  std::memset(mapped->data(), 0x5a, 1 << 16);
  EXPECT_EQ(w->data()[(1 << 16) - 1], 0x5a);
  EXPECT_NE(ftruncate(mapped->fd(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(mapped->fd(), 1 << 20), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(w->data()[(1 << 16) - 1], 0x5a) << "the window still reads after the attempts";
}

}  // namespace
}  // namespace collectived::ipc

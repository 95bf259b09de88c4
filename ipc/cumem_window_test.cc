// GPU test (label gpu): a cuMem allocation exported by one process as a POSIX
// fd, sent over a Unix socket with SCM_RIGHTS, imported and mapped by another;
// both read each other's writes, and the importer's mapping outlives the
// exporter's release. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "ipc/cumem_window.h"
#include "ipc/fd_channel.h"

namespace collectived::ipc {
namespace {

// Checks GPU presence in a child so this process's CUDA state stays untouched
// before fork (CUDA must not be initialised across fork).
bool HaveGpuNoInit() {
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

constexpr uint64_t kBytes = 8 << 20;

// Child: import the fd, check the parent's pattern (0x5A), write 0xC3 into the
// second half, report; then (after the parent dropped its window) read again.
int ChildMain(int sock) {
  uint64_t size = 0;
  int fd = -1;
  if (!RecvWithFd(sock, &size, sizeof(size), &fd).ok() || fd < 0) return 10;
  std::unique_ptr<CuMemWindow> w;
  if (!CuMemWindow::Import(fd, 0, size, &w).ok()) return 11;
  std::vector<unsigned char> host(kBytes);
  if (cudaMemcpy(host.data(), w->device_ptr(), kBytes, cudaMemcpyDeviceToHost) != cudaSuccess) return 12;
  for (uint64_t i = 0; i < kBytes / 2; ++i) {
    if (host[i] != 0x5A) return 13;
  }
  if (cudaMemset(static_cast<char*>(w->device_ptr()) + kBytes / 2, 0xC3, kBytes / 2) != cudaSuccess) return 14;
  if (cudaDeviceSynchronize() != cudaSuccess) return 15;
  char ok = 1;
  if (!SendWithFd(sock, &ok, 1, -1).ok()) return 16;
  char released = 0;
  if (!RecvWithFd(sock, &released, 1, &fd).ok()) return 17;
  // The exporter released and unmapped its window: ours must still work.
  if (cudaMemcpy(host.data(), w->device_ptr(), kBytes, cudaMemcpyDeviceToHost) != cudaSuccess) return 18;
  for (uint64_t i = kBytes / 2; i < kBytes; ++i) {
    if (host[i] != 0xC3) return 19;
  }
  return 0;
}

TEST(CuMemWindowTest, ExportImportAcrossProcessesAndOutliveTheExporter) {
  if (!HaveGpuNoInit()) GTEST_SKIP() << "no GPU on this machine";
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t child = fork();  // before this process touches CUDA
  if (child == 0) {
    close(sv[0]);
    _exit(ChildMain(sv[1]));
  }
  close(sv[1]);
  std::string uuid;
  ASSERT_TRUE(GpuUuid(0, &uuid).ok());
  EXPECT_EQ(uuid.rfind("GPU-", 0), 0u) << uuid;
  int ordinal = -1;
  ASSERT_TRUE(GpuOrdinalByUuid(uuid, &ordinal).ok());
  EXPECT_EQ(ordinal, 0);
  EXPECT_EQ(GpuOrdinalByUuid("GPU-00000000-0000-0000-0000-000000000000", &ordinal).code(), StatusCode::kNotFound);

  std::unique_ptr<CuMemWindow> w;
  ASSERT_TRUE(CuMemWindow::Create(0, kBytes, &w).ok());
  ASSERT_GE(w->size(), kBytes);
  ASSERT_EQ(cudaMemset(w->device_ptr(), 0x5A, kBytes / 2), cudaSuccess);
  ASSERT_EQ(cudaMemset(static_cast<char*>(w->device_ptr()) + kBytes / 2, 0, kBytes / 2), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int fd = -1;
  ASSERT_TRUE(w->ExportFd(&fd).ok());
  uint64_t size = w->size();
  ASSERT_TRUE(SendWithFd(sv[0], &size, sizeof(size), fd).ok());
  close(fd);
  char ok = 0;
  int none = -1;
  ASSERT_TRUE(RecvWithFd(sv[0], &ok, 1, &none).ok());
  std::vector<unsigned char> host(kBytes);
  ASSERT_EQ(cudaMemcpy(host.data(), w->device_ptr(), kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  uint64_t wrong = 0;
  for (uint64_t i = kBytes / 2; i < kBytes; ++i) wrong += host[i] != 0xC3;
  EXPECT_EQ(wrong, 0u) << "the child's writes are visible to the exporter";
  w.reset();  // the exporter drops its mapping and handle
  char released = 1;
  ASSERT_TRUE(SendWithFd(sv[0], &released, 1, -1).ok());
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "child failed at step " << WEXITSTATUS(st);
  close(sv[0]);
}

}  // namespace
}  // namespace collectived::ipc

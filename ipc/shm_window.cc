#include "ipc/shm_window.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace collectived::ipc {
namespace {

// Out of descriptors or memory is a limit the caller hit, not a bug: RESOURCE_EXHAUSTED, not INTERNAL.
Status Errno(const char* what) {
  const std::string text = std::string(what) + ": " + std::strerror(errno);
  if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) return Status::ResourceExhausted(text);
  return Status::Internal(text);
}

}  // namespace

Status ShmWindow::Create(const std::string& name, uint64_t bytes, std::unique_ptr<ShmWindow>* out) {
  if (bytes == 0) return Status::InvalidArgument("window of 0 bytes");
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status s = errno == ENOSPC || errno == ENOMEM ? Status::ResourceExhausted("no memory for window") : Errno("ftruncate");
    close(fd);
    return s;
  }
  // Every process it is shared with can write it, but none may resize it: a
  // shrink would fault this process (SIGBUS) on its next access.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    Status s = Errno("sealing the window's size");
    close(fd);
    return s;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status s = Errno("mmap");
    close(fd);
    return s;
  }
  out->reset(new ShmWindow(fd, static_cast<uint8_t*>(p), bytes));
  return Status::Ok();
}

Status ShmWindow::Map(int fd, uint64_t bytes, std::unique_ptr<ShmWindow>* out) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    Status s = Errno("fstat");
    close(fd);
    return s;
  }
  if (static_cast<uint64_t>(st.st_size) < bytes || bytes == 0) {
    close(fd);
    return Status::FailedPrecondition("window fd is smaller than announced");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status s = Errno("mmap");
    close(fd);
    return s;
  }
  out->reset(new ShmWindow(fd, static_cast<uint8_t*>(p), bytes));
  return Status::Ok();
}

ShmWindow::~ShmWindow() {
  munmap(data_, size_);
  close(fd_);
}

}  // namespace collectived::ipc

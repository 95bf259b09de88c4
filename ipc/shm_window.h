// A shared-memory window: an anonymous memfd mapped read/write. The daemon
// creates windows; clients map them from the fd received over the fd socket.
// The mapping outlives the fd and the creator (an fd-backed mapping stays valid
// while mapped), so no process exit leaves another with a dangling mapping.
#ifndef COLLECTIVED_IPC_SHM_WINDOW_H_
#define COLLECTIVED_IPC_SHM_WINDOW_H_

#include <cstdint>
#include <memory>
#include <string>

#include "collectived/status.h"

namespace collectived::ipc {

class ShmWindow {
 public:
  // Creates a zero-filled window of `bytes` named `name` (for /proc only).
  static Status Create(const std::string& name, uint64_t bytes, std::unique_ptr<ShmWindow>* out);
  // Maps `fd` (taking ownership of it) expecting at least `bytes`.
  static Status Map(int fd, uint64_t bytes, std::unique_ptr<ShmWindow>* out);
  ~ShmWindow();
  ShmWindow(const ShmWindow&) = delete;
  ShmWindow& operator=(const ShmWindow&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  ShmWindow(int fd, uint8_t* data, uint64_t size) : fd_(fd), data_(data), size_(size) {}
  int fd_;
  uint8_t* data_;
  uint64_t size_;
};

}  // namespace collectived::ipc

#endif  // COLLECTIVED_IPC_SHM_WINDOW_H_

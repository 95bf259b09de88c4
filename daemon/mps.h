// Detects whether CUDA MPS serves this node: whether processes sharing a GPU
// can run kernels at the same time (spinning kernels of ranks on one GPU need
// that), or time-slice. Measured on the H200 (docs/design.md section 4): a
// cross-process GPU handoff costs ~285 us without MPS and ~9 us with it.
// MPS serves one uid per GPU at a time, so the daemon and its clients must
// share a uid for daemon-executed GPU work.
#ifndef COLLECTIVED_DAEMON_MPS_H_
#define COLLECTIVED_DAEMON_MPS_H_

#include <sys/types.h>

#include <string>

namespace collectived::daemon {

struct MpsState {
  bool control_running = false;  // an nvidia-cuda-mps-control process exists
  bool pipe_present = false;     // <pipe dir>/control is a FIFO or a unix socket
  std::string pipe_dir;          // $CUDA_MPS_PIPE_DIRECTORY or /tmp/nvidia-mps
  uid_t pipe_owner = 0;          // the uid MPS serves (owner of the pipe)
  bool active() const { return control_running && pipe_present; }
  // One line for the log: state, uid, and what it costs without it.
  std::string Describe() const;
};

// `proc_root` and `env_pipe_dir` are seams for tests ("/proc", getenv()).
MpsState DetectMps(const std::string& proc_root = "/proc", const char* env_pipe_dir = nullptr);

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_MPS_H_

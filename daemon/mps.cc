#include "daemon/mps.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

namespace collectived::daemon {

std::string MpsState::Describe() const {
  if (active()) {
    return "MPS active (pipe " + pipe_dir + ", serving uid " + std::to_string(pipe_owner) +
           "): ranks sharing a GPU run concurrently (~9 us per cross-process handoff); MPS serves one uid per GPU, "
           "so clients and a daemon doing GPU work must run as uid " + std::to_string(pipe_owner);
  }
  std::string why = control_running ? "control daemon running but no control pipe in " + pipe_dir
                                    : "no nvidia-cuda-mps-control process";
  return "MPS not active (" + why + "): GPU work of different processes time-slices (~285 us per cross-process "
         "handoff measured on H200); daemon-executed GPU mode and client-executed ranks sharing a GPU need MPS "
         "(deploy/systemd/nvidia-mps.service)";
}

MpsState DetectMps(const std::string& proc_root, const char* env_pipe_dir) {
  MpsState s;
  const char* dir = env_pipe_dir != nullptr ? env_pipe_dir : std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  s.pipe_dir = dir != nullptr && *dir != '\0' ? dir : "/tmp/nvidia-mps";
  struct stat st;
  // A named pipe from older drivers; a unix socket from newer ones (driver
  // 580's control daemon: `srw-rw-rw- control`, tools/gpu-lab/results/
  // 2026-12-06-h100-s17/first/nccl_batch.txt), which the FIFO-only check
  // before this reported as "no control pipe" while MPS ran.
  if (stat((s.pipe_dir + "/control").c_str(), &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
    s.pipe_present = true;
    s.pipe_owner = st.st_uid;
  }
  if (DIR* d = opendir(proc_root.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::ifstream comm(proc_root + "/" + e->d_name + "/comm");
      std::string name;
      // comm is cut to 15 characters: this matches nvidia-cuda-mps-control (and its -server).
      if (std::getline(comm, name) && name == "nvidia-cuda-mps") {
        s.control_running = true;
        break;
      }
    }
    closedir(d);
  }
  return s;
}

}  // namespace collectived::daemon

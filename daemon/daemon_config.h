// Daemon settings, filled from flags > COLLECTIVED_* env > TOML file > defaults.
#ifndef COLLECTIVED_DAEMON_DAEMON_CONFIG_H_
#define COLLECTIVED_DAEMON_DAEMON_CONFIG_H_

#include <cstdint>
#include <string>

namespace collectived::daemon {

struct DaemonConfig {
  std::string socket_path = "/run/collectived/collectived.sock";
  std::string backend = "auto";  // auto | host | cuda
  uint64_t max_message_bytes = 16ull << 20;  // per rank input, sizes the fixed slots
  uint64_t one_shot_max_bytes = 256ull << 10;
  uint32_t ring_depth = 64;
  uint32_t op_timeout_ms = 30000;
  uint32_t join_timeout_ms = 60000;
  uint64_t max_buffer_bytes = 8ull << 30;  // all sessions' buffers together
  uint32_t drain_timeout_ms = 10000;
  std::string log_level = "info";
  // Daemon-executed GPU all-gathers: "fused" (one kernel) or "copy-engine"
  // (peer copies on the copy engines, no SMs).
  std::string gpu_gather_path = "fused";
  // Daemon-executed GPU all-reduces: "fused" (one kernel) or "copy-engine"
  // (the copy engines gather each rank's part into a scratch area, SMs
  // reduce it, the copy engines broadcast the result), with a scratch area of
  // at most this many bytes per communicator (larger ops go in pieces).
  std::string gpu_reduce_path = "fused";
  uint64_t gpu_copy_engine_scratch_bytes = 256ull << 20;
  // How GPU communicator memory is shared with members: "cumem" (fds),
  // "legacy-ipc" (cudaIpc handles), or "auto" (cumem where the devices can
  // export it, legacy-ipc otherwise).
  std::string gpu_memory_export = "auto";
  // Negative controls for the stress harness: never on by default.
  bool unsafe_skip_end_barrier = false;
  bool unsafe_event_before_epilogue = false;
  bool unsafe_size_dependent_slots = false;
  int32_t debug_delay_rank = -1;
  uint32_t debug_delay_us = 0;
  uint32_t debug_delay_copyout_us = 0;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_DAEMON_CONFIG_H_

// What Registry::Stats reports, as plain structs: the registry speaks domain
// types and the service layer (service.cc) turns them into GetStatsResponse,
// so wire types stay at the edge. Fields mirror the proto's, one for one.
#ifndef COLLECTIVED_DAEMON_STATS_H_
#define COLLECTIVED_DAEMON_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "collectived/types.h"

namespace collectived::daemon {

struct RankStats {
  uint32_t rank = 0;
  uint64_t session_id = 0;  // 0: the rank has left
  uint64_t posted = 0;
  uint64_t completed = 0;
  uint64_t captured_plans = 0;  // ops registered at graph-capture time
};

struct CommStats {
  uint64_t comm_id = 0;
  std::string key;
  uint32_t owner_uid = 0;  // of its first member
  bool key_hidden = false;  // set by the service for a viewer who may not see the key
  uint32_t world_size = 0;
  ExecutionMode mode = ExecutionMode::kDefault;
  uint64_t posted = 0;     // ops posted by at least one rank
  uint64_t matched = 0;    // ops whose descriptors agreed on every rank
  uint64_t completed = 0;  // ops finished with OK
  uint64_t failed = 0;     // ops finished with an error
  bool aborted = false;
  std::string abort_reason;
  std::vector<RankStats> ranks;
  bool closed = false;  // every member left; kept in recently_closed
  double gpu_handoff_us_mean = 0;  // daemon-executed GPU communicators
  uint64_t registered_buffers = 0;  // GPU communicators: registered by every rank, now
  // Across nodes: world_size is this node's ranks.
  uint32_t global_world_size = 0;
  std::vector<uint32_t> nodes;
  uint64_t exchanges = 0, exchange_ns = 0, exchange_bytes_sent = 0;
};

struct RegistryStats {
  uint64_t sessions = 0;
  uint64_t buffers = 0;
  uint64_t buffer_bytes = 0;
  bool draining = false;
  std::vector<CommStats> communicators;
  std::vector<CommStats> recently_closed;  // the last 16, newest last
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_STATS_H_

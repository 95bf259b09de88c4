// What Registry::Stats reports, as plain structs: the registry speaks domain
// types and the service layer (service.cc) turns them into GetStatsResponse,
// so wire types stay at the edge. Fields mirror the proto's, one for one.
#ifndef COLLECTIVED_DAEMON_STATS_H_
#define COLLECTIVED_DAEMON_STATS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "collectived/types.h"
#include "ring/segment_layout.h"

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
  uint32_t recv_id = 0;   // the id this node's data tags carry for it (0: none yet)
  uint32_t comm_tag = 0;  // the cluster-wide id of its plan (0: not formed across nodes)
  uint64_t exchanges = 0, exchange_ns = 0, exchange_bytes_sent = 0;
  // Host communicators: latency from rank 0's post to its completion, over
  // every op so far (bucket upper bounds of ring::OpCounters' histogram).
  uint64_t latency_count = 0;
  double latency_p50_us = 0, latency_p90_us = 0, latency_p99_us = 0;
  // The stall inspector (Registry::Housekeeping): an op some ranks posted
  // and others have not, for longer than --stall-threshold-ms.
  bool stalled = false;
  uint64_t stalled_op = 0;
  uint64_t stalled_ms = 0;
  std::vector<uint32_t> missing_ranks;  // global ranks across nodes
  std::string stall_note;               // who it waits for, in words
};

struct SessionStats {
  uint64_t session_id = 0;
  uint32_t uid = 0;
  uint32_t pid = 0;
  std::string name;
  uint64_t age_ms = 0;
  uint64_t buffers = 0;
  uint64_t buffer_bytes = 0;
  std::vector<std::pair<uint64_t, uint32_t>> memberships;  // (communicator id, rank)
};

// What the metrics endpoint reports (daemon/metrics.h). The op counters are
// cumulative over the daemon's life: communicators that closed keep counting.
struct MetricsTotals {
  struct Ops {
    uint64_t completed = 0, failed = 0, bytes = 0;
  };
  std::map<std::tuple<ExecutionMode, CollectiveKind, DataType>, Ops> ops;  // host communicators
  std::map<ExecutionMode, std::array<uint64_t, ring::kLatencyBuckets>> latency;
  std::map<ExecutionMode, uint64_t> latency_sum_ns;
  std::map<ExecutionMode, uint64_t> gpu_ops_completed;  // GPU communicators: every rank's ops done
  std::map<std::string, uint64_t> communicators_aborted;  // by reason class
  std::map<std::string, uint64_t> ops_failed_by_reason;   // failed ops, by their communicator's abort class
};
struct MetricsSnapshot {
  MetricsTotals totals;
  uint64_t sessions = 0;
  uint64_t communicators_formed = 0, communicators_forming = 0;
  uint64_t joins_pending = 0;
  uint64_t buffers = 0, buffer_bytes = 0, buffer_bytes_limit = 0;
  uint64_t gpu_heap_bytes = 0, gpu_heap_bytes_limit = 0;  // limit: per rank's heap
  uint64_t stalled_ops = 0;
};

// Why a communicator was aborted, as a label: member_left, deadline,
// mismatch, node_lost, abort_call, other ("" when not aborted).
std::string AbortClass(const std::string& reason);

struct RegistryStats {
  uint64_t sessions = 0;
  uint64_t buffers = 0;
  uint64_t buffer_bytes = 0;
  bool draining = false;
  std::vector<CommStats> communicators;
  std::vector<CommStats> recently_closed;  // the last 16, newest last
  std::vector<SessionStats> session_list;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_STATS_H_

// The registry's counters as plain structs (daemon/stats.h); the service
// turns them into GetStatsResponse.
#include "daemon/registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

#include "daemon/registry_state.h"

namespace collectived::daemon {

CommStats CommStatsOf(const Comm& c) {
  CommStats cs;
  cs.comm_id = c.id;
  cs.key = c.key;
  cs.owner_uid = c.owner.uid;
  cs.world_size = c.world_size;
  cs.global_world_size = c.global_world;
  cs.mode = c.mode;
  if (c.exchange) {
    cs.nodes = c.exchange->plan().nodes;
    cs.exchanges = c.exchange->exchanges();
    cs.exchange_ns = c.exchange->exchange_ns();
    cs.exchange_bytes_sent = c.exchange->bytes_sent();
  }
  const ring::CommHeader& h = c.seg.header();
  uint64_t posted = 0;
  for (uint32_t r = 0; r < c.world_size; ++r) {
    RankStats rs;
    rs.rank = r;
    rs.session_id = c.members[r];
    rs.posted = c.seg.control(r).next_index.value.load(std::memory_order_acquire);
    rs.completed = c.seg.control(r).completed.value.load(std::memory_order_acquire);
    rs.captured_plans = r < c.captured_plans.size() ? c.captured_plans[r] : 0;
    posted = std::max(posted, rs.posted);
    cs.ranks.push_back(rs);
  }
  cs.posted = posted;
  uint64_t registered = 0;
  for (const auto& [id, g] : c.registrations) registered += g.formed ? 1 : 0;
  cs.registered_buffers = registered;
  if (c.gpu) {
    // The kernels keep these counts in device memory (each replay of a
    // captured op takes its index there); one small copy reads them.
    GpuCommMemory::Counts counts;
    Status read = c.gpu_memory ? c.gpu_memory->ReadCounts(c.world_size, &counts) : Status::NotFound("no memory");
    if (!read.ok() && c.gpu_memory) {
      // A failed copy here means this daemon's CUDA context is broken: say so once.
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        spdlog::error("GPU communicator {} '{}': counts not readable: {}", c.id, c.key, read.ToString());
      }
    }
    if (read.ok()) {
      uint64_t posted_max = 0;
      for (uint32_t r = 0; r < c.world_size; ++r) {
        cs.ranks[r].posted = counts.posted[r];
        cs.ranks[r].completed = counts.completed[r];
        posted_max = std::max(posted_max, counts.posted[r]);
      }
      cs.posted = posted_max;
    }
    uint64_t all_done = UINT64_MAX;
    for (uint32_t r = 0; r < c.world_size; ++r) all_done = std::min(all_done, cs.ranks[r].completed);
    cs.matched = all_done;
    cs.completed = all_done;
    const bool kernel_gave_up = counts.abort != 0;
    if (c.gpu_executor) cs.gpu_handoff_us_mean = c.gpu_executor->handoff_us_mean();
    cs.aborted = c.seg.aborted() || kernel_gave_up;
    if (c.seg.aborted()) {
      cs.abort_reason = c.seg.AbortStatus().message();
    } else if (kernel_gave_up) {
      cs.abort_reason = "a kernel gave up (deadline, or ranks disagreed on an op); the clients' handles say which";
    }
    return cs;
  }
  cs.matched = h.ops_matched.load();
  cs.completed = h.ops_completed.load();
  cs.failed = h.ops_failed.load();
  cs.aborted = c.seg.aborted();
  if (c.seg.aborted()) cs.abort_reason = c.seg.AbortStatus().message();
  return cs;
}

RegistryStats Registry::Stats() {
  MutexLock lock(&mu_);
  RegistryStats out;
  out.sessions = sessions_.size();
  for (auto& [id, s] : sessions_) out.buffers += s->buffers.size();
  out.buffer_bytes = buffer_bytes_;
  out.draining = draining_.load();
  for (auto& [id, c] : comms_) out.communicators.push_back(CommStatsOf(*c));
  out.recently_closed.assign(recently_closed_.begin(), recently_closed_.end());
  return out;
}

}  // namespace collectived::daemon

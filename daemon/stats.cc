// The registry's counters as plain structs (daemon/stats.h); the service
// turns them into GetStatsResponse.
#include "daemon/registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

#include "daemon/registry_state.h"
#include "ring/wait.h"

namespace collectived::daemon {

namespace {

// The upper bound (us) of the bucket holding quantile q of a histogram.
double Quantile(const uint64_t* buckets, uint64_t total, double q) {
  const auto rank = static_cast<uint64_t>(q * static_cast<double>(total - 1)) + 1;
  uint64_t seen = 0;
  for (uint32_t k = 0; k < ring::kLatencyBuckets; ++k) {
    seen += buckets[k];
    if (seen >= rank) return static_cast<double>(uint64_t{1} << k);
  }
  return static_cast<double>(uint64_t{1} << (ring::kLatencyBuckets - 1));
}

// What `c` adds to the cumulative counters.
void AddCounters(const Comm& c, const CommStats& cs, MetricsTotals* t) {
  if (!c.formed) return;
  if (cs.aborted) {
    const std::string why = AbortClass(cs.abort_reason);
    t->communicators_aborted[why]++;
    if (cs.failed != 0) t->ops_failed_by_reason[why] += cs.failed;
  } else if (cs.failed != 0) {
    t->ops_failed_by_reason["op_error"] += cs.failed;
  }
  if (c.gpu) {
    t->gpu_ops_completed[c.mode] += cs.completed;
    return;
  }
  const ring::OpCounters& k = c.seg.header().counters;
  for (uint32_t kind = 0; kind < ring::kCountedKinds; ++kind) {
    for (uint32_t type = 0; type < ring::kCountedTypes; ++type) {
      MetricsTotals::Ops o;
      o.completed = k.completed[kind][type].load(std::memory_order_relaxed);
      o.failed = k.failed[kind][type].load(std::memory_order_relaxed);
      o.bytes = k.bytes[kind][type].load(std::memory_order_relaxed);
      if (o.completed == 0 && o.failed == 0) continue;
      MetricsTotals::Ops& sum = t->ops[{c.mode, static_cast<CollectiveKind>(kind), static_cast<DataType>(type)}];
      sum.completed += o.completed;
      sum.failed += o.failed;
      sum.bytes += o.bytes;
    }
  }
  auto& buckets = t->latency[c.mode];
  for (uint32_t b = 0; b < ring::kLatencyBuckets; ++b) buckets[b] += k.latency[b].load(std::memory_order_relaxed);
  t->latency_sum_ns[c.mode] += k.latency_sum_ns.load(std::memory_order_relaxed);
}

void AddTotals(const MetricsTotals& from, MetricsTotals* to) {
  for (const auto& [key, o] : from.ops) {
    auto& s = to->ops[key];
    s.completed += o.completed;
    s.failed += o.failed;
    s.bytes += o.bytes;
  }
  for (const auto& [mode, b] : from.latency) {
    auto& s = to->latency[mode];
    for (uint32_t k = 0; k < ring::kLatencyBuckets; ++k) s[k] += b[k];
  }
  for (const auto& [m, v] : from.latency_sum_ns) to->latency_sum_ns[m] += v;
  for (const auto& [m, v] : from.gpu_ops_completed) to->gpu_ops_completed[m] += v;
  for (const auto& [m, v] : from.communicators_aborted) to->communicators_aborted[m] += v;
  for (const auto& [m, v] : from.ops_failed_by_reason) to->ops_failed_by_reason[m] += v;
}

}  // namespace

std::string AbortClass(const std::string& reason) {
  if (reason.empty()) return "";
  auto has = [&](const char* s) { return reason.find(s) != std::string::npos; };
  if (has("aborted the communicator")) return "abort_call";
  if (has(" left: ") || has("did not post")) return "member_left";
  if (has("node ") && (has("lost") || has("unreachable"))) return "node_lost";
  if (has("longer than") || has("deadline") || has("timed out")) return "deadline";
  if (has("different op") || has("disagree") || has("mismatch")) return "mismatch";
  return "other";
}

CommStats CommStatsOf(const Comm& c) {
  CommStats cs;
  cs.comm_id = c.id;
  cs.key = c.key;
  cs.owner_uid = c.owner.uid;
  cs.world_size = c.world_size;
  cs.global_world_size = c.global_world;
  cs.mode = c.mode;
  cs.recv_id = c.recv_id;
  if (c.exchange) {
    cs.nodes = c.exchange->plan().nodes;
    cs.comm_tag = c.exchange->plan().comm_tag;
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
  // Daemon-executed GPU communicators: the executor times each handoff.
  if (c.gpu_executor) cs.gpu_handoff_us_mean = c.gpu_executor->handoff_us_mean();
  if (c.gpu && c.mode == ExecutionMode::kClient) {
    // The kernels keep these counts in device memory (each replay of a
    // captured op takes its index there); one small copy reads them.
    // Daemon-executed ops go through the segment's ring, counted above: the
    // window's words stay 0 for them.
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
  uint64_t buckets[ring::kLatencyBuckets];
  for (uint32_t k = 0; k < ring::kLatencyBuckets; ++k) {
    buckets[k] = h.counters.latency[k].load(std::memory_order_relaxed);
    cs.latency_count += buckets[k];
  }
  if (cs.latency_count != 0) {
    cs.latency_p50_us = Quantile(buckets, cs.latency_count, 0.50);
    cs.latency_p90_us = Quantile(buckets, cs.latency_count, 0.90);
    cs.latency_p99_us = Quantile(buckets, cs.latency_count, 0.99);
  }
  return cs;
}

// Stall fields (set by the inspector) on top of the counters.
CommStats CommStatsWithStall(const Comm& c, int64_t now, uint32_t threshold_ms) {
  CommStats cs = CommStatsOf(c);
  if (c.stall_op != UINT64_MAX && threshold_ms != 0 &&
      now - c.stall_since_ns >= static_cast<int64_t>(threshold_ms) * 1000000) {
    cs.stalled = true;
    cs.stalled_op = c.stall_op;
    cs.stalled_ms = static_cast<uint64_t>((now - c.stall_since_ns) / 1000000);
    for (uint32_t r : c.stall_missing) cs.missing_ranks.push_back(c.exchange ? c.exchange->global_rank(r) : r);
    if (cs.missing_ranks.empty()) {
      cs.stall_note = "every rank of this node posted it: it waits for the other nodes' ranks (nodes";
      for (uint32_t n : cs.nodes) cs.stall_note += " " + std::to_string(n);
      cs.stall_note += ")";
    } else {
      cs.stall_note = "waits for rank";
      cs.stall_note += cs.missing_ranks.size() > 1 ? "s" : "";
      for (size_t i = 0; i < cs.missing_ranks.size(); ++i) {
        cs.stall_note += (i ? ", " : " ") + std::to_string(cs.missing_ranks[i]);
      }
      cs.stall_note += c.exchange ? " on this node" : "";
    }
  }
  return cs;
}

void Registry::InspectStallsLocked(int64_t now) {
  if (config_.stall_threshold_ms == 0) return;
  for (auto& [id, cp] : comms_) {
    Comm& c = *cp;
    if (!c.formed || c.seg.aborted()) {
      c.stall_op = UINT64_MAX;
      continue;
    }
    // Posted counts per rank: the segment's (the GPU's own when the kernels take indices on the device).
    std::vector<uint64_t> posted(c.world_size), completed(c.world_size);
    for (uint32_t r = 0; r < c.world_size; ++r) {
      posted[r] = c.seg.control(r).next_index.value.load(std::memory_order_acquire);
      completed[r] = c.seg.control(r).completed.value.load(std::memory_order_acquire);
    }
    if (c.gpu && c.gpu_memory && c.mode == ExecutionMode::kClient) {  // as CommStatsOf counts them
      GpuCommMemory::Counts counts;
      if (c.gpu_memory->ReadCounts(c.world_size, &counts).ok()) {
        for (uint32_t r = 0; r < c.world_size; ++r) {
          posted[r] = counts.posted[r];
          completed[r] = counts.completed[r];
        }
      }
    }
    const uint64_t lo = *std::min_element(posted.begin(), posted.end());
    const uint64_t hi = *std::max_element(posted.begin(), posted.end());
    const uint64_t done = *std::min_element(completed.begin(), completed.end());
    // The oldest op not done everywhere: ranks that have not posted it are
    // missing; if all posted it (across nodes), it waits for other nodes.
    uint64_t op = UINT64_MAX;
    std::vector<uint32_t> missing;
    if (hi > lo) {
      op = lo;
      for (uint32_t r = 0; r < c.world_size; ++r) {
        if (posted[r] <= lo) missing.push_back(r);
      }
    } else if (c.exchange && done < lo) {
      op = done;
    }
    if (op != c.stall_op || missing != c.stall_missing) {
      c.stall_op = op;
      c.stall_since_ns = now;
      c.stall_logged = false;
      c.stall_missing = missing;
      continue;
    }
    if (op == UINT64_MAX || c.stall_logged) continue;
    const CommStats cs = CommStatsWithStall(c, now, config_.stall_threshold_ms);
    if (!cs.stalled) continue;
    spdlog::warn("stalled: communicator {} '{}' op {} has waited {} ms: {}", c.id, c.key, cs.stalled_op,
                 cs.stalled_ms, cs.stall_note);
    c.stall_logged = true;
  }
}

void Registry::RetireCountersLocked(const Comm& comm, const CommStats& closed) {
  AddCounters(comm, closed, &retired_);
}

MetricsSnapshot Registry::Metrics() {
  MutexLock lock(&mu_);
  MetricsSnapshot m;
  m.totals = retired_;
  const int64_t now = ring::NowNs();
  for (auto& [id, c] : comms_) {
    if (!c->formed) {
      ++m.communicators_forming;
      for (const auto& p : c->pending) m.joins_pending += p ? 1 : 0;
      continue;
    }
    ++m.communicators_formed;
    const CommStats cs = CommStatsWithStall(*c, now, config_.stall_threshold_ms);
    MetricsTotals live;
    AddCounters(*c, cs, &live);
    AddTotals(live, &m.totals);
    m.stalled_ops += cs.stalled ? 1 : 0;
    if (c->gpu) m.gpu_heap_bytes += c->gpu_heap_bytes * c->world_size;
  }
  m.sessions = sessions_.size();
  for (auto& [id, s] : sessions_) m.buffers += s->buffers.size();
  m.buffer_bytes = buffer_bytes_;
  m.buffer_bytes_limit = config_.max_buffer_bytes;
  m.gpu_heap_bytes_limit = config_.max_buffer_bytes;
  return m;
}

RegistryStats Registry::Stats() {
  MutexLock lock(&mu_);
  RegistryStats out;
  out.sessions = sessions_.size();
  for (auto& [id, s] : sessions_) out.buffers += s->buffers.size();
  out.buffer_bytes = buffer_bytes_;
  out.draining = draining_.load();
  const int64_t now = ring::NowNs();
  for (auto& [id, c] : comms_) out.communicators.push_back(CommStatsWithStall(*c, now, config_.stall_threshold_ms));
  out.recently_closed.assign(recently_closed_.begin(), recently_closed_.end());
  for (auto& [id, s] : sessions_) {
    SessionStats ss;
    ss.session_id = id;
    ss.uid = s->owner.uid;
    ss.pid = s->pid;
    ss.name = s->name;
    ss.age_ms = s->attached_ns != 0 ? static_cast<uint64_t>((now - s->attached_ns) / 1000000) : 0;
    ss.buffers = s->buffers.size();
    for (const auto& [bid, b] : s->buffers) ss.buffer_bytes += b.bytes;
    ss.memberships.assign(s->memberships.begin(), s->memberships.end());
    out.session_list.push_back(std::move(ss));
  }
  return out;
}

}  // namespace collectived::daemon

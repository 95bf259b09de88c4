#include "daemon/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <exception>

#include "daemon/registry.h"

namespace collectived::daemon {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::string Lower(const char* s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

MetricFamily Family(const char* name, const char* help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

ClientMetric Value(MetricType type, double v, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) m.counter.value = v;
  else m.gauge.value = v;
  return m;
}

}  // namespace

std::vector<MetricFamily> MetricFamilies(const MetricsSnapshot& s) {
  std::vector<MetricFamily> out;
  const MetricsTotals& t = s.totals;
  auto ops = [&](const char* name, const char* help, uint64_t MetricsTotals::Ops::*field) {
    MetricFamily f = Family(name, help, MetricType::Counter);
    for (const auto& [key, o] : t.ops) {
      const auto& [mode, kind, dtype] = key;
      f.metric.push_back(Value(MetricType::Counter, static_cast<double>(o.*field),
                               {{"mode", ExecutionModeName(mode)},
                                {"kind", Lower(CollectiveKindName(kind))},
                                {"dtype", Lower(DataTypeName(dtype))}}));
    }
    out.push_back(std::move(f));
  };
  ops("collectived_ops_completed_total", "Host collective ops completed, counted once per op (rank 0)",
      &MetricsTotals::Ops::completed);
  ops("collectived_ops_failed_total", "Host collective ops that ended with an error", &MetricsTotals::Ops::failed);
  ops("collectived_op_bytes_total", "Input bytes per rank of completed host ops", &MetricsTotals::Ops::bytes);

  MetricFamily lat = Family("collectived_op_latency_seconds",
                            "Host ops: time from rank 0's post to its completion", MetricType::Histogram);
  for (const auto& [mode, buckets] : t.latency) {
    ClientMetric m;
    m.label = {{"mode", ExecutionModeName(mode)}};
    uint64_t cumulative = 0;
    for (uint32_t k = 0; k < ring::kLatencyBuckets; ++k) {
      cumulative += buckets[k];
      ClientMetric::Bucket b;
      b.cumulative_count = cumulative;
      b.upper_bound = k + 1 == ring::kLatencyBuckets ? std::numeric_limits<double>::infinity()
                                                     : static_cast<double>(uint64_t{1} << k) * 1e-6;
      m.histogram.bucket.push_back(b);
    }
    m.histogram.sample_count = cumulative;
    auto sum = t.latency_sum_ns.find(mode);
    m.histogram.sample_sum = sum == t.latency_sum_ns.end() ? 0 : static_cast<double>(sum->second) * 1e-9;
    lat.metric.push_back(std::move(m));
  }
  out.push_back(std::move(lat));

  MetricFamily gpu = Family("collectived_gpu_ops_completed_total",
                            "GPU collective ops every rank completed (the kernels' counts)", MetricType::Counter);
  for (const auto& [mode, v] : t.gpu_ops_completed) {
    gpu.metric.push_back(Value(MetricType::Counter, static_cast<double>(v), {{"mode", ExecutionModeName(mode)}}));
  }
  out.push_back(std::move(gpu));

  auto by_reason = [&](const char* name, const char* help, const std::map<std::string, uint64_t>& m) {
    MetricFamily f = Family(name, help, MetricType::Counter);
    for (const auto& [reason, v] : m) f.metric.push_back(Value(MetricType::Counter, static_cast<double>(v), {{"reason", reason}}));
    out.push_back(std::move(f));
  };
  by_reason("collectived_communicators_aborted_total",
            "Communicators aborted, by reason (member_left, deadline, mismatch, node_lost, abort_call, other)",
            t.communicators_aborted);
  by_reason("collectived_ops_aborted_total", "Failed ops, by their communicator's abort reason (op_error: not aborted)",
            t.ops_failed_by_reason);

  auto gauge = [&](const char* name, const char* help, uint64_t v, std::vector<ClientMetric::Label> labels = {}) {
    MetricFamily f = Family(name, help, MetricType::Gauge);
    f.metric.push_back(Value(MetricType::Gauge, static_cast<double>(v), std::move(labels)));
    out.push_back(std::move(f));
  };
  gauge("collectived_sessions", "Client sessions attached", s.sessions);
  MetricFamily comms = Family("collectived_communicators", "Communicators, formed or still forming", MetricType::Gauge);
  comms.metric.push_back(Value(MetricType::Gauge, static_cast<double>(s.communicators_formed), {{"state", "formed"}}));
  comms.metric.push_back(Value(MetricType::Gauge, static_cast<double>(s.communicators_forming), {{"state", "forming"}}));
  out.push_back(std::move(comms));
  gauge("collectived_joins_pending", "Members waiting for their communicator to form", s.joins_pending);
  gauge("collectived_buffers", "Host buffers held by sessions", s.buffers);
  gauge("collectived_buffer_bytes", "Bytes of host buffers held by sessions", s.buffer_bytes);
  gauge("collectived_buffer_bytes_limit", "The daemon's budget for them (max-buffer-bytes)", s.buffer_bytes_limit);
  gauge("collectived_gpu_heap_bytes", "GPU communicators' symmetric heaps, every rank's", s.gpu_heap_bytes);
  gauge("collectived_gpu_heap_bytes_limit_per_rank", "The largest heap a rank may ask for (max-buffer-bytes)",
        s.gpu_heap_bytes_limit);
  gauge("collectived_stalled_ops", "Ops waiting on ranks longer than stall-threshold-ms", s.stalled_ops);
  return out;
}

class MetricsCollector : public prometheus::Collectable {
 public:
  explicit MetricsCollector(Registry* registry) : registry_(registry) {}
  std::vector<MetricFamily> Collect() const override { return MetricFamilies(registry_->Metrics()); }

 private:
  Registry* registry_;
};

Status MetricsServer::Start(const std::string& listen, Registry* registry, std::unique_ptr<MetricsServer>* out) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  try {
    // One worker thread: scrapes are rare, and each takes the registry's lock briefly.
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    return Status::InvalidArgument("metrics-listen '" + listen + "' cannot be served: " + e.what());
  }
  m->collector_ = std::make_shared<MetricsCollector>(registry);
  m->exposer_->RegisterCollectable(m->collector_);
  const std::vector<int> ports = m->exposer_->GetListeningPorts();
  m->port_ = ports.empty() ? 0 : ports[0];
  m->listen_ = listen;
  *out = std::move(m);
  return Status::Ok();
}

MetricsServer::~MetricsServer() {
  if (exposer_ && collector_) exposer_->RemoveCollectable(collector_);
  exposer_.reset();  // joins its threads: no scrape runs past here
}

}  // namespace collectived::daemon

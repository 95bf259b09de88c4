// Operating metrics in Prometheus's text format on an HTTP port
// (prometheus-cpp's pull exposer), off unless `metrics-listen` is set.
//
// Nothing is counted for it on the hot path beyond what the op protocol
// already keeps: rank 0's executor adds each host op to its communicator's
// ring::OpCounters (relaxed adds), GPU kernels count done ops in device
// memory. At each scrape the collector asks the registry for a snapshot
// (Registry::Metrics): gauges now, counters summed over live communicators
// and those that closed. Families (docs/operating.md lists them):
//   collectived_ops_completed_total, _ops_failed_total, _op_bytes_total
//       {mode, kind, dtype}  host communicators
//   collectived_op_latency_seconds {mode}  histogram, rank 0's post to its completion
//   collectived_gpu_ops_completed_total {mode}
//   collectived_communicators_aborted_total, _ops_aborted_total {reason}
//   collectived_sessions, _communicators {state}, _joins_pending, _buffers,
//   _buffer_bytes, _buffer_bytes_limit, _gpu_heap_bytes,
//   _gpu_heap_bytes_limit_per_rank, _stalled_ops
#ifndef COLLECTIVED_DAEMON_METRICS_H_
#define COLLECTIVED_DAEMON_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "collectived/status.h"
#include "daemon/stats.h"

namespace prometheus {
class Exposer;
struct MetricFamily;
}  // namespace prometheus

namespace collectived::daemon {

class Registry;
class MetricsCollector;

// The families of one snapshot (pure: unit-tested without a server).
std::vector<prometheus::MetricFamily> MetricFamilies(const MetricsSnapshot& m);

class MetricsServer {
 public:
  // Serves GET /metrics on `listen` (HOST:PORT; port 0 picks one). The
  // registry outlives the server. INVALID_ARGUMENT naming metrics-listen
  // for an address that cannot be bound.
  static Status Start(const std::string& listen, Registry* registry, std::unique_ptr<MetricsServer>* out);
  ~MetricsServer();
  int port() const { return port_; }
  const std::string& listen() const { return listen_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<MetricsCollector> collector_;
  std::string listen_;
  int port_ = 0;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_METRICS_H_

// The metrics families of a snapshot, rendered as Prometheus text.
#include "daemon/metrics.h"

#include <gtest/gtest.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

namespace collectived::daemon {
namespace {

std::string Render(const MetricsSnapshot& m) {
  return prometheus::TextSerializer().Serialize(MetricFamilies(m));
}

TEST(Metrics, CountersCarryModeKindAndType) {
  MetricsSnapshot m;
  m.totals.ops[{ExecutionMode::kClient, CollectiveKind::kAllReduce, DataType::kFloat32}] = {7, 2, 7 * 4096};
  m.totals.ops[{ExecutionMode::kDaemon, CollectiveKind::kAllGather, DataType::kInt64}] = {3, 0, 24};
  m.sessions = 4;
  m.buffer_bytes = 1000;
  m.buffer_bytes_limit = 8000;
  m.communicators_formed = 2;
  m.communicators_forming = 1;
  const std::string text = Render(m);
  EXPECT_NE(text.find("collectived_ops_completed_total{mode=\"client\",kind=\"all_reduce\",dtype=\"float32\"} 7"),
            std::string::npos) << text;
  EXPECT_NE(text.find("collectived_ops_failed_total{mode=\"client\",kind=\"all_reduce\",dtype=\"float32\"} 2"),
            std::string::npos) << text;
  EXPECT_NE(text.find("collectived_op_bytes_total{mode=\"client\",kind=\"all_reduce\",dtype=\"float32\"} 28672"),
            std::string::npos) << text;
  EXPECT_NE(text.find("collectived_ops_completed_total{mode=\"daemon\",kind=\"all_gather\",dtype=\"int64\"} 3"),
            std::string::npos) << text;
  EXPECT_NE(text.find("collectived_sessions 4"), std::string::npos) << text;
  EXPECT_NE(text.find("collectived_buffer_bytes_limit 8000"), std::string::npos) << text;
  EXPECT_NE(text.find("collectived_communicators{state=\"forming\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE collectived_ops_completed_total counter"), std::string::npos) << text;
}

TEST(Metrics, LatencyIsACumulativeHistogramInSeconds) {
  MetricsSnapshot m;
  auto& b = m.totals.latency[ExecutionMode::kClient];
  b.fill(0);
  b[3] = 5;   // under 8 us
  b[10] = 2;  // under 1024 us
  m.totals.latency_sum_ns[ExecutionMode::kClient] = 2'000'000;
  const std::string text = Render(m);
  EXPECT_NE(text.find("# TYPE collectived_op_latency_seconds histogram"), std::string::npos) << text;
  EXPECT_NE(text.find("collectived_op_latency_seconds_bucket{mode=\"client\",le=\"4e-06\"} 0"), std::string::npos)
      << text;
  EXPECT_NE(text.find("collectived_op_latency_seconds_bucket{mode=\"client\",le=\"8e-06\"} 5"), std::string::npos)
      << text;
  EXPECT_NE(text.find("collectived_op_latency_seconds_bucket{mode=\"client\",le=\"+Inf\"} 7"), std::string::npos)
      << text;
  EXPECT_NE(text.find("collectived_op_latency_seconds_count{mode=\"client\"} 7"), std::string::npos) << text;
  EXPECT_NE(text.find("collectived_op_latency_seconds_sum{mode=\"client\"} 0.002"), std::string::npos) << text;
}

TEST(Metrics, AbortReasonsFallIntoClasses) {
  EXPECT_EQ(AbortClass(""), "");
  EXPECT_EQ(AbortClass("rank 1 left: session ended"), "member_left");
  EXPECT_EQ(AbortClass("rank 0 aborted the communicator: ncclCommAbort"), "abort_call");
  EXPECT_EQ(AbortClass("node 2 lost: heartbeat silent"), "node_lost");
  EXPECT_EQ(AbortClass("a GPU collective waited longer than the op timeout"), "deadline");
  EXPECT_EQ(AbortClass("something else"), "other");
  MetricsSnapshot m;
  m.totals.communicators_aborted["member_left"] = 2;
  EXPECT_NE(Render(m).find("collectived_communicators_aborted_total{reason=\"member_left\"} 2"), std::string::npos);
}

}  // namespace
}  // namespace collectived::daemon

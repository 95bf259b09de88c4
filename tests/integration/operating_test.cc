// Operating a shared node (issue 20): the Prometheus endpoint scraped with a
// real HTTP client (curl) as ops run, the stall inspector, the session list,
// and SIGHUP reloading the log level and the metrics setting without
// dropping sessions.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/daemon_harness.h"
#include "tests/support/exact_data.h"

namespace collectived {
namespace {

using testing::Daemon;
using testing::Process;

// The port the daemon says its metrics listen on (the last one, after reloads).
int MetricsPort(const Daemon& d) {
  for (int i = 0; i < 200; ++i) {
    const std::string log = d.Log();
    const size_t at = log.rfind("/metrics (port ");
    if (at != std::string::npos) return std::stoi(log.substr(at + 15));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

// GET /metrics with curl; "" when it fails.
std::string Scrape(const Daemon& d, int port) {
  Process p({"/usr/bin/curl", "-sS", "--max-time", "5", "http://127.0.0.1:" + std::to_string(port) + "/metrics"},
            d.dir() + "/scrape.txt");
  return p.Wait(10000) == 0 ? p.Output() : "";
}

// The value of one sample line (name with its labels, exactly); -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

std::string Ctl(const Daemon& d, std::vector<std::string> args) {
  std::vector<std::string> argv = {COLLECTIVECTL_BIN, "--socket", d.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv, d.dir() + "/ctl.log");
  p.Wait(10000);
  return p.Output();
}

std::unique_ptr<Communicator> JoinComm(Client& c, const std::string& key, uint32_t world, uint32_t rank,
                                       ExecutionMode mode = ExecutionMode::kClient) {
  std::unique_ptr<Communicator> comm;
  Status s = c.CreateCommunicator(testing::CommOptions(key, world, rank, mode), &comm);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return comm;
}

// Every rank runs fn(rank, its client, its communicator) on its own thread.
void Ranks(std::vector<std::unique_ptr<Client>>& clients, const std::string& key, ExecutionMode mode,
           const std::function<void(uint32_t, Client&, Communicator&)>& fn) {
  std::vector<std::thread> t;
  const auto n = static_cast<uint32_t>(clients.size());
  for (uint32_t r = 0; r < n; ++r) {
    t.emplace_back([&, r] {
      auto comm = JoinComm(*clients[r], key, n, r, mode);
      if (comm) fn(r, *clients[r], *comm);
    });
  }
  for (auto& x : t) x.join();
}

void AllReduces(uint32_t r, Client& c, Communicator& comm, int ops) {
  Buffer b;
  ASSERT_TRUE(c.AllocBuffer(4096, &b).ok());
  for (int i = 0; i < ops; ++i) {
    testing::FillInput(DataType::kFloat32, ReduceOp::kSum, r, i, b.data(), 1024);
    Handle h;
    ASSERT_TRUE(comm.AllReduce(b, b, 1024, DataType::kFloat32, ReduceOp::kSum, &h).ok());
    ASSERT_TRUE(h.Wait().ok());
    EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 2, i, b.data(), 1024), 0u);
  }
}

TEST(OperatingTest, MetricsMoveAsOpsRunAndOutliveTheirCommunicators) {
  Daemon d({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(d.ready()) << d.Log();
  const int port = MetricsPort(d);
  ASSERT_GT(port, 0) << d.Log();
  const std::string before = Scrape(d, port);
  ASSERT_NE(before, "") << d.Log();
  EXPECT_EQ(Sample(before, "collectived_sessions"), 0) << before;
  const std::string reduce_series = "collectived_ops_completed_total{mode=\"client\",kind=\"all_reduce\",dtype=\"float32\"}";
  EXPECT_EQ(Sample(before, reduce_series), -1) << before;  // the negative control: nothing ran yet
  std::vector<std::unique_ptr<Client>> clients;
  for (int r = 0; r < 2; ++r) clients.push_back(d.Connect("rank" + std::to_string(r)));
  Ranks(clients, "metrics-client", ExecutionMode::kClient, [](uint32_t r, Client& c, Communicator& comm) {
    AllReduces(r, c, comm, 5);
  });
  Ranks(clients, "metrics-daemon", ExecutionMode::kDaemon, [](uint32_t r, Client& c, Communicator& comm) {
    Buffer in, out;
    ASSERT_TRUE(c.AllocBuffer(256 * 4, &in).ok());
    ASSERT_TRUE(c.AllocBuffer(512 * 4, &out).ok());
    for (int i = 0; i < 3; ++i) {
      testing::FillInput(DataType::kInt32, ReduceOp::kUnspecified, r, i, in.data(), 256);
      Handle h;
      ASSERT_TRUE(comm.AllGather(in, out, 256, DataType::kInt32, &h).ok());
      ASSERT_TRUE(h.Wait().ok());
    }
  });
  // Both communicators closed: their counts stay.
  const std::string after = Scrape(d, port);
  EXPECT_EQ(Sample(after, reduce_series), 5) << after;
  EXPECT_EQ(Sample(after, "collectived_op_bytes_total{mode=\"client\",kind=\"all_reduce\",dtype=\"float32\"}"), 5 * 4096);
  EXPECT_EQ(Sample(after, "collectived_ops_completed_total{mode=\"daemon\",kind=\"all_gather\",dtype=\"int32\"}"), 3)
      << after;
  EXPECT_EQ(Sample(after, "collectived_op_latency_seconds_count{mode=\"client\"}"), 5) << after;
  EXPECT_GT(Sample(after, "collectived_op_latency_seconds_sum{mode=\"client\"}"), 0) << after;
  EXPECT_EQ(Sample(after, "collectived_sessions"), 2) << after;
  EXPECT_EQ(Sample(after, "collectived_buffers"), 0) << after;  // freed as the threads ended
  // An aborted communicator counts by its reason.
  // Rank 1 stays until it sees the abort: had it left first, its clean
  // leave would be the communicator's end, and rank 0's abort a no-op.
  Ranks(clients, "metrics-abort", ExecutionMode::kClient, [](uint32_t r, Client&, Communicator& comm) {
    if (r == 0) {
      EXPECT_TRUE(comm.Abort("an operator's test").ok());
      return;
    }
    for (int i = 0; i < 500 && comm.AsyncError().ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(comm.AsyncError().ok());
  });
  clients.clear();
  std::string last;
  for (int i = 0; i < 100; ++i) {
    last = Scrape(d, port);
    if (Sample(last, "collectived_sessions") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Sample(last, "collectived_sessions"), 0) << last;
  EXPECT_EQ(Sample(last, "collectived_communicators_aborted_total{reason=\"abort_call\"}"), 1) << last;
  EXPECT_EQ(Sample(last, reduce_series), 5) << last;
}

TEST(OperatingTest, AStalledOpNamesTheMissingRankInTheLogStatusAndMetrics) {
  Daemon d({"--stall-threshold-ms", "300", "--metrics-listen", "127.0.0.1:0", "--op-timeout-ms", "20000"});
  ASSERT_TRUE(d.ready()) << d.Log();
  const int port = MetricsPort(d);
  std::vector<std::unique_ptr<Client>> clients;
  for (int r = 0; r < 3; ++r) clients.push_back(d.Connect("stall-rank" + std::to_string(r)));
  Ranks(clients, "stall", ExecutionMode::kClient, [&](uint32_t r, Client& c, Communicator& comm) {
    // Ranks 0 and 1 post at once; rank 2 only after the inspector saw the stall.
    if (r == 2) {
      std::string status;
      for (int i = 0; i < 100 && status.find("STALLED") == std::string::npos; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        status = Ctl(d, {"status"});
      }
      EXPECT_NE(status.find("STALLED: op 0 has waited"), std::string::npos) << status;
      EXPECT_NE(status.find("waits for rank 2"), std::string::npos) << status;
      const std::string json = Ctl(d, {"-o", "json", "stats"});
      EXPECT_NE(json.find("\"stalled\":true,\"stalled_op\":0"), std::string::npos) << json;
      EXPECT_NE(json.find("\"missing_ranks\":[2]"), std::string::npos) << json;
      EXPECT_EQ(Sample(Scrape(d, port), "collectived_stalled_ops"), 1);
      EXPECT_NE(d.Log().find("stalled: communicator"), std::string::npos) << d.Log();
      EXPECT_NE(d.Log().find("waits for rank 2"), std::string::npos) << d.Log();
    }
    Buffer b;
    ASSERT_TRUE(c.AllocBuffer(4096, &b).ok());
    testing::FillInput(DataType::kFloat32, ReduceOp::kSum, r, 1, b.data(), 1024);
    Handle h;
    ASSERT_TRUE(comm.AllReduce(b, b, 1024, DataType::kFloat32, ReduceOp::kSum, &h).ok());
    ASSERT_TRUE(h.Wait().ok());
    EXPECT_EQ(testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 3, 1, b.data(), 1024), 0u);
    // Once every rank posted, the stall is gone (and latency is on record).
    if (r == 0) {
      std::string status;
      for (int i = 0; i < 40; ++i) {
        status = Ctl(d, {"status"});
        if (status.find("STALLED") == std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      EXPECT_EQ(status.find("STALLED"), std::string::npos) << status;
      EXPECT_NE(status.find("latency p50 <"), std::string::npos) << status;
    }
  });
}

TEST(OperatingTest, SessionsAreListedWithUidPidNameCommunicatorsAndBuffers) {
  Daemon d;
  ASSERT_TRUE(d.ready()) << d.Log();
  auto a = d.Connect("trainer-a");
  auto b = d.Connect("trainer-b");
  Buffer held;
  ASSERT_TRUE(a->AllocBuffer(8192, &held).ok());
  std::unique_ptr<Communicator> ca, cb;
  std::thread t([&] { cb = JoinComm(*b, "listed", 2, 1); });
  ca = JoinComm(*a, "listed", 2, 0);
  t.join();
  ASSERT_TRUE(ca && cb);
  const std::string table = Ctl(d, {"sessions"});
  const std::string pid = std::to_string(getpid()), uid = std::to_string(getuid());
  const std::string id = std::to_string(ca->id());
  EXPECT_TRUE(std::regex_search(table, std::regex("\\n\\d+ +" + uid + " +" + pid + " +trainer-a .* 1 +8192  " + id + ":0")))
      << table;
  EXPECT_TRUE(std::regex_search(table, std::regex("trainer-b .* 0 +0  " + id + ":1"))) << table;
  const std::string json = Ctl(d, {"-o", "json", "sessions"});
  EXPECT_NE(json.find("\"name\":\"trainer-a\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"communicators\":[{\"comm_id\":" + id + ",\"rank\":0}]"), std::string::npos) << json;
}

TEST(OperatingTest, SighupReloadsTheLogLevelAndMetricsWithoutDroppingSessions) {
  testing::TempDir dir;
  const std::string conf = dir.path() + "/collectived.toml";
  std::ofstream(conf) << "log-level = \"info\"\n";
  // The harness names --log-level on the command line, which would outrank
  // the file: a shell drops it ($3 $4) and keeps the socket and the config.
  Daemon d({"--config", conf}, {"/bin/sh", "-c", "exec \"$0\" \"$1\" \"$2\" \"$5\" \"$6\""});
  ASSERT_TRUE(d.ready()) << d.Log();
  auto c = d.Connect("survivor");
  auto comm = JoinComm(*c, "hup", 1, 0);
  ASSERT_TRUE(comm);
  auto one_op = [&] {
    Buffer b;
    if (!c->AllocBuffer(64, &b).ok()) return false;
    testing::FillInput(DataType::kFloat32, ReduceOp::kSum, 0, 3, b.data(), 16);
    Handle h;
    return comm->AllReduce(b, b, 16, DataType::kFloat32, ReduceOp::kSum, &h).ok() && h.Wait().ok() &&
           testing::CountWrongAllReduce(DataType::kFloat32, ReduceOp::kSum, 1, 3, b.data(), 16) == 0;
  };
  ASSERT_TRUE(one_op());
  EXPECT_EQ(d.Log().find("/metrics (port"), std::string::npos);  // off at start
  // A communicator's close is logged at info: whether it shows says the level.
  auto open_and_close = [&](const std::string& key) { JoinComm(*c, key, 1, 0); };
  std::ofstream(conf) << "log-level = \"warn\"\nmetrics-listen = \"127.0.0.1:0\"\n";
  kill(d.process().pid(), SIGHUP);
  for (int i = 0; i < 100 && d.Log().find("SIGHUP: reloaded") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(d.Log().find("SIGHUP: reloaded: log level warn, metrics http://127.0.0.1:0/metrics (port "), std::string::npos) << d.Log();
  const int port = MetricsPort(d);
  ASSERT_GT(port, 0) << d.Log();
  EXPECT_EQ(Sample(Scrape(d, port), "collectived_sessions"), 1);
  EXPECT_TRUE(one_op());  // the session and its communicator went on
  open_and_close("quiet-comm");
  // A file that does not parse (a misspelt key) changes nothing.
  std::ofstream(conf) << "log-level = \"info\"\nmetrics-lsiten = \"127.0.0.1:1\"\n";
  kill(d.process().pid(), SIGHUP);
  for (int i = 0; i < 100 && d.Log().find("does not parse") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(d.Log().find("SIGHUP: the configuration does not parse, nothing changed"), std::string::npos) << d.Log();
  EXPECT_EQ(Sample(Scrape(d, port), "collectived_sessions"), 1);
  // Metrics off again.
  std::ofstream(conf) << "log-level = \"info\"\n";
  kill(d.process().pid(), SIGHUP);
  for (int i = 0; i < 100 && d.Log().find("metrics off") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(d.Log().find("SIGHUP: reloaded: log level info, metrics off"), std::string::npos) << d.Log();
  EXPECT_EQ(Scrape(d, port), "");
  EXPECT_TRUE(one_op());
  open_and_close("loud-comm");
  for (int i = 0; i < 100 && d.Log().find("'loud-comm' closed") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(d.Log().find("'loud-comm' closed"), std::string::npos) << d.Log();   // info again
  EXPECT_EQ(d.Log().find("'quiet-comm' closed"), std::string::npos) << d.Log();  // was at warn
}

}  // namespace
}  // namespace collectived

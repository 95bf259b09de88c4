// collectivectl: operator CLI for collectived (status, health, version, stats, sessions, drain, cluster).
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "collectived/v1/collectived.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace v1 = collectived::v1;

namespace {

std::unique_ptr<grpc::ClientContext> Context(int timeout_ms) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  return ctx;
}

// grpc::StatusCode by name (the names of google.rpc.Code); a code this
// table does not know is printed as its number.
std::string CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                       "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
                                       "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int n = static_cast<int>(code);
  if (n >= 0 && n < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[n];
  return std::to_string(n);
}

int Fail(const char* what, const grpc::Status& s) {
  std::fprintf(stderr, "collectivectl: %s failed: %s: %s\n", what, CodeName(s.error_code()).c_str(),
               s.error_message().c_str());
  return 1;
}

// An unknown mode (a newer daemon's) is shown as its number, never as a known name.
std::string ModeName(v1::ExecutionMode m) {
  switch (m) {
    case v1::EXECUTION_MODE_UNSPECIFIED: return "default";
    case v1::EXECUTION_MODE_CLIENT: return "client";
    case v1::EXECUTION_MODE_DAEMON: return "daemon";
    default: return std::to_string(static_cast<int>(m));
  }
}

// A JSON string's contents (RFC 8259): quote, backslash and every control
// character escaped, so no daemon string can break or forge the output.
std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof(code), "\\u%04x", c);
      out += code;
    } else {
      out += ch;
    }
  }
  return out;
}

// "0,1,2": the nodes holding ranks of a communicator across nodes.
std::string NodeList(const v1::CommunicatorStats& c) {
  std::string out;
  for (uint32_t n : c.nodes()) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out;
}

std::string RankList(const v1::CommunicatorStats& c) {
  std::string out;
  for (uint32_t r : c.missing_ranks()) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

// `end` follows the JSON object (status embeds it in its own object).
void PrintStats(const v1::GetStatsResponse& r, bool json, const char* end = "\n") {
  if (json) {
    std::printf("{\"sessions\":%llu,\"buffers\":%llu,\"buffer_bytes\":%llu,\"draining\":%s,\"communicators\":[",
                (unsigned long long)r.sessions(), (unsigned long long)r.buffers(),
                (unsigned long long)r.buffer_bytes(), r.draining() ? "true" : "false");
    std::vector<const v1::CommunicatorStats*> all;
    for (const auto& c : r.communicators()) all.push_back(&c);
    for (const auto& c : r.recently_closed()) all.push_back(&c);
    for (size_t i = 0; i < all.size(); ++i) {
      const auto& c = *all[i];
      uint64_t plans = 0;
      for (const auto& rs : c.ranks()) plans += rs.captured_plans();
      std::printf("%s{\"id\":%llu,\"key\":\"%s\",\"world_size\":%u,\"mode\":\"%s\",\"posted\":%llu,\"matched\":%llu,"
                  "\"completed\":%llu,\"failed\":%llu,\"aborted\":%s,\"closed\":%s,\"abort_reason\":\"%s\","
                  "\"captured_plans\":%llu,\"gpu_handoff_us_mean\":%.1f,\"registered_buffers\":%llu,\"owner_uid\":%u,"
                  "\"key_hidden\":%s,\"global_world_size\":%u,\"nodes\":[%s],\"exchanges\":%llu,"
                  "\"exchange_ns\":%llu,\"exchange_bytes_sent\":%llu,\"latency_count\":%llu,"
                  "\"latency_p50_us\":%.0f,\"latency_p90_us\":%.0f,\"latency_p99_us\":%.0f,\"stalled\":%s,"
                  "\"stalled_op\":%llu,\"stalled_ms\":%llu,\"missing_ranks\":[%s],\"stall_note\":\"%s\"}",
                  i ? "," : "", (unsigned long long)c.comm_id(), JsonEscape(c.key()).c_str(), c.world_size(),
                  ModeName(c.mode()).c_str(), (unsigned long long)c.posted(), (unsigned long long)c.matched(),
                  (unsigned long long)c.completed(), (unsigned long long)c.failed(), c.aborted() ? "true" : "false",
                  c.closed() ? "true" : "false", JsonEscape(c.abort_reason()).c_str(), (unsigned long long)plans,
                  c.gpu_handoff_us_mean(), (unsigned long long)c.registered_buffers(), c.owner_uid(),
                  c.key_hidden() ? "true" : "false", c.global_world_size(), NodeList(c).c_str(),
                  (unsigned long long)c.exchanges(), (unsigned long long)c.exchange_ns(),
                  (unsigned long long)c.exchange_bytes_sent(), (unsigned long long)c.latency_count(),
                  c.latency_p50_us(), c.latency_p90_us(), c.latency_p99_us(), c.stalled() ? "true" : "false",
                  (unsigned long long)c.stalled_op(), (unsigned long long)c.stalled_ms(), RankList(c).c_str(),
                  JsonEscape(c.stall_note()).c_str());
    }
    std::printf("]}%s", end);
    return;
  }
  std::printf("sessions %llu, buffers %llu (%llu bytes)%s\n", (unsigned long long)r.sessions(),
              (unsigned long long)r.buffers(), (unsigned long long)r.buffer_bytes(),
              r.draining() ? ", DRAINING" : "");
  std::printf("%-6s %-24s %5s %-7s %10s %10s %10s %8s  %s\n", "id", "key", "ranks", "mode", "posted", "matched",
              "completed", "failed", "state");
  auto row = [](const v1::CommunicatorStats& c) {
    std::string state = c.closed() ? "closed" : c.aborted() ? "aborted: " + c.abort_reason() : "active";
    if (c.stalled()) {
      state = "STALLED: op " + std::to_string(c.stalled_op()) + " has waited " + std::to_string(c.stalled_ms()) +
              " ms; it " + c.stall_note();
    }
    if (c.latency_count() > 0) {  // bucket upper bounds
      state += " (latency p50 <" + std::to_string(static_cast<uint64_t>(c.latency_p50_us())) + " us, p90 <" +
               std::to_string(static_cast<uint64_t>(c.latency_p90_us())) + " us, p99 <" +
               std::to_string(static_cast<uint64_t>(c.latency_p99_us())) + " us)";
    }
    if (c.nodes_size() > 0) {  // across nodes: this node's ranks of all, and its exchanges
      state += " (" + std::to_string(c.world_size()) + " of " + std::to_string(c.global_world_size()) +
               " ranks here; nodes " + NodeList(c) + "; " + std::to_string(c.exchanges()) + " exchanges, " +
               std::to_string(c.exchange_bytes_sent() >> 20) + " MiB sent in " +
               std::to_string(c.exchange_ns() / 1000000) + " ms)";
    }
    // Another user's key is hidden from a caller who does not administer the daemon.
    const std::string key = c.key_hidden() ? "(uid " + std::to_string(c.owner_uid()) + ")" : c.key();
    std::printf("%-6llu %-24s %5u %-7s %10llu %10llu %10llu %8llu  %s\n", (unsigned long long)c.comm_id(),
                key.c_str(), c.world_size(), ModeName(c.mode()).c_str(), (unsigned long long)c.posted(),
                (unsigned long long)c.matched(), (unsigned long long)c.completed(), (unsigned long long)c.failed(),
                state.c_str());
  };
  for (const auto& c : r.communicators()) row(c);
  for (const auto& c : r.recently_closed()) row(c);
}

void PrintSessions(const v1::GetStatsResponse& r, bool json) {
  if (json) {
    std::printf("{\"sessions\":[");
    for (int i = 0; i < r.session_list_size(); ++i) {
      const auto& s = r.session_list(i);
      std::string comms;
      for (const auto& m : s.memberships()) {
        comms += (comms.empty() ? "" : ",") + std::string("{\"comm_id\":") + std::to_string(m.comm_id()) +
                 ",\"rank\":" + std::to_string(m.rank()) + "}";
      }
      std::printf("%s{\"id\":%llu,\"uid\":%u,\"pid\":%u,\"name\":\"%s\",\"age_ms\":%llu,\"buffers\":%llu,"
                  "\"buffer_bytes\":%llu,\"communicators\":[%s]}",
                  i ? "," : "", (unsigned long long)s.session_id(), s.uid(), s.pid(), JsonEscape(s.name()).c_str(),
                  (unsigned long long)s.age_ms(), (unsigned long long)s.buffers(),
                  (unsigned long long)s.buffer_bytes(), comms.c_str());
    }
    std::printf("]}\n");
    return;
  }
  std::printf("%-8s %-6s %-8s %-24s %10s %8s %12s  %s\n", "session", "uid", "pid", "name", "age", "buffers", "bytes",
              "communicators (id:rank)");
  for (const auto& s : r.session_list()) {
    std::string comms;
    for (const auto& m : s.memberships()) {
      comms += (comms.empty() ? "" : " ") + std::to_string(m.comm_id()) + ":" + std::to_string(m.rank());
    }
    std::printf("%-8llu %-6u %-8u %-24s %9llus %8llu %12llu  %s\n", (unsigned long long)s.session_id(), s.uid(),
                s.pid(), s.name().c_str(), (unsigned long long)(s.age_ms() / 1000), (unsigned long long)s.buffers(),
                (unsigned long long)s.buffer_bytes(), comms.empty() ? "-" : comms.c_str());
  }
}

// Lists are JSON arrays, every string escaped.
std::string VersionJson(const v1::GetVersionResponse& v) {
  auto array = [](const auto& items) {
    std::string out = "[";
    for (const auto& item : items) out += (out.size() > 1 ? ",\"" : "\"") + JsonEscape(item) + "\"";
    return out + "]";
  };
  return "{\"daemon_version\":\"" + JsonEscape(v.daemon_version()) + "\",\"api\":\"" +
         std::to_string(v.api_major()) + "." + std::to_string(v.api_minor()) + "\",\"backend\":\"" +
         JsonEscape(v.active_backend()) + "\",\"backends\":" + array(v.backends()) +
         ",\"capabilities\":" + array(v.capabilities()) +
         ",\"max_message_bytes\":" + std::to_string(v.max_message_bytes()) + ",\"ctl_version\":\"" +
         JsonEscape(COLLECTIVED_VERSION) + "\"}";
}

void PrintCluster(const v1::GetClusterResponse& r, bool json) {
  if (json) {
    std::printf("{\"mode\":\"%s\",\"self\":%u,\"refused_messages\":%llu,\"nodes\":[", JsonEscape(r.mode()).c_str(),
                r.self(), (unsigned long long)r.refused_messages());
    for (int i = 0; i < r.nodes_size(); ++i) {
      const auto& n = r.nodes(i);
      std::printf("%s{\"node\":%u,\"host\":\"%s\",\"epoch\":%llu,\"pid\":%d,\"state\":\"%s\","
                  "\"last_heartbeat_ms_ago\":%lld,\"lost_reason\":\"%s\"}",
                  i ? "," : "", n.node_id(), JsonEscape(n.host()).c_str(), (unsigned long long)n.epoch(), n.pid(),
                  JsonEscape(n.state()).c_str(), (long long)n.last_heartbeat_ms_ago(),
                  JsonEscape(n.lost_reason()).c_str());
    }
    std::printf("]}\n");
    return;
  }
  std::printf("cluster: %s, this daemon is node %u, %d nodes, %llu refused messages\n", r.mode().c_str(), r.self(),
              r.nodes_size(), (unsigned long long)r.refused_messages());
  std::printf("%-5s %-20s %-20s %-8s %-6s %-14s  %s\n", "node", "host", "epoch", "pid", "state", "heartbeat", "why lost");
  for (const auto& n : r.nodes()) {
    const std::string beat = n.node_id() == r.self() ? "(self)"
                             : n.last_heartbeat_ms_ago() < 0 ? "none yet"
                                                             : std::to_string(n.last_heartbeat_ms_ago()) + " ms ago";
    std::printf("%-5u %-20s %-20llu %-8d %-6s %-14s  %s\n", n.node_id(), n.host().c_str(),
                (unsigned long long)n.epoch(), n.pid(), n.state().c_str(), beat.c_str(), n.lost_reason().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"collectivectl: control collectived"};
  std::string socket = "/run/collectived/collectived.sock";
  std::string output = "table";
  int timeout_ms = 5000;
  app.add_option("--socket", socket, "daemon socket")->envname("COLLECTIVED_SOCKET")->capture_default_str();
  app.add_option("-o,--output", output, "table | json")->check(CLI::IsMember({"table", "json"}));
  app.add_option("--timeout-ms", timeout_ms, "deadline of each call")->capture_default_str();
  auto* status_cmd = app.add_subcommand("status", "version, health and communicators");
  auto* health_cmd = app.add_subcommand("health", "grpc.health.v1 check; exit 0 only when SERVING");
  auto* version_cmd = app.add_subcommand("version", "daemon and API versions, backends, capabilities");
  auto* stats_cmd = app.add_subcommand("stats", "per-communicator op counters, latency percentiles and stalls");
  auto* sessions_cmd = app.add_subcommand("sessions", "client sessions: uid, pid, name, communicators, buffers");
  auto* drain_cmd = app.add_subcommand("drain", "stop accepting new work");
  auto* cluster_cmd = app.add_subcommand("cluster", "every daemon of the cluster: node, epoch, state, last heartbeat");
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  const bool json = output == "json";
  // status -o json: one object, {"health": ..., "version": {...}, "stats": {...}}.
  const bool status_json = json && status_cmd->parsed();

  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = v1::CollectiveService::NewStub(channel);

  if (health_cmd->parsed() || status_cmd->parsed()) {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    auto ctx = Context(timeout_ms);
    grpc::Status s = health->Check(ctx.get(), req, &resp);
    if (!s.ok()) return Fail("health check", s);
    const char* name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()).c_str();
    if (health_cmd->parsed()) {
      if (json) std::printf("{\"status\":\"%s\"}\n", name);
      else std::printf("%s\n", name);
      return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
    }
    if (status_json) std::printf("{\"health\":\"%s\",", JsonEscape(name).c_str());
    if (!json) std::printf("health: %s\n", name);
  }
  if (version_cmd->parsed() || status_cmd->parsed()) {
    v1::GetVersionResponse v;
    auto ctx = Context(timeout_ms);
    grpc::Status s = stub->GetVersion(ctx.get(), v1::GetVersionRequest(), &v);
    if (!s.ok()) return Fail("GetVersion", s);
    std::string caps;
    for (const auto& c : v.capabilities()) caps += (caps.empty() ? "" : ",") + c;
    if (json && version_cmd->parsed()) {
      std::printf("%s\n", VersionJson(v).c_str());
    } else if (status_json) {
      std::printf("\"version\":%s,\"stats\":", VersionJson(v).c_str());
    } else if (!json) {
      std::printf("collectived %s, API v%u.%u, backend %s, max message %llu bytes (collectivectl %s)\n"
                  "capabilities: %s\n",
                  v.daemon_version().c_str(), v.api_major(), v.api_minor(), v.active_backend().c_str(),
                  (unsigned long long)v.max_message_bytes(), COLLECTIVED_VERSION, caps.c_str());
    }
    if (version_cmd->parsed()) return 0;
  }
  if (stats_cmd->parsed() || status_cmd->parsed() || sessions_cmd->parsed()) {
    v1::GetStatsResponse r;
    auto ctx = Context(timeout_ms);
    grpc::Status s = stub->GetStats(ctx.get(), v1::GetStatsRequest(), &r);
    if (!s.ok()) return Fail("GetStats", s);
    if (sessions_cmd->parsed()) {
      PrintSessions(r, json);
    } else {
      PrintStats(r, json, status_json ? "}\n" : "\n");
    }
    return 0;
  }
  if (cluster_cmd->parsed()) {
    v1::GetClusterResponse r;
    auto ctx = Context(timeout_ms);
    grpc::Status s = stub->GetCluster(ctx.get(), v1::GetClusterRequest(), &r);
    if (!s.ok()) return Fail("GetCluster", s);
    PrintCluster(r, json);
    return 0;
  }
  if (drain_cmd->parsed()) {
    v1::DrainResponse r;
    auto ctx = Context(timeout_ms);
    grpc::Status s = stub->Drain(ctx.get(), v1::DrainRequest(), &r);
    if (!s.ok()) return Fail("Drain", s);
    std::printf("draining\n");
    return 0;
  }
  return 0;
}

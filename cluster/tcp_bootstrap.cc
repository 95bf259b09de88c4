#include "cluster/tcp_bootstrap.h"

#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "cluster/node_record.h"
#include "ring/wait.h"

namespace collectived::cluster {
namespace {

constexpr uint32_t kHelloMagic = 0x4c484443;  // "CDHL"
constexpr int64_t kHelloTimeoutNs = 2'000'000'000;  // a connection must say who it is this fast

struct Hello {
  uint32_t magic;
  uint32_t nodes;
  uint64_t secret;
};

// Writes or reads exactly `len` bytes by `deadline_ns`.
Status Exchange(int fd, void* data, size_t len, bool write, int64_t deadline_ns) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    const int64_t left = deadline_ns - ring::NowNs();
    if (left <= 0) return Status::DeadlineExceeded("bootstrap connection too slow");
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (poll(&pfd, 1, static_cast<int>(left / 1000000 + 1)) <= 0) continue;
    const ssize_t n = write ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
    if (n == 0) return Status::Unavailable("bootstrap connection closed");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::Unavailable(std::string("bootstrap connection: ") + std::strerror(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status SendFrame(int fd, const std::string& bytes, int64_t deadline_ns) {
  uint32_t len = static_cast<uint32_t>(bytes.size());
  COLLECTIVED_RETURN_IF_ERROR(Exchange(fd, &len, sizeof(len), true, deadline_ns));
  return Exchange(fd, const_cast<char*>(bytes.data()), bytes.size(), true, deadline_ns);
}

Status RecvFrame(int fd, size_t max, int64_t deadline_ns, std::string* out) {
  uint32_t len = 0;
  COLLECTIVED_RETURN_IF_ERROR(Exchange(fd, &len, sizeof(len), false, deadline_ns));
  if (len > max) return Status::InvalidArgument("bootstrap frame of " + std::to_string(len) + " bytes");
  out->assign(len, '\0');
  return Exchange(fd, out->data(), len, false, deadline_ns);
}

Status Resolve(const std::string& address, addrinfo** out) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument("--coordinator must be HOST:PORT, got '" + address + "'");
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const int rc = getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, out);
  if (rc != 0) return Status::InvalidArgument("--coordinator " + address + ": " + gai_strerror(rc));
  return Status::Ok();
}

Status Coordinate(const NodeInfo& self, const CoordinatorOptions& o, std::vector<NodeInfo>* nodes) {
  addrinfo* ai = nullptr;
  COLLECTIVED_RETURN_IF_ERROR(Resolve(o.address, &ai));
  const int listen_fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = listen_fd >= 0 && bind(listen_fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(listen_fd, 64) == 0;
  const std::string why = std::strerror(errno);
  freeaddrinfo(ai);
  if (!bound) {
    if (listen_fd >= 0) close(listen_fd);
    return Status::Unavailable("coordinator cannot listen on " + o.address + ": " + why);
  }
  const int64_t deadline = ring::NowNs() + o.timeout_ns;
  std::map<uint32_t, std::pair<int, NodeInfo>> joined;  // node rank -> (connection, record)
  Status result = Status::Ok();
  while (joined.size() + 1 < o.nodes) {
    const int64_t left = deadline - ring::NowNs();
    if (left <= 0) {
      std::string missing;
      for (uint32_t k = 1; k < o.nodes; ++k) {
        if (!joined.count(k)) missing += (missing.empty() ? "" : ",") + std::to_string(k);
      }
      result = Status::DeadlineExceeded("cluster did not form: nodes " + missing + " never reached the coordinator");
      break;
    }
    pollfd pfd{listen_fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left / 1000000 + 1, 1000))) <= 0) continue;
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string hello_bytes, record;
    Hello h{};
    NodeInfo n;
    Status s = RecvFrame(fd, sizeof(Hello) + kMaxNodeRecord, ring::NowNs() + kHelloTimeoutNs, &hello_bytes);
    if (s.ok() && hello_bytes.size() < sizeof(Hello)) s = Status::InvalidArgument("short hello");
    if (s.ok()) {
      std::memcpy(&h, hello_bytes.data(), sizeof(h));
      if (h.magic != kHelloMagic || h.secret != o.secret) {
        s = Status::PermissionDenied("not a daemon of this cluster (wrong magic or secret)");
      } else if (h.nodes != o.nodes) {
        s = Status::InvalidArgument("it counts " + std::to_string(h.nodes) + " nodes, this coordinator " +
                                    std::to_string(o.nodes));
      } else {
        s = DecodeNode(hello_bytes.substr(sizeof(Hello)), &n);
      }
    }
    if (s.ok() && (n.node_id == 0 || n.node_id >= o.nodes || joined.count(n.node_id))) {
      s = Status::AlreadyExists("node rank " + std::to_string(n.node_id) + " is taken or out of range");
    }
    if (!s.ok()) {
      spdlog::warn("cluster coordinator: refused a connection: {}", s.ToString());
      close(fd);
      continue;
    }
    spdlog::info("cluster coordinator: node {} ({}, pid {}) joined", n.node_id, n.host, n.pid);
    joined[n.node_id] = {fd, std::move(n)};
  }
  close(listen_fd);
  if (result.ok()) {
    nodes->assign(1, self);
    for (auto& [rank, entry] : joined) nodes->push_back(entry.second);
    std::string table;
    for (const NodeInfo& n : *nodes) {
      const std::string r = EncodeNode(n);
      const uint32_t len = static_cast<uint32_t>(r.size());
      table.append(reinterpret_cast<const char*>(&len), sizeof(len));
      table += r;
    }
    for (auto& [rank, entry] : joined) {
      if (Status s = SendFrame(entry.first, table, ring::NowNs() + kHelloTimeoutNs); !s.ok()) {
        spdlog::warn("cluster coordinator: node {} did not take the table: {}", rank, s.ToString());
      }
    }
  }
  for (auto& [rank, entry] : joined) close(entry.first);
  return result;
}

Status Join(const NodeInfo& self, const CoordinatorOptions& o, std::vector<NodeInfo>* nodes) {
  const int64_t deadline = ring::NowNs() + o.timeout_ns;
  Hello h{kHelloMagic, o.nodes, o.secret};
  std::string hello(sizeof(h), '\0');
  std::memcpy(hello.data(), &h, sizeof(h));
  hello += EncodeNode(self);
  Status last = Status::Unavailable("no attempt");
  while (ring::NowNs() < deadline) {
    addrinfo* ai = nullptr;
    COLLECTIVED_RETURN_IF_ERROR(Resolve(o.address, &ai));
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool connected = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
    freeaddrinfo(ai);
    if (!connected) {  // the coordinator is not up yet
      if (fd >= 0) close(fd);
      last = Status::Unavailable("cannot reach the coordinator at " + o.address);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    std::string table;
    Status s = SendFrame(fd, hello, deadline);
    if (s.ok()) s = RecvFrame(fd, o.nodes * (kMaxNodeRecord + 4), deadline, &table);
    close(fd);
    if (!s.ok()) return Status(s.code(), "cluster coordinator at " + o.address + ": " + s.message());
    nodes->clear();
    for (size_t at = 0; at < table.size();) {
      uint32_t len = 0;
      if (table.size() - at < sizeof(len)) return Status::InvalidArgument("coordinator's table is cut short");
      std::memcpy(&len, table.data() + at, sizeof(len));
      at += sizeof(len);
      if (len > table.size() - at) return Status::InvalidArgument("coordinator's table is cut short");
      NodeInfo n;
      COLLECTIVED_RETURN_IF_ERROR(DecodeNode(table.substr(at, len), &n));
      at += len;
      if (n.node_id != nodes->size()) return Status::InvalidArgument("coordinator's table is out of order");
      nodes->push_back(std::move(n));
    }
    if (nodes->size() != o.nodes) return Status::InvalidArgument("coordinator's table has the wrong node count");
    return Status::Ok();
  }
  return Status::DeadlineExceeded("cluster did not form: " + last.message());
}

}  // namespace

Status CoordinatorBootstrap(const NodeInfo& self, const CoordinatorOptions& options, std::vector<NodeInfo>* nodes) {
  if (options.nodes == 0 || options.node_rank >= options.nodes) {
    return Status::InvalidArgument("--node-rank " + std::to_string(options.node_rank) + " is not below --nodes " +
                                   std::to_string(options.nodes));
  }
  NodeInfo me = self;
  me.node_id = options.node_rank;
  return options.node_rank == 0 ? Coordinate(me, options, nodes) : Join(me, options, nodes);
}

uint64_t SecretOf(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace collectived::cluster

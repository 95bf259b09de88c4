#include "cluster/tcp_bootstrap.h"

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
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

// A daemon's hello on a fresh coordinator connection: magic, secret and node
// count as configured, then its record.
Status ReadHello(int fd, const CoordinatorOptions& o, NodeInfo* n) {
  std::string bytes;
  COLLECTIVED_RETURN_IF_ERROR(RecvFrame(fd, sizeof(Hello) + kMaxNodeRecord, ring::NowNs() + kHelloTimeoutNs, &bytes));
  if (bytes.size() < sizeof(Hello)) return Status::InvalidArgument("short hello");
  Hello h{};
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kHelloMagic || h.secret != o.secret) {
    return Status::PermissionDenied("not a daemon of this cluster (wrong magic or secret)");
  }
  if (h.nodes != o.nodes) {
    return Status::InvalidArgument("it counts " + std::to_string(h.nodes) + " nodes, this coordinator " +
                                   std::to_string(o.nodes));
  }
  COLLECTIVED_RETURN_IF_ERROR(DecodeNode(bytes.substr(sizeof(Hello)), n));
  if (n->node_id == 0 || n->node_id >= o.nodes) {
    return Status::InvalidArgument("node rank " + std::to_string(n->node_id) + " is out of range");
  }
  return Status::Ok();
}

std::string EncodeTable(const std::vector<NodeInfo>& nodes) {
  std::string table;
  for (const NodeInfo& n : nodes) {
    const std::string r = EncodeNode(n);
    const uint32_t len = static_cast<uint32_t>(r.size());
    table.append(reinterpret_cast<const char*>(&len), sizeof(len));
    table += r;
  }
  return table;
}

Status Coordinate(const NodeInfo& self, const CoordinatorOptions& o, std::vector<NodeInfo>* nodes, int* kept_fd) {
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
    NodeInfo n;
    Status s = ReadHello(fd, o, &n);
    if (s.ok() && joined.count(n.node_id)) {
      s = Status::AlreadyExists("node rank " + std::to_string(n.node_id) + " is taken");
    }
    if (!s.ok()) {
      spdlog::warn("cluster coordinator: refused a connection: {}", s.ToString());
      close(fd);
      continue;
    }
    spdlog::info("cluster coordinator: node {} ({}, pid {}) joined", n.node_id, n.host, n.pid);
    joined[n.node_id] = {fd, std::move(n)};
  }
  if (result.ok()) {
    nodes->assign(1, self);
    for (auto& [rank, entry] : joined) nodes->push_back(entry.second);
    const std::string table = EncodeTable(*nodes);
    for (auto& [rank, entry] : joined) {
      if (Status s = SendFrame(entry.first, table, ring::NowNs() + kHelloTimeoutNs); !s.ok()) {
        spdlog::warn("cluster coordinator: node {} did not take the table: {}", rank, s.ToString());
      }
    }
  }
  for (auto& [rank, entry] : joined) close(entry.first);
  if (result.ok()) {
    *kept_fd = listen_fd;  // for RejoinService
  } else {
    close(listen_fd);
  }
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
    if (!s.ok()) {
      // Refused (say, a restarted daemon whose old incarnation the
      // coordinator does not see lost yet): try again until the deadline.
      last = Status(s.code(), "cluster coordinator at " + o.address + ": " + s.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
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

Status CoordinatorBootstrap(const NodeInfo& self, const CoordinatorOptions& options, std::vector<NodeInfo>* nodes,
                            int* listen_fd) {
  *listen_fd = -1;
  if (options.nodes == 0 || options.node_rank >= options.nodes) {
    return Status::InvalidArgument("--node-rank " + std::to_string(options.node_rank) + " is not below --nodes " +
                                   std::to_string(options.nodes));
  }
  NodeInfo me = self;
  me.node_id = options.node_rank;
  return options.node_rank == 0 ? Coordinate(me, options, nodes, listen_fd) : Join(me, options, nodes);
}

RejoinService::RejoinService(int listen_fd, CoordinatorOptions options, std::vector<NodeInfo> table,
                             std::function<bool(uint32_t)> is_lost, std::function<void(const NodeInfo&)> rejoined)
    : listen_fd_(listen_fd),
      options_(std::move(options)),
      table_(std::move(table)),
      is_lost_(std::move(is_lost)),
      rejoined_(std::move(rejoined)) {}

RejoinService::~RejoinService() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
}

void RejoinService::Start() { thread_ = std::thread([this] { Loop(); }); }

void RejoinService::Loop() {
  pthread_setname_np(pthread_self(), "cd-rejoin");
  while (!stop_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;  // 100 ms: how soon the destructor is noticed
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    NodeInfo n;
    Status s = ReadHello(fd, options_, &n);
    if (s.ok() && !is_lost_(n.node_id)) {
      s = Status::AlreadyExists("node " + std::to_string(n.node_id) + " is alive (epoch " +
                                std::to_string(table_[n.node_id].epoch) + ")");
    }
    if (s.ok()) {
      table_[n.node_id] = n;
      s = SendFrame(fd, EncodeTable(table_), ring::NowNs() + kHelloTimeoutNs);
    }
    close(fd);
    if (!s.ok()) {
      spdlog::warn("cluster coordinator: refused a rejoin: {}", s.ToString());
      continue;
    }
    spdlog::info("cluster coordinator: node {} ({}, pid {}) rejoined as epoch {}", n.node_id, n.host, n.pid, n.epoch);
    rejoined_(n);
  }
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

#include "cluster/node_record.h"

#include <cstdint>
#include <cstring>

namespace collectived::cluster {
namespace {

struct Fixed {
  uint64_t epoch;
  uint32_t node_id;
  int32_t pid;
  uint32_t host_bytes;
  uint32_t address_bytes;
};

}  // namespace

std::string EncodeNode(const NodeInfo& node) {
  Fixed f{node.epoch, node.node_id, node.pid, static_cast<uint32_t>(node.host.size()),
          static_cast<uint32_t>(node.worker_address.size())};
  std::string out(sizeof(f), '\0');
  std::memcpy(out.data(), &f, sizeof(f));
  return out + node.host + node.worker_address;
}

Status DecodeNode(const std::string& bytes, NodeInfo* out) {
  Fixed f{};
  if (bytes.size() < sizeof(f) || bytes.size() > kMaxNodeRecord) {
    return Status::InvalidArgument("node record of " + std::to_string(bytes.size()) + " bytes");
  }
  std::memcpy(&f, bytes.data(), sizeof(f));
  if (sizeof(f) + uint64_t{f.host_bytes} + f.address_bytes != bytes.size() || f.host_bytes > 255) {
    return Status::InvalidArgument("node record's lengths do not add up");
  }
  NodeInfo n;
  n.epoch = f.epoch;
  n.node_id = f.node_id;
  n.pid = f.pid;
  n.host.assign(bytes.data() + sizeof(f), f.host_bytes);
  n.worker_address.assign(bytes.data() + sizeof(f) + f.host_bytes, f.address_bytes);
  *out = std::move(n);
  return Status::Ok();
}

}  // namespace collectived::cluster

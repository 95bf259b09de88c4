// What daemons tell each other while a communicator across nodes forms
// (docs/multinode.md): each node announces the ranks of a key that joined
// there; the node holding rank 0 decides and sends the plan (or the
// failure) to every node involved. Decoding checks every length and value
// against what arrived: the bytes come from the network.
#ifndef COLLECTIVED_CLUSTER_COMM_MESSAGES_H_
#define COLLECTIVED_CLUSTER_COMM_MESSAGES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/node_exchange.h"
#include "collectived/status.h"

namespace collectived::cluster {

// The members of `key` joined on the sending node (none: all withdrew), and
// what every member must agree on.
struct JoinAnnounce {
  std::string key;
  uint32_t world = 0;
  uint32_t mode = 0;  // ExecutionMode the members asked for
  uint32_t op_timeout_ms = 0;
  bool gpu = false;
  uint64_t gpu_heap_bytes = 0;
  uint32_t recv_id = 0;  // the id the sender's data tags carry (SpanningPlan::recv_ids)
  uint64_t epoch = 0;    // the sender's incarnation
  std::vector<uint32_t> ranks;
};

// Rank 0's node decided: the communicator forms with this plan.
struct FormDecision {
  std::string key;
  uint32_t mode = 0;
  SpanningPlan plan;
};

// A forming or formed communicator failed (comm_tag 0: still forming).
struct CommFailure {
  std::string key;
  uint32_t comm_tag = 0;
  uint32_t code = 0;  // StatusCode
  std::string reason;
  // The sender withdrew its members still forming under the key: whatever it
  // announced of the key before is stale.
  bool withdrew = false;
  // Passed on by a node that heard it from another (not passed on again).
  bool relayed = false;
};

struct ControlMessage {
  enum class Kind : uint8_t { kAnnounce = 1, kForm = 2, kFailure = 3 } kind = Kind::kAnnounce;
  JoinAnnounce announce;
  FormDecision form;
  CommFailure failure;
};

std::string EncodeControl(const ControlMessage& m);
// INVALID_ARGUMENT naming what is wrong when `bytes` is not one well-formed message.
Status DecodeControl(const std::string& bytes, ControlMessage* out);

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_COMM_MESSAGES_H_

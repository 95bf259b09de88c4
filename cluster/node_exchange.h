// The part of an op that crosses nodes, for a communicator whose ranks live
// on several daemons (docs/multinode.md). Each node's executors reduce (or
// gather) their ranks into a staging area first; this node's rank 0 then
// calls Exchange, which moves the nodes' parts over the transport:
//   all-reduce  at most kDirectMaxBytes (two nodes: kDirectMaxBytesTwoNodes):
//               every node sends its part to every other and reduces them
//               all in node order (one round);
//               above, a ring reduce-scatter then all-gather between nodes
//               (each node reduces 1/N of the vector, not all of it).
//               Either way every node ends with the same bits.
//   all-gather  every node sends its ranks' chunks to every other.
// Transfers are split into pieces of kPieceBytes; a piece is reduced as soon
// as it arrived (and left), while the next ones are on the wire.
// Messages are tagged with (the receiver's id for the communicator, op
// index, direct or ring, the descriptor's code, step, piece, last piece or
// not): ops never match by arrival order, and nodes whose ops differ fail (a
// length mismatch or the op deadline) instead of mixing data: another kind,
// type or reduce op has another code; another count gives another length,
// number of pieces (the last one is marked) or algorithm. The receiver chose its id when it
// announced the key, unique among its communicators (Registry): a part
// left in its transport's queue by a failed op of an ended communicator
// (a receive cancelled before the part came) never matches a later one.
#ifndef COLLECTIVED_CLUSTER_NODE_EXCHANGE_H_
#define COLLECTIVED_CLUSTER_NODE_EXCHANGE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "cluster/ucx_transport.h"
#include "collectived/status.h"
#include "executor/host_executor.h"

namespace collectived::cluster {

// Who holds which ranks of a communicator spanning nodes; the same on every node.
struct SpanningPlan {
  uint32_t comm_tag = 0;  // cluster-wide id while it lives, in control messages (kCommTagBits)
  uint32_t world = 0;     // ranks on every node
  std::vector<uint32_t> nodes;               // ascending node ids
  std::vector<std::vector<uint32_t>> ranks;  // per entry of `nodes`: its global ranks, ascending
  std::vector<uint32_t> recv_ids;            // per entry: the id its data tags carry (kRecvIdBits)
  std::vector<uint64_t> epochs;              // per entry: the incarnation that announced its ranks
};
constexpr unsigned kCommTagBits = 20;
constexpr unsigned kRecvIdBits = 24;
constexpr uint32_t kMaxPieces = 1u << 15;  // per transfer (15 bits of the tag)

// The data tag: receiver's id 24 | op index 7 | ring 1 | descriptor code 8 |
// step 8 | last piece 1 | piece 15.
uint64_t DataTag(uint32_t recv_id, uint64_t op_index, bool ring, uint32_t desc_code, uint32_t step, uint32_t piece,
                 bool last);
// The kind, type and reduce op every node must agree on, exactly, in 8 bits
// (the count: each transfer's length is checked).
uint32_t DescriptorCode(const ring::OpDescriptor& d);
// INVALID_ARGUMENT unless `plan` names `self` once, every rank once, at
// most 256 nodes (every rank in [0, world)), an id and epoch per node.
Status CheckPlan(const SpanningPlan& plan, uint32_t self);

class SpanningExchange : public host::NodeExchange {
 public:
  static constexpr uint64_t kDirectMaxBytes = 256 * 1024;
  // Two nodes send the same bytes either way: one round beats two up to
  // where reducing the whole vector (not half) costs more than the round.
  static constexpr uint64_t kDirectMaxBytesTwoNodes = 4 << 20;
  static constexpr uint64_t kPieceBytes = 1 << 20;

  // `transport` outlives this. Staging and scratch are reserved (not
  // touched) for messages of up to `max_message_bytes` per rank.
  static Status Create(UcxTransport* transport, uint32_t self, SpanningPlan plan, uint64_t max_message_bytes,
                       std::unique_ptr<SpanningExchange>* out);
  ~SpanningExchange() override;

  uint32_t global_world() const override { return plan_.world; }
  uint32_t global_rank(uint32_t local_rank) const override { return plan_.ranks[self_index_][local_rank]; }
  uint32_t StagingSlot(uint32_t global_rank) const override { return slot_of_[global_rank]; }
  uint8_t* staging() const override;
  uint64_t max_part_bytes() const override { return max_message_bytes_; }
  std::atomic<uint64_t>& exchange_done() override { return done_; }
  Status Exchange(uint64_t index, const ring::OpDescriptor& d, const uint8_t* own, uint8_t* out, bool only_out,
                  const ring::WaitContext& ctx) override;

  const SpanningPlan& plan() const { return plan_; }
  uint32_t local_world() const { return static_cast<uint32_t>(plan_.ranks[self_index_].size()); }
  bool Spans(uint32_t node) const;
  // Time spent in Exchange and bytes this node sent, over all ops.
  uint64_t exchange_ns() const { return exchange_ns_.load(); }
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t exchanges() const { return exchanges_.load(); }

 private:
  struct Memory;
  SpanningExchange() = default;
  // `work`: where partial and final elements go (staging, or `out` itself);
  // `out`, when set and not `work`, gets each final piece copied.
  // `op_tag`: DataTag(0, index, ring, code, 0, 0, false); To/From add the
  // receiver's id, the step and the piece (of `pieces`).
  uint64_t To(uint32_t entry, uint64_t op_tag, uint32_t step, uint32_t piece, uint32_t pieces) const;
  uint64_t From(uint64_t op_tag, uint32_t step, uint32_t piece, uint32_t pieces) const {
    return To(self_index_, op_tag, step, piece, pieces);
  }
  Status AllReduceDirect(uint64_t tag_base, const ring::OpDescriptor& d, const uint8_t* own, uint8_t* work,
                         uint8_t* out, const ring::WaitContext& ctx);
  Status AllReduceRing(uint64_t tag_base, const ring::OpDescriptor& d, const uint8_t* own, uint8_t* work,
                       uint8_t* out, const ring::WaitContext& ctx);
  Status AllGather(uint64_t tag_base, const ring::OpDescriptor& d, uint8_t* chunks, const ring::WaitContext& ctx);
  // A post failed: ends the transfers posted before it, returns `why`.
  Status Abandon(std::vector<std::unique_ptr<Transfer>>* transfers, const Status& why);

  UcxTransport* transport_ = nullptr;
  SpanningPlan plan_;
  uint32_t self_index_ = 0;
  uint64_t max_message_bytes_ = 0;
  std::vector<uint32_t> slot_of_;     // global rank -> staging chunk (node order)
  std::vector<uint32_t> first_slot_;  // per node entry: its first staging chunk
  std::shared_ptr<Memory> memory_;    // staging and scratch; kept by transfers a failed wait left behind
  std::atomic<uint64_t> done_{0};
  std::atomic<uint64_t> exchange_ns_{0}, bytes_sent_{0}, exchanges_{0};
};

}  // namespace collectived::cluster

#endif  // COLLECTIVED_CLUSTER_NODE_EXCHANGE_H_

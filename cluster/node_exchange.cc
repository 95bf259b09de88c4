#include "cluster/node_exchange.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/host/reduce.h"

namespace collectived::cluster {

uint64_t DataTag(uint32_t recv_id, uint64_t op_index, bool ring, uint32_t desc_code, uint32_t step, uint32_t piece,
                 bool last) {
  // Nodes are at most one exchange apart (an exchange ends on no node before
  // every node sent its part, and a failed one ends the communicator), so 7
  // bits of the index tell neighbours apart (the GPU executor's chunks c <
  // 64 of op i are index 64i + c: neighbouring ops' ranges stay apart too).
  return (uint64_t{recv_id} & ((1u << kRecvIdBits) - 1)) << 40 | (op_index & 0x7f) << 33 | uint64_t{ring} << 32 |
         uint64_t{desc_code & 0xff} << 24 | uint64_t{step & 0xff} << 16 | uint64_t{last} << 15 | (piece & 0x7fff);
}

uint32_t DescriptorCode(const ring::OpDescriptor& d) {
  // kind 2 bits | type 3 | reduce op 3: every value exactly (a new one must widen this).
  static_assert(static_cast<uint32_t>(CollectiveKind::kAllGather) < 4, "kind takes 2 bits of the tag");
  static_assert(static_cast<uint32_t>(DataType::kUint32) < 8, "type takes 3 bits of the tag");
  static_assert(static_cast<uint32_t>(ReduceOp::kAvg) < 8, "reduce op takes 3 bits of the tag");
  return (static_cast<uint32_t>(d.kind) & 3) << 6 | (static_cast<uint32_t>(d.dtype) & 7) << 3 |
         (static_cast<uint32_t>(d.reduce_op) & 7);
}

Status CheckPlan(const SpanningPlan& plan, uint32_t self) {
  if (plan.nodes.size() < 2 || plan.nodes.size() > 128 || plan.ranks.size() != plan.nodes.size()) {
    return Status::InvalidArgument("a communicator across nodes needs 2 to 128 nodes, each with its ranks");
  }
  if (plan.comm_tag >= (1u << kCommTagBits)) return Status::InvalidArgument("communicator tag out of range");
  if (plan.recv_ids.size() != plan.nodes.size() || plan.epochs.size() != plan.nodes.size()) {
    return Status::InvalidArgument("a plan needs a receive id and an epoch per node");
  }
  for (uint32_t id : plan.recv_ids) {
    if (id == 0 || id >= (1u << kRecvIdBits)) return Status::InvalidArgument("receive id out of range");
  }
  std::vector<bool> seen(plan.world, false);
  uint32_t total = 0;
  bool has_self = false;
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    if (i > 0 && plan.nodes[i] <= plan.nodes[i - 1]) return Status::InvalidArgument("nodes not ascending");
    if (plan.nodes[i] > 255) return Status::InvalidArgument("node id above 255");
    has_self = has_self || plan.nodes[i] == self;
    if (plan.ranks[i].empty()) return Status::InvalidArgument("node " + std::to_string(plan.nodes[i]) + " has no ranks");
    for (uint32_t r : plan.ranks[i]) {
      if (r >= plan.world || seen[r]) {
        return Status::InvalidArgument("rank " + std::to_string(r) + " outside the world or named twice");
      }
      seen[r] = true;
      ++total;
    }
  }
  if (total != plan.world) return Status::InvalidArgument("the nodes' ranks do not cover the world");
  if (!has_self) return Status::InvalidArgument("this node holds no rank of the communicator");
  return Status::Ok();
}

// Staging (the executors' and the exchange's) and scratch (what arrives
// before it is reduced): reserved, touched only as far as messages reach.
struct SpanningExchange::Memory {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  uint8_t* staging = nullptr;
  uint8_t* scratch = nullptr;
  ~Memory() {
    if (base != MAP_FAILED) munmap(base, bytes);
  }
};

Status SpanningExchange::Create(UcxTransport* transport, uint32_t self, SpanningPlan plan, uint64_t max_message_bytes,
                                std::unique_ptr<SpanningExchange>* out) {
  COLLECTIVED_RETURN_IF_ERROR(CheckPlan(plan, self));
  std::unique_ptr<SpanningExchange> ex(new SpanningExchange());
  ex->transport_ = transport;
  ex->self_index_ = static_cast<uint32_t>(std::find(plan.nodes.begin(), plan.nodes.end(), self) - plan.nodes.begin());
  ex->slot_of_.assign(plan.world, 0);
  uint32_t slot = 0;
  for (const auto& ranks : plan.ranks) {
    ex->first_slot_.push_back(slot);
    for (uint32_t r : ranks) ex->slot_of_[r] = slot++;
  }
  const uint64_t page = 4096;
  const uint64_t staging = (max_message_bytes * plan.world + page - 1) / page * page;
  const uint64_t scratch =
      std::max<uint64_t>(max_message_bytes, (plan.nodes.size() - 1) * kDirectMaxBytes) + page;
  auto memory = std::make_shared<Memory>();
  memory->bytes = staging + scratch;
  memory->base = mmap(nullptr, memory->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
  if (memory->base == MAP_FAILED) {
    return Status::ResourceExhausted("cannot reserve " + std::to_string(memory->bytes) +
                                     " bytes of staging for a communicator across nodes");
  }
  memory->staging = static_cast<uint8_t*>(memory->base);
  memory->scratch = memory->staging + staging;
  ex->memory_ = std::move(memory);
  ex->max_message_bytes_ = max_message_bytes;
  ex->plan_ = std::move(plan);
  *out = std::move(ex);
  return Status::Ok();
}

SpanningExchange::~SpanningExchange() = default;

uint8_t* SpanningExchange::staging() const { return memory_->staging; }

bool SpanningExchange::Spans(uint32_t node) const {
  return std::find(plan_.nodes.begin(), plan_.nodes.end(), node) != plan_.nodes.end();
}

Status SpanningExchange::Exchange(uint64_t index, const ring::OpDescriptor& d, const uint8_t* own, uint8_t* out,
                                  bool only_out, const ring::WaitContext& ctx) {
  // Working in `out` itself saves a copy of every element; a receive a failed
  // wait could not cancel may then still write `out` (the op has failed).
  uint8_t* chunks = out != nullptr ? out : memory_->staging;  // all-gather's
  uint8_t* work = only_out && out != nullptr ? out : memory_->staging;
  if (work == out) out = nullptr;
  const int64_t start = ring::NowNs();
  const uint64_t n = plan_.nodes.size();
  const uint64_t bytes = d.count * DataTypeSize(d.dtype);
  const bool gather = d.kind == CollectiveKind::kAllGather;
  const bool direct = !gather && bytes <= (n == 2 ? kDirectMaxBytesTwoNodes : kDirectMaxBytes);
  // The longest transfer must number its pieces within the tag's field.
  uint64_t longest = direct ? bytes : ((d.count + n - 1) / n) * DataTypeSize(d.dtype);
  if (gather) {
    for (const auto& ranks : plan_.ranks) longest = std::max<uint64_t>(longest, ranks.size() * bytes);
  }
  if (!gather && bytes > max_message_bytes_) {
    return Status::InvalidArgument("an all-reduce part of " + std::to_string(bytes) + " bytes across nodes is above "
                                   "max_message_bytes " + std::to_string(max_message_bytes_));
  }
  if ((longest + kPieceBytes - 1) / kPieceBytes > kMaxPieces) {
    return Status::InvalidArgument("a transfer of " + std::to_string(longest) + " bytes between nodes is more than " +
                                   std::to_string(kMaxPieces) + " pieces of " + std::to_string(kPieceBytes) + " bytes");
  }
  const uint64_t tag_base = DataTag(0, index, !gather && !direct, DescriptorCode(d), 0, 0, false);
  Status s;
  if (d.count == 0) {
    s = Status::Ok();
  } else if (gather) {
    s = AllGather(tag_base, d, chunks, ctx);
  } else if (direct) {
    s = AllReduceDirect(tag_base, d, own, work, out, ctx);
  } else {
    s = AllReduceRing(tag_base, d, own, work, out, ctx);
  }
  exchange_ns_.fetch_add(static_cast<uint64_t>(ring::NowNs() - start));
  exchanges_.fetch_add(1);
  return s;
}

namespace {

// Pieces of [0, count) elements of `esize` bytes, at most kPieceBytes each.
struct Pieces {
  uint64_t per_piece;  // elements
  uint64_t count;
  uint32_t n;
  Pieces(uint64_t count_, size_t esize) : count(count_) {
    per_piece = std::max<uint64_t>(1, SpanningExchange::kPieceBytes / esize);
    n = static_cast<uint32_t>((count + per_piece - 1) / per_piece);
  }
  uint64_t begin(uint32_t p) const { return p * per_piece; }
  uint64_t end(uint32_t p) const { return std::min(count, (p + 1) * per_piece); }
};

}  // namespace

uint64_t SpanningExchange::To(uint32_t entry, uint64_t op_tag, uint32_t step, uint32_t piece, uint32_t pieces) const {
  return op_tag | DataTag(plan_.recv_ids[entry], 0, false, 0, step, piece, piece + 1 == pieces);
}

Status SpanningExchange::Abandon(std::vector<std::unique_ptr<Transfer>>* transfers, const Status& why) {
  // The last one was never posted; the others may be in flight: cancel them
  // (a wait already past its deadline), keeping their buffers until they end.
  if (!transfers->empty()) transfers->pop_back();
  transport_->WaitAll(transfers, ring::WaitContext{nullptr, nullptr, ring::NowNs()}, memory_);
  return why;
}

Status SpanningExchange::AllReduceDirect(uint64_t tag_base, const ring::OpDescriptor& d, const uint8_t* own,
                                         uint8_t* work, uint8_t* out, const ring::WaitContext& ctx) {
  const uint32_t n = static_cast<uint32_t>(plan_.nodes.size());
  const uint32_t self = self_index_;
  const size_t esize = DataTypeSize(d.dtype);
  const uint64_t bytes = d.count * esize;
  const ReduceOp op = d.reduce_op == ReduceOp::kAvg ? ReduceOp::kSum : d.reduce_op;
  const Pieces pieces(d.count, esize);
  auto part_of = [&](uint32_t k) -> const uint8_t* {  // node entry k's part (its arrival, or ours)
    return k == self ? own : memory_->scratch + uint64_t{k < self ? k : k - 1} * bytes;
  };
  std::vector<std::unique_ptr<Transfer>> transfers;
  std::vector<uint32_t> piece_of;
  for (uint32_t p = 0; p < pieces.n; ++p) {
    const uint64_t off = pieces.begin(p) * esize, len = (pieces.end(p) - pieces.begin(p)) * esize;
    for (uint32_t k = 0; k < n; ++k) {
      if (k == self) continue;
      transfers.push_back(std::make_unique<Transfer>());
      piece_of.push_back(p);
      Status posted = transport_->PostRecv(plan_.nodes[k], From(tag_base, k, p, pieces.n),
                                           memory_->scratch + uint64_t{k < self ? k : k - 1} * bytes + off, len,
                                           transfers.back().get());
      if (!posted.ok()) return Abandon(&transfers, posted);
      transfers.push_back(std::make_unique<Transfer>());
      piece_of.push_back(p);
      Status sent = transport_->PostSend(plan_.nodes[k], To(k, tag_base, self, p, pieces.n), own + off, len,
                                         transfers.back().get());
      if (!sent.ok()) return Abandon(&transfers, sent);
      bytes_sent_.fetch_add(len);
    }
  }
  // A piece is reduced once it arrived from every node and left for every
  // node (`own` may be `work`, which the reduction overwrites).
  std::vector<uint32_t> ended(pieces.n, 0);
  std::vector<const void*> inputs(n);
  return transport_->WaitAll(&transfers, ctx, memory_, [&](size_t i) {
    const uint32_t p = piece_of[i];
    if (++ended[p] < 2 * (n - 1)) return Status::Ok();
    for (uint32_t k = 0; k < n; ++k) inputs[k] = part_of(k);
    host::ReduceElements(d.dtype, op, work, inputs.data(), n, pieces.begin(p), pieces.end(p));
    if (out != nullptr) {
      std::memcpy(out + pieces.begin(p) * esize, work + pieces.begin(p) * esize,
                  (pieces.end(p) - pieces.begin(p)) * esize);
    }
    return Status::Ok();
  });
}

Status SpanningExchange::AllReduceRing(uint64_t tag_base, const ring::OpDescriptor& d, const uint8_t* own,
                                       uint8_t* work, uint8_t* out, const ring::WaitContext& ctx) {
  const uint32_t n = static_cast<uint32_t>(plan_.nodes.size());
  const uint32_t self = self_index_;
  const uint32_t next = plan_.nodes[(self + 1) % n], prev = plan_.nodes[(self + n - 1) % n];
  const size_t esize = DataTypeSize(d.dtype);
  const ReduceOp op = d.reduce_op == ReduceOp::kAvg ? ReduceOp::kSum : d.reduce_op;
  const uint64_t chunk = (d.count + n - 1) / n;
  auto chunk_begin = [&](uint32_t c) { return std::min<uint64_t>(d.count, chunk * c); };
  auto chunk_end = [&](uint32_t c) { return std::min<uint64_t>(d.count, chunk * c + chunk); };
  uint8_t* staging = work;
  uint8_t* scratch = memory_->scratch;
  // Step t < n-1: reduce-scatter (send chunk self-t, receive chunk self-t-1
  // and add this node's part of it); then all-gather (send chunk
  // self+1-t', receive chunk self-t'). This node's part is read from `own`
  // (step 0's send, each reduction); partial and final chunks are in `work`
  // (here `staging`). Steps run one after another: what a step writes, no transfer
  // in flight reads.
  auto publish = [&](uint64_t begin, uint64_t end) {  // final elements [begin, end) to `out`
    if (out != nullptr && end > begin) std::memcpy(out + begin * esize, staging + begin * esize, (end - begin) * esize);
  };
  for (uint32_t t = 0; t < 2 * (n - 1); ++t) {
    const bool reduce = t < n - 1;
    const uint32_t u = reduce ? t : t - (n - 1);
    const uint32_t send_chunk = reduce ? (self + n - u % n) % n : (self + 1 + n - u % n) % n;
    const uint32_t recv_chunk = reduce ? (self + 2 * n - u - 1) % n : (self + n - u % n) % n;
    const uint64_t sb = chunk_begin(send_chunk), se = chunk_end(send_chunk);
    const uint64_t rb = chunk_begin(recv_chunk), re = chunk_end(recv_chunk);
    const Pieces sp(se - sb, esize), rp(re - rb, esize);
    std::vector<std::unique_ptr<Transfer>> transfers;
    std::vector<int64_t> recv_piece;  // -1: a send
    for (uint32_t p = 0; p < rp.n; ++p) {
      transfers.push_back(std::make_unique<Transfer>());
      recv_piece.push_back(p);
      uint8_t* dst = (reduce ? scratch : staging + rb * esize) + rp.begin(p) * esize;
      Status posted = transport_->PostRecv(prev, From(tag_base, t, p, rp.n), dst, (rp.end(p) - rp.begin(p)) * esize,
                                           transfers.back().get());
      if (!posted.ok()) return Abandon(&transfers, posted);
    }
    const uint8_t* from = t == 0 ? own : staging;
    for (uint32_t p = 0; p < sp.n; ++p) {
      const uint64_t len = (sp.end(p) - sp.begin(p)) * esize;
      transfers.push_back(std::make_unique<Transfer>());
      recv_piece.push_back(-1);
      Status sent = transport_->PostSend(next, To((self + 1) % n, tag_base, t, p, sp.n), from + (sb + sp.begin(p)) * esize, len,
                                         transfers.back().get());
      if (!sent.ok()) return Abandon(&transfers, sent);
      bytes_sent_.fetch_add(len);
    }
    if (t == n - 1) publish(sb, se);  // the chunk this node finished reducing
    COLLECTIVED_RETURN_IF_ERROR(transport_->WaitAll(&transfers, ctx, memory_, [&](size_t i) {
      if (recv_piece[i] < 0) return Status::Ok();
      const uint32_t p = static_cast<uint32_t>(recv_piece[i]);
      if (!reduce) {
        publish(rb + rp.begin(p), rb + rp.end(p));
        return Status::Ok();
      }
      const void* in[2] = {scratch, own + rb * esize};
      host::ReduceElements(d.dtype, op, staging + rb * esize, in, 2, rp.begin(p), rp.end(p));
      return Status::Ok();
    }));
  }
  return Status::Ok();
}

Status SpanningExchange::AllGather(uint64_t tag_base, const ring::OpDescriptor& d, uint8_t* chunks,
                                   const ring::WaitContext& ctx) {
  const uint32_t n = static_cast<uint32_t>(plan_.nodes.size());
  const uint32_t self = self_index_;
  const uint64_t chunk_bytes = d.count * DataTypeSize(d.dtype);
  std::vector<std::unique_ptr<Transfer>> transfers;
  auto block = [&](uint32_t k, uint64_t* len) {
    *len = plan_.ranks[k].size() * chunk_bytes;
    return chunks + uint64_t{first_slot_[k]} * chunk_bytes;
  };
  for (uint32_t k = 0; k < n; ++k) {
    if (k == self) continue;
    uint64_t len = 0;
    uint8_t* dst = block(k, &len);
    const Pieces p(len, 1);
    for (uint32_t i = 0; i < p.n; ++i) {
      transfers.push_back(std::make_unique<Transfer>());
      Status posted = transport_->PostRecv(plan_.nodes[k], From(tag_base, k, i, p.n), dst + p.begin(i),
                                           p.end(i) - p.begin(i), transfers.back().get());
      if (!posted.ok()) return Abandon(&transfers, posted);
    }
  }
  uint64_t own_len = 0;
  const uint8_t* own = block(self, &own_len);
  const Pieces p(own_len, 1);
  for (uint32_t k = 0; k < n; ++k) {
    if (k == self) continue;
    for (uint32_t i = 0; i < p.n; ++i) {
      transfers.push_back(std::make_unique<Transfer>());
      Status sent = transport_->PostSend(plan_.nodes[k], To(k, tag_base, self, i, p.n), own + p.begin(i),
                                         p.end(i) - p.begin(i), transfers.back().get());
      if (!sent.ok()) return Abandon(&transfers, sent);
      bytes_sent_.fetch_add(p.end(i) - p.begin(i));
    }
  }
  return transport_->WaitAll(&transfers, ctx, memory_);
}

}  // namespace collectived::cluster
